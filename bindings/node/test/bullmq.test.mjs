// The BullMQ face (lib/bullmq.cjs) with real BullMQ Workers (npm bullmq)
// on a throwaway redis-server, which also holds the leases:
// - ten jobs of one key never overlap (two worker processes waiting in the
//   lease's line; one worker retrying through BullMQ's delay), checked with
//   the witness's order and the fences;
// - kill -9 of a worker frees the lease within the ttl;
// - a stop from Python, Ruby and the CLI (by stop key and --holder-of)
//   reaches a running job; a Node stop reaches a Python job;
// - a lease broken behind the job (mistri-locks break), or a lease server
//   frozen with SIGSTOP, interrupts it as lost (the frozen one within the
//   ttl), and BullMQ runs it again;
// - in this process: the conflict policies (skip, raise, retry and its
//   attempts), bad options, the stop key.
//
// Python and Ruby come from the builds scripts/test makes before this step
// (bindings/python/.venv, bindings/ruby/lib/mistri_locks/mistri_locks.so),
// the CLI from cargo's target dir; a missing one fails its test, naming the
// command that builds it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { Queue, Worker } from 'bullmq';
import { startRedis, uniqueNamespace, repoRoot } from './support.mjs';
import { open } from '../lib/index.mjs';
import { leased, stop, stopKey, jobRef, Conflict, Interrupted } from '../lib/bullmq.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const WORKER = path.join(here, 'workers', 'bullmq_worker.mjs');
// The lease's timing in the worker processes: tick = min(heartbeat, 1 s).
const TTL = 1;
const HEARTBEAT = 0.2;
const TICK = Math.min(HEARTBEAT, 1);
// Starting a Node process with BullMQ is machine speed, not protocol: a
// generous bound, for readiness only.
const BOOT = 60;

