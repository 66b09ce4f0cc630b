'use strict';
// The BullMQ face: a processor that runs while holding a lease, and a stop
// by job from any process.
//
//   const { Worker } = require('bullmq');
//   const { open } = require('mistri-locks');
//   const { leased, stop } = require('mistri-locks/bullmq');
//
//   const locks = open('redis://127.0.0.1:6379/0');
//   new Worker('reports', leased(async (job, lease) => {
//     for (const batch of batches(job.data.accountId)) {
//       lease.checkpoint();                  // throws Interrupted when stopped or lost
//       await write(batch, { fence: lease.fence, signal: lease.signal });
//     }
//   }, { locks, key: (job) => `report:${job.data.accountId}`, ttl: 60, onConflict: 'retry' }),
//   { connection });
//
//   await stop(job, { locks });              // from any process (or stop('reports', id, ...))
//
// The face keeps only what is BullMQ's: the key computed from the job, the
// retry scheduled with BullMQ's own delay (job.moveToDelayed + DelayedError)
// or failure (BullMQ's attempts/backoff then apply), and the job's identity.
// Everything else is the core's, reached by name (docs/JOBS.md): the options
// and their checks and defaults (jobOptions), the backoff (jobBackoff), the
// job stop key (jobStopKey), the interruption (lease.interruption).
//
// The job's identity is `<queue name>:<job id>`: BullMQ numbers jobs per
// queue (1, 2, 3 ... in every queue), so a bare id would name a job of
// every queue. Its stop key is the core's job stop key of that identity
// (`jobStopKey`, docs/PROTOCOL.md "Jobs"): the key Python
// (`locks.stop_job("reports:7")`), Ruby (`locks.stop_job("reports:7")`), C
// (`mistri_locks_stop_job`) and the CLI raise. The lease carries it in its
// holder description, so `mistri-locks stop --holder-of KEY` and
// `locks.stopHolders(KEY)` stop whatever job holds KEY.
//
// Nothing of BullMQ is loaded by this file: a job is read through its
// public fields (id, queueName, attemptsStarted, moveToDelayed), and the
// DelayedError BullMQ's worker recognises by name is required from
// 'bullmq' only when a retry is scheduled.

const mistri = require('./index.cjs');
const native = require('./native.cjs');

const { Interrupted, LocksError } = mistri;

/** The face's own options; every other one goes by name to the core's JobOptions. */
const FACE_OPTIONS = ['key', 'locks'];

/** `onConflict` -> `on_conflict`: the core's names, spelt as JavaScript spells them. */
const snake = (name) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** The lease on a job's key was held elsewhere (`onConflict: 'raise'`, or 'retry' out of attempts). */
class Conflict extends Error {
  constructor(key, attempts, message) {
    super(message || `the lease on ${JSON.stringify(key)} is held elsewhere`);
    this.name = 'Conflict';
    this.key = key;
    this.attempts = attempts;
  }
}

/** The identity a leased job's stop key is made of: `<queue name>:<job id>`. */
function jobRef(queueOrJob, jobId) {
  let queue = queueOrJob;
  let id = jobId;
  if (queueOrJob !== null && typeof queueOrJob === 'object' && jobId === undefined) {
    // A Job (or anything with queueName and id).
    queue = queueOrJob.queueName;
    id = queueOrJob.id;
  } else if (queueOrJob !== null && typeof queueOrJob === 'object') {
    queue = queueOrJob.name; // a Queue or Worker
  }
  if (typeof queue !== 'string' || queue === '') {
    throw new TypeError(
      'mistri-locks/bullmq: a job is named by its queue and id: pass a Job, or (queue, jobId) with ' +
        `queue a Queue, a Worker or a queue name (got ${describe(queueOrJob)})`,
    );
  }
  if (typeof id === 'number' && Number.isInteger(id)) id = String(id);
  if (typeof id !== 'string' || id === '') {
    throw new TypeError(`mistri-locks/bullmq: a job id must be a non-empty string, got ${describe(id)}`);
  }
  return `${queue}:${id}`;
}

/**
 * The stop flag of a leased job: the core's job stop key of
 * `<queue>:<id>`. `stopKey(job)` or `stopKey(queue, jobId)`.
 */
function stopKey(queueOrJob, jobId) {
  return mistri.jobStopKey(jobRef(queueOrJob, jobId));
}

/**
 * Asks a leased job to stop, from any process: raises its stop flag (for
 * `ttl` seconds, default the flag TTL) on `locks`. Its lease.signal aborts
 * within a tick (sooner by push) and its next `lease.checkpoint()` throws
 * `Interrupted` (reason 'stopped'); a job not started yet stops when it
 * starts, while the flag is up. `stop(job, {locks})` or
 * `stop(queue, jobId, {locks})`. Resolves with the stop key raised.
 */
