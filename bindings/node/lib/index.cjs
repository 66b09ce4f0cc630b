'use strict';
// mistri-locks for Node.js: cross-process leases and stop flags in the
// shape of the Web Locks API, over the mistri_locks core (lib/native.cjs).
// This file is the Node idiom only; every rule (option checks, defaults,
// stop keys, interruption, the operator's routes) is the core's.

const native = require('./native.cjs');

/** An error of the core, with its kind as `code` (MISTRI_INVALID_ARGUMENT, …). */
class LocksError extends Error {
  constructor(message, code) {
    super(message);
    this.name = 'LocksError';
    this.code = code;
  }
}

/** Why a lease's work must stop: `reason` "stopped" (with the stop `flag`) or "lost" (with its `cause`). */
class Interrupted extends Error {
  constructor(reason, key, detail, flag, cause) {
    super(detail || `lease ${reason}: ${key}`);
    this.name = 'Interrupted';
    this.code = reason === 'lost' ? 'MISTRI_LOST' : 'MISTRI_STOPPED';
    this.reason = reason;
    this.key = key;
    this.detail = detail ?? null;
    this.flag = flag ?? null;
    this.cause = cause ?? null;
  }
}

const CODED = /^\[(TypeError:)?(MISTRI_[A-Z_]+)\] ([\s\S]*)$/;

/**
 * A native error as a LocksError (`prefix` before its message); a value of
 * the wrong kind for its option (the core's WrongType) as a TypeError that
 * keeps the code, MISTRI_INVALID_ARGUMENT, as Node's own argument checks
 * do; anything else unchanged.
 */
function translate(e, prefix = '') {
  if (e instanceof Error) {
    const m = CODED.exec(e.message);
    if (m && m[1]) return Object.assign(new TypeError(prefix + m[3]), { code: m[2] });
    if (m) return new LocksError(prefix + m[3], m[2]);
  }
  return e;
}

function call(fn) {
  try {
    return fn();
  } catch (e) {
    throw translate(e);
  }
}

async function settle(promise) {
  try {
    return await promise;
  } catch (e) {
    throw translate(e);
  }
}

function checkKey(what, key) {
  if (typeof key !== 'string') {
    throw new TypeError(`${what} must be a string, got ${typeName(key)}`);
  }
}

function typeName(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : `a ${typeof v}`;
}

function checkSeconds(what, v) {
  if (typeof v !== 'number') throw new TypeError(`${what} must be a number of seconds, got ${typeName(v)}`);
}

/** `stopKey` -> `stop_key`: the core's option names, spelt as JavaScript spells them. */
const snake = (name) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** Options by name for the core's setters (which check them); `skip`: the face's own. */
function byName(options, skip = []) {
  if (options === undefined || options === null) return [];
  if (typeof options !== 'object') throw new TypeError(`options must be an object, got ${typeName(options)}`);
  const out = [];
  for (const [name, v] of Object.entries(options)) {
    if (skip.includes(name) || v === undefined) continue;
    const opt = { name: snake(name) };
    if (typeof v === 'number') opt.number = v;
    else if (typeof v === 'bigint') opt.number = Number(v);
    else if (typeof v === 'string') opt.text = v;
    else if (typeof v === 'boolean') opt.flag = v;
    else if (v !== null) {
      throw new TypeError(`${name} must be a number, a string or a boolean, got ${typeName(v)}`);
    }
    out.push(opt);
  }
  return out;
}

// Leases of this JS thread by the native hold's id: the dispatcher (a
// thread-safe function that keeps nothing alive) is called with the id
// when the core trips a hold's signal (stop flag, loss).
const leases = new Map();
native.setDispatcher((id) => {
  const lease = leases.get(id);
  if (lease) lease[TRIP]();
});

const TRIP = Symbol('trip');
const NATIVE = new WeakMap();

/** A held lease: `signal` aborts on stop or loss; released by `release()` or `await using`. */
class Lease {
  #hold;
  #controller = new AbortController();
  #caller;
  #onCallerAbort;

  constructor(hold, caller, onCallerAbort) {
    this.#hold = hold;
    this.#caller = caller;
    this.#onCallerAbort = onCallerAbort;
    leases.set(hold.id, this);
    if (hold.aborted) this[TRIP]();
  }

  /** The key held. */
  get key() {
    return this.#hold.key;
  }

  /** The fencing number of this acquisition (strictly greater than any before it on the key). */
  get fence() {
    return this.#hold.fence;
  }

  /** Whether the lease may be lost (do not write as its holder). */
  get lost() {
    return this.#hold.lost;
  }