let redis;
let dir;
before(async () => {
  redis = await startRedis();
  dir = mkdtempSync(path.join(os.tmpdir(), 'mistri-bullmq-'));
});
after(() => {
  redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const connection = () => ({ host: '127.0.0.1', port: redis.port, maxRetriesPerRequest: null });
let serial = 0;
function names() {
  serial += 1;
  return {
    ns: uniqueNamespace('bullmq'),
    queue: `q${serial}-${process.pid}`,
    witness: path.join(dir, `witness-${serial}`),
  };
}

// ---------------------------------------------------------------- helpers

/** [[mark, jobId, arg, time], ...] in the order they were written. */
function readWitness(file) {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => {
      const [mark, id, arg, time] = l.split(' ');
      return [mark, id, arg, Number(time)];
    });
}
const show = (lines) => lines.map((l) => l.join(' ')).join('\n');

async function waitWitness(file, bound, what, done) {
  const deadline = Date.now() + bound * 1000;
  for (;;) {
    const lines = readWitness(file);
    if (done(lines)) return lines;
    if (Date.now() > deadline) {
      assert.fail(`${what}: not within ${bound} s; witness:\n${show(lines)}`);
    }
    await sleep(20);
  }
}

/** One worker process (test/workers/bullmq_worker.mjs). */
async function startWorker({ ns, queue, witness }, env = {}) {
  const ready = path.join(dir, `ready-${queue}-${Math.random().toString(36).slice(2)}`);
  const log = [];
  const proc = spawn(process.execPath, [WORKER], {
    env: {
      ...process.env,
      MISTRI_URL: redis.url,
      MISTRI_NS: ns,
      BULL_PORT: String(redis.port),
      QUEUE: queue,
      WITNESS: witness,
      READY: ready,
      JOB_TTL: String(TTL),
      JOB_HEARTBEAT: String(HEARTBEAT),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  proc.stdout.on('data', (d) => log.push(String(d)));
  proc.stderr.on('data', (d) => log.push(String(d)));
  let exited = null;
  proc.on('exit', (code, signal) => {
    exited = { code, signal };
  });
  const deadline = Date.now() + BOOT * 1000;
  while (!existsSync(ready)) {
    if (exited) assert.fail(`the worker exited at boot (${JSON.stringify(exited)}):\n${log.join('')}`);
    if (Date.now() > deadline) assert.fail(`the worker was not ready in ${BOOT} s:\n${log.join('')}`);
    await sleep(50);
  }
  return {
    proc,
    log,
    kill9() {
      proc.kill('SIGKILL');
      return new Promise((resolve) => (exited ? resolve() : proc.on('exit', resolve)));
    },
    async stop() {
      if (exited) return;
      const gone = new Promise((resolve) => proc.on('exit', resolve));
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 15_000);
      await gone;
      clearTimeout(t);
    },
  };
}

/** Asserts no two runs were inside their lease at once, and fences rose in that order. */
function assertSerial(lines) {
  let running = 0;
  let lastFence = 0;
  for (const [mark, , arg] of lines) {
    if (mark === '+') {
      running += 1;
      const fence = Number(arg);
      assert.ok(fence > lastFence, `fence ${fence} after ${lastFence}:\n${show(lines)}`);
      lastFence = fence;
    }
    if (mark === '-' || mark === 'x') running -= 1;
    assert.ok(running <= 1, `two runs at once:\n${show(lines)}`);
  }
}

function cliPath() {
  const target = process.env.CARGO_TARGET_DIR || path.join(repoRoot, 'target');
  const cli = path.join(target, 'debug', 'mistri-locks');
  if (!existsSync(cli)) {
    assert.fail(`${cli} is missing: cargo build -p mistri_locks_cli (scripts/test's cargo step builds it)`);
  }
  return cli;
}

function pythonPath() {
  const python = path.join(repoRoot, 'bindings/python/.venv/bin/python');
  if (!existsSync(python)) {
    assert.fail(`${python} is missing: run bindings/python/test.sh first (scripts/test runs Python before Node)`);
  }
  return python;
}

function rubyLib() {
  const lib = path.join(repoRoot, 'bindings/ruby/lib');
  if (!existsSync(path.join(lib, 'mistri_locks/mistri_locks.so'))) {
    assert.fail(`the Ruby extension is missing: run bindings/ruby/build.sh (scripts/test runs Ruby before Node)`);
  }
  return lib;
}

function run(cmd, args, env = {}) {
  return execFileSync(cmd, args, { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60_000 }).trim();
}

async function addJobs(queue, jobs) {
  const q = new Queue(queue, { connection: connection() });
  try {
    return await Promise.all(jobs.map((data) => q.add('work', data)));
  } finally {
    await q.close();
  }
}

// ------------------------------------------------------- worker processes

test('ten jobs of one key in two worker processes wait in the line and never overlap', async () => {
  const n = names();
  const env = { JOB_OPTIONS: JSON.stringify({ wait: 60, onConflict: 'raise' }) };
  const workers = [await startWorker(n, env), await startWorker(n, env)];
  try {
    const jobs = await addJobs(n.queue, Array.from({ length: 10 }, () => ({ tag: 'wait', seconds: 0.3 })));
    // Ten runs of 0.3 s, each handed over on release (pushed) or within a tick.
    const lines = await waitWitness(n.witness, 10 * (0.3 + TICK) + 2 * TTL + 10, 'ten jobs done', (l) =>
      l.filter(([m]) => m === '-').length === 10,
    );
    assertSerial(lines);
    assert.deepEqual(
      lines.filter(([m]) => m === '-').map(([, id]) => id).sort(),
      jobs.map((j) => jobRef(j)).sort(),
      'all ten complete, each once',
    );
    assert.equal(lines.filter(([m]) => m === 'x').length, 0, `no interruption:\n${show(lines)}`);
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
  }
});

test('ten jobs of one key with onConflict retry are delayed by BullMQ, never overlap and all complete', async () => {
  const n = names();
  const env = { JOB_OPTIONS: JSON.stringify({ onConflict: 'retry', attempts: 1000, backoff: TTL / 4 }) };
  const worker = await startWorker(n, env);
  try {
    const jobs = await addJobs(n.queue, Array.from({ length: 10 }, () => ({ tag: 'retry', seconds: 0.2 })));
    const lines = await waitWitness(n.witness, 10 * (0.2 + TTL / 4 + 1) + 20, 'ten jobs done', (l) =>
      l.filter(([m]) => m === '-').length === 10,
    );
    assertSerial(lines);
    assert.deepEqual(
      lines.filter(([m]) => m === '-').map(([, id]) => id).sort(),
      jobs.map((j) => jobRef(j)).sort(),
    );
    // The conflicts were retried (a run asks for the lease more often than it holds it).
    assert.ok(lines.filter(([m]) => m === 'w').length > 10, `some job conflicted and was retried:\n${show(lines)}`);
    const q = new Queue(n.queue, { connection: connection() });
    try {
      for (const job of jobs) {
        assert.equal(await (await q.getJob(job.id)).getState(), 'completed');
      }
    } finally {
      await q.close();
    }
  } finally {
    await worker.stop();
  }
});

test('kill -9 of a worker mid-job frees the lease for the next job within the ttl', async () => {
  const n = names();
  const doomedQueue = `${n.queue}-doomed`;
  const env = { JOB_OPTIONS: JSON.stringify({ wait: 60 }) };
  const next = await startWorker(n, env);
  const doomed = await startWorker({ ...n, queue: doomedQueue }, env);
  try {
    await addJobs(doomedQueue, [{ tag: 'k9', seconds: 60 }]);
    await waitWitness(n.witness, BOOT, 'the doomed job started', (l) => l.some(([m]) => m === '+'));
    await addJobs(n.queue, [{ tag: 'k9', seconds: 0 }]);
    await waitWitness(n.witness, BOOT, 'the next job asks', (l) => l.filter(([m]) => m === 'w').length === 2);
    await sleep(HEARTBEAT * 1000); // it is in the line now
    const killedAt = Date.now() / 1000;
    await doomed.kill9();
    const lines = await waitWitness(n.witness, TTL + 2 * HEARTBEAT + 2, 'the next job ran', (l) =>
      l.filter(([m]) => m === '+').length === 2,
    );
    const started = lines.filter(([m]) => m === '+')[1][3];
    // The lease lapses at most a ttl after its last renewal; the line's
    // next member sees it within a tick (a second tick: its witness write).
    assert.ok(started - killedAt <= TTL + 2 * HEARTBEAT, `started ${started - killedAt} s after the kill:\n${show(lines)}`);
    assert.ok(started > killedAt);
    const doomedId = lines.find(([m]) => m === '+')[1];
    assert.ok(!lines.some(([m, id]) => m === '-' && id === doomedId), 'the killed job never ended');
  } finally {
    await doomed.stop();
    await next.stop();
  }
});

test('a stop from Python, Ruby and the CLI reaches a running job, which is not retried', async () => {
  const python = pythonPath();
  const rubylib = rubyLib();
  const cli = cliPath();
  const n = names();
  const worker = await startWorker(n);
  const locks = await open(redis.url, { namespace: n.ns });
  try {
    const vias = ['python', 'ruby', 'cli', 'holder-of'];
    const jobs = await addJobs(n.queue, vias.map((via) => ({ tag: via, seconds: 60 })));
    const byVia = Object.fromEntries(vias.map((via, i) => [via, jobs[i]]));
    await waitWitness(n.witness, BOOT, 'four jobs started', (l) => l.filter(([m]) => m === '+').length === 4);
    const ref = (via) => jobRef(byVia[via]);
    const stops = {};
    run(python, ['-c', 'import sys, mistri_locks; mistri_locks.Redis(url=sys.argv[1], namespace=sys.argv[2]).stop_job(sys.argv[3])',
      redis.url, n.ns, ref('python')]);
    stops.python = Date.now() / 1000;
    run('ruby', ['-I', rubylib, '-rmistri_locks', '-e',
      'MistriLocks::Redis.new(url: ARGV[0], namespace: ARGV[1]).stop_job(ARGV[2])', redis.url, n.ns, ref('ruby')]);
    stops.ruby = Date.now() / 1000;
    run(cli, ['stop', stopKey(n.queue, byVia.cli.id), '--url', redis.url, '--namespace', n.ns]);
    stops.cli = Date.now() / 1000;
    // The lease's description carries the job's stop key.
    run(cli, ['stop', '--holder-of', 'serial:holder-of', '--url', redis.url, '--namespace', n.ns]);
    stops['holder-of'] = Date.now() / 1000;
    const lines = await waitWitness(n.witness, TICK + 2, 'four stops', (l) => l.filter(([m]) => m === 'x').length === 4);
    for (const via of vias) {
      const x = lines.find(([m, id]) => m === 'x' && id === ref(via));
      assert.equal(x[2], 'stopped', `${via}: Interrupted(stopped)`);
      // One tick of the hold's poll (a push is faster), plus the push's round trips.
      assert.ok(x[3] - stops[via] <= TICK + 0.5, `${via}: ${x[3] - stops[via]} s after the stop`);
    }
    const q = new Queue(n.queue, { connection: connection() });
    try {
      for (const via of vias) {
        // onStopped's default, skip: a stopped job is done.
        assert.equal(await (await q.getJob(byVia[via].id)).getState(), 'completed', via);
        assert.equal(await locks.held(`serial:${via}`), false, `${via}: released`);
      }
    } finally {
      await q.close();
    }
    await sleep((TTL / 2 + TICK) * 1000); // a retry would run by now
    assert.equal(readWitness(n.witness).filter(([m]) => m === '+').length, 4, 'not retried');
  } finally {
    await worker.stop();
  }
});

test('a lease broken behind a running job interrupts it as lost, and BullMQ runs it again', async () => {
  const cli = cliPath();
  const n = names();
  const worker = await startWorker(n, { JOB_OPTIONS: JSON.stringify({ backoff: TTL / 2 }) });
  try {
    const [job] = await addJobs(n.queue, [{ tag: 'lost', seconds: 60 }]);
    await waitWitness(n.witness, BOOT, 'started', (l) => l.some(([m]) => m === '+'));
    run(cli, ['break', 'serial:lost', '--yes', '--url', redis.url, '--namespace', n.ns]);
    // Lost at the next renewal (a heartbeat, or the safe deadline within the
    // ttl); retried after the backoff (ttl / 2).
    const lines = await waitWitness(n.witness, TTL + TTL / 2 + 2 * TICK + 2, 'retried', (l) =>
      l.filter(([m]) => m === '+').length === 2,
    );
    assert.deepEqual(lines.find(([m]) => m === 'x').slice(1, 3), [jobRef(job), 'lost'], show(lines));
    assert.deepEqual(lines.filter(([m]) => m === '+').map(([, id]) => id), [jobRef(job), jobRef(job)], 'the same job, retried');
    const locks = await open(redis.url, { namespace: n.ns });
    await stop(job, { locks }); // end the retried run
    await waitWitness(n.witness, TICK + 2, 'stopped', (l) => l.filter(([m]) => m === 'x').length === 2);
  } finally {
    await worker.stop();
  }
});

test('a frozen lease server interrupts a running job as lost before its ttl runs out, and it runs again', async () => {
  // The leases on a redis-server of their own, frozen with SIGSTOP (BullMQ's
  // server goes on): no renewal is confirmed, and the core's timer trips the
  // lease at its safe deadline, before anyone else could take it.
  const leaseRedis = await startRedis();
  const n = names();
  const worker = await startWorker(n, { MISTRI_URL: leaseRedis.url, JOB_OPTIONS: JSON.stringify({ backoff: TTL / 2 }) });
  let frozen = false;
  try {
    const [job] = await addJobs(n.queue, [{ tag: 'frozen', seconds: 60 }]);
    await waitWitness(n.witness, BOOT, 'started', (l) => l.some(([m]) => m === '+'));
    await sleep(HEARTBEAT * 1000);
    leaseRedis.proc.kill('SIGSTOP');
    frozen = true;
    const frozenAt = Date.now() / 1000;
    const lines = await waitWitness(n.witness, TTL + TICK + 2, 'lost', (l) => l.some(([m]) => m === 'x'));
    const x = lines.find(([m]) => m === 'x');
    assert.deepEqual(x.slice(1, 3), [jobRef(job), 'lost'], show(lines));
    // The safe deadline is within a ttl of the last confirmed renewal (before
    // the freeze); the run sees it at its next checkpoint (heartbeat / 4).
    assert.ok(x[3] - frozenAt <= TTL + TICK, `lost ${x[3] - frozenAt} s after the freeze`);
    leaseRedis.proc.kill('SIGCONT');
    frozen = false;
    // onLost's default, retry: BullMQ runs it again after the backoff.
    await waitWitness(n.witness, TTL / 2 + TTL + 10, 'retried', (l) => l.filter(([m]) => m === '+').length === 2);
    const locks = await open(leaseRedis.url, { namespace: n.ns });
    await stop(job, { locks });
    await waitWitness(n.witness, TICK + 2, 'stopped', (l) => l.filter(([m]) => m === 'x').length === 2);
  } finally {
    if (frozen) leaseRedis.proc.kill('SIGCONT');
    await worker.stop();
    leaseRedis.stop();
  }
});

test('a Node stop reaches a Python job watching its job stop key', async () => {
  const python = pythonPath();
  const n = names();
  const locks = await open(redis.url, { namespace: n.ns });
  const ref = 'reports:7';
  const script = [
    'import sys, mistri_locks',
    'locks = mistri_locks.Redis(url=sys.argv[1], namespace=sys.argv[2])',
    'hold = locks.hold("report", ttl=5, heartbeat=0.2, stop_key=mistri_locks.job_stop_key(sys.argv[3]))',
    'print("HELD", flush=True)',
    'tripped = hold.signal.wait(20)',
    'print("STOPPED" if tripped else "TIMEOUT", hold.signal.reason, flush=True)',
    'hold.release()',
  ].join('\n');
  const proc = spawn(python, ['-c', script, redis.url, n.ns, ref], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  proc.stdout.on('data', (d) => (out += d));
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  try {
    const deadline = Date.now() + BOOT * 1000;
    while (!out.includes('HELD')) {
      assert.ok(Date.now() < deadline, `the Python job never held: ${out}`);
      await sleep(20);
    }
    const key = await stop('reports', '7', { locks });
    assert.equal(key, 'job:reports:7:stop');
    const code = await exited;
    assert.equal(code, 0);
    assert.match(out, /STOPPED .*job:reports:7:stop/);
  } finally {
    proc.kill('SIGKILL');
  }
});

// ---------------------------------------------------------- in this process

/** A Worker in this process on a fresh queue; returns helpers to run jobs. */
async function inProcess(processor, options) {
  const n = names();
  const locks = await open(redis.url, { namespace: n.ns });
  const worker = new Worker(n.queue, leased(processor, { locks, ...options }), {
    connection: connection(),
    concurrency: 2,
    drainDelay: 1,
  });
  await worker.waitUntilReady();
  const q = new Queue(n.queue, { connection: connection() });
  const settled = (job, bound) =>
    new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`job ${job.id} did not settle in ${bound} s`)), bound * 1000);
      const done = (j, result) => {
        if (j.id !== job.id) return;
        clearTimeout(t);
        worker.off('completed', ok);
        worker.off('failed', bad);
        resolve(result);
      };
      const ok = (j, value) => done(j, { state: 'completed', value });
      const bad = (j, err) => done(j, { state: 'failed', err });
      worker.on('completed', ok);
      worker.on('failed', bad);
    });
  return {
    n,
    locks,
    q,
    worker,
    settled,
    async close() {
      // force: a failed test's run may still be active; its lease is released when it settles.
      await worker.close(true);
      await q.close();
    },
  };
}