async function stop(queueOrJob, jobIdOrOptions, maybeOptions) {
  const isJob = queueOrJob !== null && typeof queueOrJob === 'object' && 'queueName' in queueOrJob;
  const jobId = isJob ? undefined : jobIdOrOptions;
  const options = (isJob ? jobIdOrOptions : maybeOptions) || {};
  const locks = options.locks;
  checkLocks(locks, 'stop');
  const key = stopKey(queueOrJob, jobId);
  await locks.setFlag(key, options.ttl === undefined ? {} : { ttl: options.ttl });
  return key;
}

/**
 * Wraps a BullMQ processor: each run of a job holds the lease `key` names
 * for as long as the processor runs, renewed on the heartbeat, watching
 * the job's stop key. The processor is called as
 * `processor(job, lease, token, signal)` (token and signal: BullMQ's).
 * See docs/NODE.md, "BullMQ".
 */
function leased(processor, options) {
  if (typeof processor !== 'function') {
    throw new TypeError(`mistri-locks/bullmq: leased(processor, options): processor must be a function, got ${describe(processor)}`);
  }
  const spec = new LeaseSpec(options);
  const run = async function leasedProcessor(job, token, signal) {
    return spec.run(processor, job, token, signal);
  };
  Object.defineProperty(run, 'leaseOptions', { value: spec.options, enumerable: true });
  return run;
}

class LeaseSpec {
  constructor(options) {
    if (options === null || typeof options !== 'object') {
      throw new TypeError('mistri-locks/bullmq: leased(processor, options): options must be an object with at least key and locks');
    }
    const { key, locks } = options;
    if (typeof key === 'string') {
      if (key === '') throw new TypeError('mistri-locks/bullmq: key must not be empty');
    } else if (typeof key !== 'function') {
      throw new TypeError(`mistri-locks/bullmq: key must be a string or a function of the job, got ${describe(key)}`);
    }
    if (typeof locks !== 'function') checkLocks(locks, 'leased');
    this.key = key;
    this.locks = locks;
    // The numbers and policies: read by name, checked and defaulted by the
    // core (JobOptions), in its words (an unknown name: the nearest known
    // one). BullMQ's default conflict policy is the core's, retry: a job
    // that conflicts is usually a duplicate of work that must still happen
    // (as in Ruby's job faces).
    this.named = [];
    for (const [name, v] of Object.entries(options)) {
      if (FACE_OPTIONS.includes(name) || v === undefined) continue;
      const opt = { name: snake(name) };
      if (typeof v === 'number') opt.number = v;
      else if (typeof v === 'string') opt.text = v;
      else if (typeof v === 'boolean') opt.flag = v;
      else if (v !== null) throw new TypeError(`mistri-locks/bullmq: ${name} must be a number or a string, got ${describe(v)}`);
      this.named.push(opt);
    }
    const checked = core(() => native.jobOptions(this.named));
    this.options = Object.freeze({ ...checked, backoff: checked.backoff ?? null });
  }

  /** Seconds before retry `attempt` (the core's backoff, jittered ±25 %). */
  backoff(attempt) {
    return core(() => native.jobBackoff(this.named, attempt, Math.random()));
  }

  keyFor(job) {
    if (typeof this.key === 'string') return this.key;
    const key = this.key(job);
    if (typeof key !== 'string' || key === '') {
      throw new TypeError(`mistri-locks/bullmq: the key function returned ${describe(key)}, not a non-empty string`);
    }
    return key;
  }

  locksFor() {
    const locks = typeof this.locks === 'function' ? this.locks() : this.locks;
    checkLocks(locks, 'leased: the locks function');
    return locks;
  }

  async run(processor, job, token, signal) {
    const key = this.keyFor(job);
    const locks = this.locksFor();
    const stop = stopKey(job);
    let lease;
    try {
      lease = await this.start(locks, key, stop, job, signal);
    } catch (e) {
      if (!(e instanceof LocksError) || e.code !== 'MISTRI_CONNECTION') throw e;
      return this.unreachable(job, token, key, e);
    }
    if (!lease) return this.conflict(job, token, key);
    let result;
    let interrupted = null;
    let failed = true;
    try {
      result = await processor(job, lease, token, signal);
      failed = false;
    } catch (err) {
      const why = interruptionOf(lease, err);
      if (!why) throw err;
      interrupted = { why, err };
    } finally {
      await releaseQuietly(lease, key, failed && !interrupted);
    }
    if (interrupted) return this.interrupted(job, token, locks, stop, interrupted);
    return result;
  }

  start(locks, key, stop, job, signal) {
    const o = this.options;
    return locks.hold(key, {
      ttl: o.ttl,
      heartbeat: o.heartbeat,
      limit: o.limit,
      // wait 0: try once (Web Locks' ifAvailable); Infinity: no limit.
      ...(o.wait > 0 ? { wait: o.wait } : { ifAvailable: true }),
      stopKey: stop,
      label: `${locks.label} bullmq:${job.queueName}`,
      // BullMQ's cancellation (worker.cancelJob): ends a wait in line, and
      // aborts lease.signal with BullMQ's reason.
      signal,
    });
  }

