// The Node idiom over the core: Web Locks' request shape, the lease's
// AbortSignal, hold/release, errors, flags, listings and counters, the
// event loop left free, and a process that exits with its work done.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { pbkdf2 } from 'node:crypto';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as ml from '../lib/index.mjs';
import { open, Interrupted, LocksError, Lease } from '../lib/index.mjs';
import { startRedis, uniqueNamespace } from './support.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
let redis;
before(async () => {
  redis = await startRedis();
});
after(() => redis?.stop());

async function pair() {
  const namespace = uniqueNamespace();
  return [await open(redis.url, { namespace }), await open(redis.url, { namespace })];
}

/** A promise and its resolve function. */
function latch() {
  let resolve;
  const promise = new Promise((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

test('request resolves with the callback value and releases when it settles, thrown or not', async () => {
  const [a, b] = await pair();
  const got = await a.request('job', { ttl: 5, heartbeat: 1 }, async (lease) => {
    assert.ok(lease instanceof Lease);
    assert.equal(lease.key, 'job');
    assert.equal(await b.held('job'), true);
    return 'value';
  });
  assert.equal(got, 'value');
  assert.equal(await b.held('job'), false);
  const boom = new Error('work failed');
  await assert.rejects(a.request('job', { ttl: 5 }, async () => { throw boom; }), (e) => e === boom);
  assert.equal(await b.held('job'), false, 'released on the way out of a throw');
  assert.equal(a.activeHolds(), 0);
});

test('ifAvailable gives the callback null while the key is held elsewhere', async () => {
  const [a, b] = await pair();
  const lease = await a.hold('busy', { ttl: 5, ifAvailable: true });
  assert.ok(lease);
  assert.equal(await b.request('busy', { ifAvailable: true }, async (l) => l), null);
  assert.equal(await b.hold('busy', { ifAvailable: true }), null);
  assert.equal(await lease.release(), true);
  assert.equal(await b.request('busy', { ifAvailable: true }, async (l) => l.key), 'busy');
});

test('without ifAvailable a request waits in line and runs when the holder releases', async () => {
  const [a, b] = await pair();
  const first = await a.hold('line', { ttl: 5, ifAvailable: true });
  const order = [];
  const waiting = b.request('line', { ttl: 5 }, async (lease) => {
    order.push(`b got it, fence greater: ${lease.fence > first.fence}`);
  });
  // The JS thread is free while b waits: timers run, and a releases from here.
  await sleep(100);
  order.push('a releases');
  assert.equal(await first.release(), true);
  await waiting;
  assert.deepEqual(order, ['a releases', 'b got it, fence greater: true']);
});

test('a bounded wait that runs out gives null; the caller\'s signal cancels a wait with its reason', async () => {
  const [a, b] = await pair();
  const held = await a.hold('cancel', { ttl: 5, ifAvailable: true });
  assert.equal(await b.request('cancel', { wait: 0.2 }, async (l) => l), null);
  const controller = new AbortController();
  const waiting = b.hold('cancel', { ttl: 5, signal: controller.signal });
  await sleep(100);
  const reason = new Error('the user went away');
  controller.abort(reason);
  await assert.rejects(waiting, (e) => e === reason);
  assert.equal(await held.releaseOutcome(), 'released', 'a kept its lease throughout');
  // An already-aborted signal refuses a wait at once (Web Locks' rule) ...
  await assert.rejects(b.request('cancel', { signal: AbortSignal.abort('no') }, async () => 1), (e) => e === 'no');
  // ... and leaves a one-try hold starting stopped, with the caller's reason.
  const pre = await b.hold('cancel', { ttl: 5, ifAvailable: true, signal: AbortSignal.abort('done already') });
  assert.equal(pre.signal.aborted, true);
  assert.equal(pre.signal.reason, 'done already');
  assert.throws(() => pre.checkpoint(), (e) => e === 'done already');
  await pre.release();
});

test('lease.signal is an AbortSignal aborted with Interrupted: stopped with the flag, lost with its cause', async () => {
  const [a, b] = await pair();
  const keep = setInterval(() => {}, 1000);
  try {
    await a.request('stoppable', { ttl: 5, heartbeat: 0.2, stopKey: 'stop:stoppable' }, async (lease) => {
      assert.ok(lease.signal instanceof AbortSignal);
      lease.checkpoint(); // running: returns
      const aborted = latch();
      lease.signal.addEventListener('abort', () => aborted.resolve(lease.signal.reason));
      assert.deepEqual(await b.stopHolders('stoppable', { ttl: 30 }), { outcome: 'raised', flags: ['stop:stoppable'] });
      const reason = await aborted.promise;
      assert.ok(reason instanceof Interrupted);
      assert.equal(reason.reason, 'stopped');
      assert.equal(reason.flag, 'stop:stoppable');
      assert.equal(reason.key, 'stoppable');
      assert.equal(reason.code, 'MISTRI_STOPPED');
      assert.throws(() => lease.checkpoint(), (e) => e === reason);
      assert.equal(lease.lost, false, 'a stop is not a loss');
    });
    await b.clearFlag('stop:stoppable');
    const lease = await a.hold('victim', { ttl: 0.9, heartbeat: 0.05, ifAvailable: true });
    const aborted = latch();
    lease.signal.addEventListener('abort', () => aborted.resolve(lease.signal.reason));
    assert.equal(await b.breakLease('victim'), true);
    const reason = await aborted.promise;
    assert.ok(reason instanceof Interrupted);
    assert.equal(reason.reason, 'lost');
    assert.equal(reason.cause, 'not_held');
    assert.match(reason.message, /lease lost/);
    assert.equal(lease.lost, true);
    assert.equal(await lease.releaseOutcome(), 'lost');
  } finally {
    clearInterval(keep);
  }
});

test('hold: release() and releaseOutcome() everywhere, Symbol.asyncDispose where the runtime has it, info()', async () => {
  const [a, b] = await pair();
  const lease = await a.hold('h', { ttl: 5, heartbeat: 1, label: 'nightly report', ifAvailable: true });
  const info = await lease.info();
  assert.equal(info.key, 'h');
  assert.equal(info.holder, 'nightly report');
  assert.equal(info.fence, lease.fence);
  assert.equal(a.activeHolds(), 1);
  assert.equal(await lease.release(), true);
  assert.equal(await lease.releaseOutcome(), 'already_released');
  assert.equal(await lease.release(), false);
  assert.equal(a.activeHolds(), 0);
  assert.equal(typeof Symbol.asyncDispose, 'symbol', 'Node >= 20 defines Symbol.asyncDispose');
  const scoped = await a.hold('h', { ttl: 5, ifAvailable: true });
  await scoped[Symbol.asyncDispose]();
  assert.equal(await b.held('h'), false);
});

test('options go by name to the core; its errors are LocksErrors with a code; host types are TypeErrors', async () => {
  const [a] = await pair();
  await assert.rejects(a.hold('k', { tll: 5 }), (e) => {
    assert.ok(e instanceof LocksError);
    assert.equal(e.code, 'MISTRI_INVALID_ARGUMENT');
    assert.match(e.message, /unknown hold option "tll"; did you mean "ttl"\?/);
    return true;
  });
  // A value the core finds of the wrong kind (its WrongType): a TypeError
  // that keeps the code; the right kind out of range: a LocksError.
  const wrongKind = (said) => (e) => {
    assert.ok(e instanceof TypeError, `not a TypeError: ${e}`);
    assert.equal(e.code, 'MISTRI_INVALID_ARGUMENT');
    assert.match(e.message, said);
    return true;
  };
  await assert.rejects(a.hold('k', { limit: 1.5, ifAvailable: true }), wrongKind(/^limit must be an integer/));
  await assert.rejects(a.hold('k', { ttl: 'soon' }), wrongKind(/^ttl must be a number of seconds/));
  await assert.rejects(a.hold('k', { label: 7 }), wrongKind(/^label must be text/));
  await assert.rejects(
    a.hold('k', { ttl: -1 }),
    (e) => e instanceof LocksError && e.code === 'MISTRI_INVALID_ARGUMENT' && /^ttl must be/.test(e.message),
  );
  await assert.rejects(a.hold('k', { ifAvailable: true, wait: 1 }), LocksError);
  await assert.rejects(a.hold(42), TypeError);
  await assert.rejects(a.hold('k', { ttl: {} }), TypeError);
  await assert.rejects(a.hold('k', { signal: 'no' }), TypeError);
  await assert.rejects(a.acquire('k', '5'), TypeError);
  await assert.rejects(open('nosuch://x'), (e) => e instanceof LocksError && e.code === 'MISTRI_CONFIG');
  await assert.rejects(open('memory://', { namespce: 'x' }), /did you mean "namespace"/);
  await assert.rejects(open('memory://', { schema: 'x' }), LocksError);
  assert.equal(await a.held('k'), false, 'a refused call took nothing');
});

test('open: every family by its core name; the label option names the holder', async () => {
  assert.equal((await open('memory://')).family, 'memory');
  assert.equal((await open(redis.url, { namespace: uniqueNamespace() })).family, 'redis');
  const labelled = await open('memory://', { label: 'billing worker' });
  assert.equal(labelled.label, 'billing worker');
  assert.match((await open('memory://')).label, / node$/);
});

test('flags, list, stopJob, stats, Prometheus text', async () => {
  const [a, b] = await pair();
  await a.setFlag('maintenance', { ttl: 30 });
  assert.equal(await b.flag('maintenance'), true);
  await b.clearFlag('maintenance');
  assert.equal(await a.flag('maintenance'), false);
  const lease = await a.hold('listed', { ttl: 5, stopKey: ml.jobStopKey('7'), ifAvailable: true });
  await a.setFlag('raised', { ttl: 30 });
  const listing = await b.list();
  assert.deepEqual(listing.leases.map((l) => [l.key, l.stopKey]), [['listed', 'job:7:stop']]);
  assert.deepEqual(listing.flags.map((f) => f.key), ['raised']);
  assert.equal((await b.list('zzz')).leases.length, 0);
  assert.equal(await b.stopJob('7', { ttl: 30 }), 'job:7:stop');
  assert.equal(await a.flag('job:7:stop'), true);
  const stats = a.stats();
  assert.equal(stats.holds_active, 1);
  assert.equal(stats.holds_acquired, 1);
  assert.match(a.prometheus(), /^mistri_locks_holds_active 1$/m);
  await lease.release();
  assert.equal(a.stats().holds_released, 1);
  assert.deepEqual(await b.stopHolders('listed'), { outcome: 'not_held', flags: [] });
});

test('limit: up to N holders at once, each with its own fence', async () => {
  const [a, b] = await pair();
  const c = b.newOwner();
  const one = await a.hold('pool', { ttl: 5, limit: 2, ifAvailable: true });
  const two = await b.hold('pool', { ttl: 5, limit: 2, ifAvailable: true });
  assert.ok(one && two);
  assert.notEqual(one.fence, two.fence);
  assert.equal(await c.hold('pool', { ttl: 5, limit: 2, ifAvailable: true }), null);
  assert.equal((await c.info('pool')).holders.length, 2);
  await one.release();
  const three = await c.hold('pool', { ttl: 5, limit: 2, ifAvailable: true });
  assert.ok(three);
  await Promise.all([two.release(), three.release()]);
});

test('the module-level hold and request use the configured Locks', async () => {
  const [a, b] = await pair();
  assert.equal(await ml.hold('global', { ifAvailable: true }), null, 'nothing configured');
  ml.configure(a);
  try {
    assert.equal(await ml.request('global', { ttl: 5 }, async () => b.held('global')), true);
  } finally {
    ml.configure(null);
  }
});

test('waits run on the face\'s own threads: eight waits in line leave libuv\'s pool free', { timeout: 60_000 }, async () => {
  const [a, b] = await pair();
  const keys = Array.from({ length: 8 }, (_, i) => `pool-${i}`);
  const held = await Promise.all(keys.map((k) => a.hold(k, { ttl: 5, ifAvailable: true })));
  const waits = keys.map((k) => b.hold(k, { ttl: 5 }));
  // pbkdf2 runs on libuv's 4-thread pool: it finishes while all eight still
  // wait (with the waits there it could not: each would hold a pool thread
  // until the releases below, which only run after it).
  await promisify(pbkdf2)('secret', 'salt', 1000, 32, 'sha256');
  for (const h of held) assert.equal(await h.release(), true);
  const leases = await Promise.all(waits);
  for (const l of leases) assert.ok(l, 'each wait got its lease after the release');
  await Promise.all(leases.map((l) => l.release()));
});

test('calls in flight share a bounded set of the face\'s threads; waits in line have their own', { timeout: 60_000 }, async () => {
  const native = createRequire(import.meta.url)('../lib/native.cjs');
  // [calls, idle calls, waits, idle waits, most calls, most waits]; at most
  // 16 in any case (the core keeps 16 idle connections per address).
  const most = native.poolThreads()[4] ?? 16;
  assert.ok(most >= 1 && most <= 16, `a small fixed number of call threads (${most})`);
  const [a, b] = await pair();
  let peak = 0;
  let done = false;
  const watch = (async () => {
    while (!done) {
      peak = Math.max(peak, native.poolThreads()[0]);
      await new Promise((r) => setImmediate(r));
    }
  })();
  // 200 one-try holds at once (each one used to take a thread of its own).
  const keys = Array.from({ length: 200 }, (_, i) => `burst-${i}`);
  const leases = await Promise.all(keys.map((k) => a.hold(k, { ttl: 5, ifAvailable: true })));
  done = true;
  await watch;
  assert.ok(leases.every((l) => l !== null), 'every hold was taken');
  assert.ok(peak <= most, `at most ${most} call threads, saw ${peak}`);
  // Waits in line wait on threads of their own: the call threads stay free
  // for the releases that end them (more waits than call threads here).
  const waits = keys.slice(0, 2 * most + 1).map((k) => b.hold(k, { ttl: 5 }));
  await sleep(200);
  assert.ok(native.poolThreads()[2] >= 2 * most + 1, 'each wait in line has a wait thread');
  assert.ok(native.poolThreads()[0] <= most);
  const outcomes = await Promise.all(leases.map((l) => l.releaseOutcome()));
  assert.ok(outcomes.every((o) => o === 'released'));
  const got = await Promise.all(waits);
  assert.ok(got.every((l) => l !== null), 'each wait got its lease after the release');
  await Promise.all(got.map((l) => l.release()));
});

test('waits in line past the wait threads\' bound queue for one and still end when their wait runs out', { timeout: 120_000 }, async () => {
  const native = createRequire(import.meta.url)('../lib/native.cjs');
  const most = native.poolThreads()[5] ?? 256;
  const [a, b] = await pair();
  const held = await a.hold('crowded', { ttl: 30, ifAvailable: true });
  assert.ok(held);
  let peak = 0;
  let done = false;
  const watch = (async () => {
    while (!done) {
      const [all, , waiting = all] = native.poolThreads();
      peak = Math.max(peak, waiting);
      await sleep(5);
    }
  })();
  // More waits than wait threads, each bounded by `wait`: every one ends
  // refused (null), those queued for a thread too.
  const waits = Array.from({ length: most + 20 }, () => b.hold('crowded', { ttl: 5, wait: 0.3 }));
  const got = await Promise.all(waits);
  done = true;
  await watch;
  assert.ok(got.every((l) => l === null), 'each wait ran out while the key was held');
  assert.ok(peak <= most, `at most ${most} wait threads, saw ${peak}`);
  assert.equal(await held.release(), true);
});

test('a process with holds exits when its work is done; so does one that released', () => {
  for (const release of [false, true]) {
    const run = spawnSync(process.execPath, [path.join(here, 'fixtures/exits.mjs'), redis.url, String(release)], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(run.error, undefined, `the child did not exit on its own: ${run.error}`);
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stdout, /work done/);
  }
});