test('a conflict: skip completes the job without running it, raise fails it with Conflict', async () => {
  for (const [policy, want] of [
    ['skip', 'completed'],
    ['raise', 'failed'],
  ]) {
    let ran = 0;
    const w = await inProcess(async () => {
      ran += 1;
      return 'ran';
    }, { key: 'busy', ttl: 5, onConflict: policy });
    const other = await w.locks.hold('busy', { ttl: 5 });
    try {
      const job = await w.q.add('j', {});
      const result = await w.settled(job, 20);
      assert.equal(result.state, want, policy);
      assert.equal(ran, 0, `${policy}: the processor did not run`);
      if (policy === 'raise') {
        assert.equal(result.err.name, 'Conflict');
        assert.match(result.err.message, /the lease on "busy" is held elsewhere/);
        assert.equal((await w.q.getJob(job.id)).failedReason, result.err.message);
      } else {
        assert.equal(result.value, undefined);
      }
    } finally {
      await other.release();
      await w.close();
    }
  }
});

test('a conflict under retry is moved to BullMQ delayed and runs once the key frees; attempts bound it', async () => {
  let ran = 0;
  const w = await inProcess(async (job, lease) => {
    ran += 1;
    return lease.fence;
  }, { key: (job) => `busy:${job.data.k}`, ttl: 2, backoff: 0.2, attempts: 3 });
  const other = await w.locks.hold('busy:a', { ttl: 5 });
  try {
    // Held for the whole run: three runs in all, then Conflict.
    const doomed = await w.q.add('j', { k: 'a' });
    const result = await w.settled(doomed, 20);
    assert.equal(result.state, 'failed');
    assert.ok(result.err instanceof Conflict);
    assert.match(result.err.message, /was held elsewhere 3 times; giving up/);
    assert.equal((await w.q.getJob(doomed.id)).attemptsStarted, 3);
    // Freed after the first conflict: the delayed run holds it.
    const job = await w.q.add('j', { k: 'a' });
    await sleep(100);
    assert.equal(await (await w.q.getJob(job.id)).getState(), 'delayed');
    await other.release();
    const done = await w.settled(job, 20);
    assert.equal(done.state, 'completed');
    assert.ok(done.value > other.fence, 'the run held the lease after the other holder');
    assert.equal(ran, 1);
  } finally {
    await other.release();
    await w.close();
  }
});