  /**
   * The backend could not be reached when the run started: the job is not
   * lost, whatever onConflict says. It runs again after the backoff
   * (BullMQ's delay), at most `attempts` runs in all; the last fails with
   * the connection error.
   */
  async unreachable(job, token, key, error) {
    const runs = job.attemptsStarted || 1;
    if (runs >= this.options.attempts) throw error;
    const wait = this.backoff(runs);
    process.emitWarning(
      `${job.queueName}:${job.id}: the lease backend is unreachable at start (${error.message}); ` +
        `run ${runs} of ${this.options.attempts}, again in ${wait.toFixed(3)} s (lease ${JSON.stringify(key)})`,
      { code: 'MISTRI_LOCKS_UNREACHABLE' },
    );
    return later(job, token, wait);
  }

  async conflict(job, token, key) {
    const o = this.options;
    switch (o.onConflict) {
      case 'skip':
        return undefined;
      case 'raise':
        throw new Conflict(key, job.attemptsStarted);
      default: {
        // retry: attemptsStarted counts this run (BullMQ counts every move
        // to active, also those a DelayedError ends).
        const runs = job.attemptsStarted || 1;
        if (runs >= o.attempts) {
          throw new Conflict(key, runs, `the lease on ${JSON.stringify(key)} was held elsewhere ${runs} times; giving up`);
        }
        return later(job, token, this.backoff(runs));
      }
    }
  }

  async interrupted(job, token, locks, stop, { why, err }) {
    const o = this.options;
    const policy = why === 'lost' ? o.onLost : o.onStopped;
    switch (policy) {
      case 'raise':
        throw err;
      case 'skip':
        return undefined;
      default:
        // The retry keeps the job id, and so the stop key: lower it, or the
        // retry would stop at once.
        if (why === 'stopped') await locks.clearFlag(stop);
        return later(job, token, this.backoff(1));
    }
  }
}

/** 'stopped' or 'lost' when `err` ended the run because the lease was interrupted; else null. */
function interruptionOf(lease, err) {
  if (err instanceof Interrupted) return err.reason;
  if (!lease.signal.aborted) return null;
  // An API handed lease.signal rejects with its reason (fetch, timers/promises)
  // or with an AbortError.
  const reason = lease.signal.reason;
  if (err === reason || (err && err.name === 'AbortError')) {
    return reason instanceof Interrupted ? reason.reason : 'stopped';
  }
  return null;
}

async function releaseQuietly(lease, key, failed) {
  try {
    await lease.release();
  } catch (e) {
    // The processor's own error is the one BullMQ must see; otherwise the
    // job did its work, and the lease expires within its ttl.
    if (!failed) {
      process.emitWarning(`releasing ${JSON.stringify(key)}: ${e.message} (it expires within its ttl)`, {
        code: 'MISTRI_LOCKS_RELEASE',
      });
    }
  }
}

/** Runs the job again in `seconds`, through BullMQ's own delay. */
async function later(job, token, seconds) {
  if (typeof job.moveToDelayed !== 'function' || !token) {
    throw new TypeError(
      'mistri-locks/bullmq: a retry needs a BullMQ Job and its token (the processor of a Worker gets both)',
    );
  }
  await job.moveToDelayed(Date.now() + Math.round(seconds * 1000), token);
  throw delayedError();
}

function delayedError() {
  try {
    // BullMQ's worker recognises it by class or by name: either works.
    const { DelayedError } = require('bullmq');
    return new DelayedError();
  } catch {
    const e = new Error('bullmq:movedToDelayed');
    e.name = 'DelayedError';
    return e;
  }
}

function checkLocks(locks, where) {
  if (locks === null || typeof locks !== 'object' || typeof locks.hold !== 'function') {
    throw new TypeError(
      `mistri-locks/bullmq: ${where}: locks must be the handle open(url) returns` +
        (where === 'leased' ? ', or a function returning one' : '') +
        `, got ${describe(locks)}`,
    );
  }
}

function describe(v) {
  if (v === null) return 'null';
  if (typeof v === 'string') return JSON.stringify(v);
  if (typeof v === 'object') return v.constructor && v.constructor.name ? `a ${v.constructor.name}` : 'an object';
  return `${typeof v} ${String(v)}`;
}

/** Runs a native call, its core error as index.cjs maps it (prefixed with the face's name). */
function core(fn) {
  try {
    return fn();
  } catch (e) {
    throw mistri._translate(e, 'mistri-locks/bullmq: ');
  }
}

module.exports = { leased, stop, stopKey, jobRef, Conflict, Interrupted };