  /** Aborted, with a reason, when a stop flag is raised or the lease may be lost. */
  get signal() {
    return this.#controller.signal;
  }

  /** The reason the signal carries now (an Interrupted, or the caller's own signal's reason). */
  #reason() {
    const i = this.#hold.interruption();
    if (i === null) return null;
    if (i.kind === 'stopped' && i.flag == null && this.#caller?.aborted) return this.#caller.reason;
    return new Interrupted(i.kind, this.#hold.key, this.#hold.reason, i.flag, i.cause);
  }

  [TRIP]() {
    if (this.#controller.signal.aborted) return;
    const reason = this.#reason();
    if (reason !== null) this.#controller.abort(reason);
  }

  /** Throws the signal's reason (an Interrupted) when the work must stop; else returns. */
  checkpoint() {
    this[TRIP]();
    if (this.#controller.signal.aborted) throw this.#controller.signal.reason;
  }

  /** Progress for the hung-holder guard (`progressTimeout`). */
  touch() {
    this.#hold.touch();
  }

  /** Who holds the key now (the backend's description), or null. */
  info() {
    return settle(this.#hold.info());
  }

  #forget() {
    leases.delete(this.#hold.id);
    if (this.#caller && this.#onCallerAbort) this.#caller.removeEventListener('abort', this.#onCallerAbort);
  }

  /** Releases; resolves with what happened: released, not_held, lost, already_released, expired, other_process. */
  releaseOutcome() {
    this.#forget();
    return settle(this.#hold.release());
  }

  /** Releases; resolves true when this call deleted the lease. */
  async release() {
    return (await this.releaseOutcome()) === 'released';
  }
}
if (typeof Symbol.asyncDispose === 'symbol') {
  Lease.prototype[Symbol.asyncDispose] = async function dispose() {
    await this.releaseOutcome();
  };
}

const FACE_OPTIONS = ['signal', 'ifAvailable'];

/**
 * Starts a hold: Web Locks' rules for `signal`, `ifAvailable` and waiting,
 * everything else by name to the core. Resolves with a Lease or null.
 */
async function startHold(start, key, options = {}) {
  checkKey('key', key);
  if (options === null || typeof options !== 'object') {
    throw new TypeError(`options must be an object, got ${typeName(options)}`);
  }
  const { signal, ifAvailable } = options;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new TypeError(`signal must be an AbortSignal, got ${typeName(signal)}`);
  }
  if (ifAvailable && options.wait !== undefined) {
    throw new LocksError('ifAvailable and wait cannot be used together', 'MISTRI_INVALID_ARGUMENT');
  }
  // Web Locks waits in line unless ifAvailable; `wait` bounds it (seconds).
  const named = byName(options, FACE_OPTIONS);
  if (!ifAvailable && options.wait === undefined) named.push({ name: 'wait', number: Infinity });
  if (signal?.aborted && !ifAvailable) throw signal.reason;
  const held = new native.NativeSignal();
  let onAbort;
  if (signal) {
    if (signal.aborted) held.abort(describe(signal.reason));
    onAbort = () => held.abort(describe(signal.reason));
    signal.addEventListener('abort', onAbort, { once: true });
  }
  let hold;
  try {
    hold = await settle(call(() => start(key, named, held)));
  } catch (e) {
    if (onAbort) signal.removeEventListener('abort', onAbort);
    throw e;
  }
  if (hold === null) {
    if (onAbort) signal.removeEventListener('abort', onAbort);
    if (signal?.aborted && !ifAvailable) throw signal.reason;
    return null;
  }
  return new Lease(hold, signal, onAbort);
}

function describe(reason) {
  if (reason instanceof Error) return reason.message || reason.name;
  return String(reason);
}

/** Web Locks' `request(name, [options], callback)` over a start function. */
async function request(start, key, options, callback) {
  if (typeof options === 'function') {
    callback = options;
    options = {};
  }
  if (typeof callback !== 'function') throw new TypeError('callback must be a function');
  const lease = await startHold(start, key, options ?? {});
  if (lease === null) return callback(null);
  let result;
  try {
    result = await callback(lease);
  } catch (e) {
    await lease.releaseOutcome().catch(() => {});
    throw e;
  }
  await lease.releaseOutcome();
  return result;
}

/** One backend: leases, flags, listings, counters. Made by `open(url)`. */
class Locks {
  #n;

  constructor(n) {
    if (!(n instanceof native.NativeLocks)) throw new TypeError('use open(url) to make a Locks');
    this.#n = n;
    NATIVE.set(this, n);
  }

  /** The backend family's name: memory, local, redis, postgres, … */
  get family() {
    return this.#n.family;
  }

  /** The label this handle's leases carry. */
  get label() {
    return this.#n.label;
  }

  /** Another owner on the same backend, as another process would be. */
  newOwner() {
    return new Locks(this.#n.newOwner());
  }

  /** Web Locks' shape: runs `callback(lease)` holding `key`; released when it settles. */
  request(key, options, callback) {
    return request((k, o, s) => this.#n.hold(k, o, s), key, options, callback);
  }

  /** A lease for code that cannot use a callback; null when not granted. */
  hold(key, options = {}) {
    return startHold((k, o, s) => this.#n.hold(k, o, s), key, options);
  }

  async acquire(key, ttl) {
    checkKey('key', key);
    checkSeconds('ttl', ttl);
    return settle(call(() => this.#n.acquire(key, ttl)));
  }

  async renew(key, ttl) {
    checkKey('key', key);
    checkSeconds('ttl', ttl);
    return settle(call(() => this.#n.renew(key, ttl)));
  }

  async release(key) {
    checkKey('key', key);
    return settle(this.#n.release(key));
  }

  async held(key) {
    checkKey('key', key);
    return settle(this.#n.held(key));
  }

  /** This handle's fence for `key` (what it was issued; no I/O), or null. */
  fence(key) {
    checkKey('key', key);
    return this.#n.fence(key);
  }

  async setFlag(key, { ttl } = {}) {
    checkKey('key', key);
    if (ttl !== undefined) checkSeconds('ttl', ttl);
    return settle(call(() => this.#n.setFlag(key, ttl)));
  }

  async flag(key) {
    checkKey('key', key);
    return settle(this.#n.flag(key));
  }

  async clearFlag(key) {
    checkKey('key', key);
    return settle(this.#n.clearFlag(key));
  }

  /** Operator override: deletes anyone's lease on `key`. */
  async breakLease(key) {
    checkKey('key', key);
    return settle(this.#n.breakLease(key));
  }

  async info(key) {
    checkKey('key', key);
    return settle(this.#n.info(key));
  }

  async list(prefix = '') {
    checkKey('prefix', prefix);
    return settle(this.#n.list(prefix));
  }

  /** Raises the stop key of every holder of `key`: `{outcome, flags}`. */
  async stopHolders(key, { ttl } = {}) {
    checkKey('key', key);
    if (ttl !== undefined) checkSeconds('ttl', ttl);
    return settle(call(() => this.#n.stopHolders(key, ttl)));
  }

  /** Raises job `id`'s stop flag (the protocol's key); resolves with the key. */
  async stopJob(id, { ttl } = {}) {
    checkKey('id', id);
    if (ttl !== undefined) checkSeconds('ttl', ttl);
    return settle(call(() => this.#n.stopJob(id, ttl)));
  }

  /** This handle's counters by the core's names. */
  stats() {
    return this.#n.stats();
  }

  /** This handle's counters as Prometheus text. */
  prometheus() {
    return this.#n.prometheus();
  }

  /** How many holds this handle renews. */
  activeHolds() {
    return this.#n.activeHolds();
  }
}

/** Opens the backend `url` names: memory://, a Local path or file://, redis://…, postgres://… */
async function open(url, options = {}) {
  checkKey('url', url);
  const n = await settle(call(() => native.open(url, byName(options))));
  return new Locks(n);
}

/** Sets (null: clears) the process's configured Locks, used by the module-level `hold` and `request`. */
function configure(locks) {
  if (locks !== null && !(locks instanceof Locks)) throw new TypeError('configure takes a Locks or null');
  native.configure(locks === null ? null : NATIVE.get(locks));
}

const startConfigured = (k, o, s) => native.holdConfigured(k, o, s);

/** A lease on the configured Locks (null when none is configured or not granted). */
function hold(key, options = {}) {
  return startHold(startConfigured, key, options);
}

/** `request` on the configured Locks. */
function requestConfigured(key, options, callback) {
  return request(startConfigured, key, options, callback);
}

/** The stop-flag key of job `id` (the protocol's one format). */
function jobStopKey(id) {
  checkKey('id', id);
  return call(() => native.jobStopKey(id));
}

const { operatorHandler } = require('./operator.cjs')({ native, NATIVE, Locks, LocksError, call, checkSeconds });

module.exports = {
  open,
  configure,
  hold,
  request: requestConfigured,
  jobStopKey,
  operatorHandler,
  Locks,
  Lease,
  LocksError,
  Interrupted,
  version: native.version(),
  // For lib/bullmq.cjs: the one mapping of native errors.
  _translate: translate,
};