test('lease.signal aborts on a stop and lease.checkpoint throws Interrupted(stopped); onStopped raise fails the job', async () => {
  const w = await inProcess(async (job, lease) => {
    // Bounded: without the stop, the run ends by itself (and the test fails).
    await new Promise((resolve) => {
      const t = setTimeout(resolve, 15_000);
      lease.signal.addEventListener('abort', () => resolve(clearTimeout(t)), { once: true });
    });
    lease.checkpoint();
    return 'not here';
  }, { key: 'sig', ttl: 5, heartbeat: 0.5, onStopped: 'raise' });
  try {
    const job = await w.q.add('j', {});
    const deadline = Date.now() + 20_000;
    while (!(await w.locks.held('sig'))) {
      assert.ok(Date.now() < deadline, 'the job never held its lease');
      await sleep(20);
    }
    assert.equal(await stop(w.n.queue, job.id, { locks: w.locks }), stopKey(job));
    const result = await w.settled(job, 10);
    assert.equal(result.state, 'failed');
    assert.ok(result.err instanceof Interrupted, String(result.err));
    assert.equal(result.err.reason, 'stopped');
    assert.equal(await w.locks.held('sig'), false);
  } finally {
    await w.close();
  }
});

test('an unreachable lease backend at start does not lose the job: BullMQ runs it again, the last run fails', async () => {
  const gone = await startRedis();
  const n = names();
  const locks = await open(gone.url, { namespace: n.ns });
  gone.stop(); // refused from now on
  let ran = 0;
  const worker = new Worker(n.queue, leased(async () => (ran += 1), { locks, key: 'k', backoff: 0.1, attempts: 3, onConflict: 'skip' }), {
    connection: connection(),
    drainDelay: 1,
  });
  const warned = [];
  const onWarning = (w) => w.code === 'MISTRI_LOCKS_UNREACHABLE' && warned.push(w.message);
  process.on('warning', onWarning);
  const q = new Queue(n.queue, { connection: connection() });
  try {
    const job = await q.add('j', {});
    const failed = await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('the job did not fail in 30 s')), 30_000);
      worker.on('failed', (j, err) => j.id === job.id && resolve(err, clearTimeout(t)));
    });
    assert.equal(failed.code, 'MISTRI_CONNECTION', String(failed));
    assert.equal((await q.getJob(job.id)).attemptsStarted, 3, 'three runs in all');
    assert.equal(ran, 0);
    assert.equal(warned.length, 2, warned.join('\n'));
    assert.match(warned[0], /the lease backend is unreachable at start .*run 1 of 3, again in 0\.100 s/);
  } finally {
    process.off('warning', onWarning);
    await worker.close(true);
    await q.close();
  }
});

test('bad options are refused when the processor is wrapped, in the core words', async () => {
  const locks = await open(redis.url, { namespace: uniqueNamespace('bullmq') });
  const p = async () => {};
  assert.throws(() => leased(p, { locks, key: 'k', tll: 3 }), /unknown job option "tll"; did you mean "ttl"\?/);
  assert.throws(() => leased(p, { locks, key: 'k', onConflit: 'skip' }), /did you mean "on_conflict"\?/);
  assert.throws(() => leased(p, { locks, key: 'k', ttl: 0 }), /ttl must be a finite number of seconds > 0/);
  assert.throws(() => leased(p, { locks, key: 'k', limit: 1.5 }), /limit must be an integer/);
  assert.throws(() => leased(p, { locks, key: 'k', onConflict: 'later' }), (e) => {
    assert.equal(e.code, 'MISTRI_INVALID_ARGUMENT');
    assert.match(e.message, /^mistri-locks\/bullmq: on_conflict: "later" is not a conflict policy/);
    return true;
  });
  assert.deepEqual(leased(p, { locks, key: 'k', ttl: 9, onConflict: 'discard' }).leaseOptions, {
    ttl: 9, heartbeat: 3, limit: 1, wait: 0, attempts: 20, backoff: null,
    onConflict: 'skip', onStopped: 'skip', onLost: 'retry',
  });
  assert.throws(() => leased(p, { locks, key: '' }), /key must not be empty/);
  assert.throws(() => leased(p, { locks, key: 3 }), /key must be a string or a function of the job/);
  assert.throws(() => leased(p, { key: 'k' }), /locks must be the handle open\(url\) returns/);
  assert.throws(() => leased('nope', { locks, key: 'k' }), /processor must be a function/);
  assert.throws(() => stopKey('q'), /a job id must be a non-empty string/);
  assert.throws(() => stopKey(''), /a job is named by its queue and id/);
  assert.equal(stopKey('reports', '17'), 'job:reports:17:stop');
  assert.equal(stopKey({ queueName: 'reports', id: '17' }), 'job:reports:17:stop');
  assert.equal(stopKey({ name: 'reports' }, 17), 'job:reports:17:stop');
});
