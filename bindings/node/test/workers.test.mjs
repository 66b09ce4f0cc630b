// worker_threads: each thread loads the addon for itself; holds taken in two
// workers of one process exclude each other and are told apart (own owner
// tokens, own labels, own fences), on Local and on Redis.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { once } from 'node:events';
import { open } from '../lib/index.mjs';
import { startRedis, uniqueNamespace } from './support.mjs';

let redis;
let dir;
before(async () => {
  redis = await startRedis();
  dir = mkdtempSync(path.join(os.tmpdir(), 'mistri-node-workers-'));
});
after(() => {
  redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

// Each worker opens the backend, then obeys messages: hold / release / info.
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const ml = require(workerData.lib);
(async () => {
  const locks = await ml.open(workerData.url, workerData.options);
  let lease = null;
  parentPort.on('message', async (m) => {
    try {
      if (m.op === 'hold') {
        lease = await locks.hold(m.key, { ttl: 5, heartbeat: 0.5, label: workerData.label, stopKey: m.stopKey, ifAvailable: true });
        if (lease) lease.signal.addEventListener('abort', () => parentPort.postMessage({ op: 'aborted', flag: lease.signal.reason.flag }));
        parentPort.postMessage({ op: 'hold', granted: Boolean(lease), fence: lease && lease.fence });
      } else if (m.op === 'release') {
        parentPort.postMessage({ op: 'release', outcome: await lease.releaseOutcome() });
      } else if (m.op === 'exit') {
        parentPort.close();
      }
    } catch (e) {
      parentPort.postMessage({ op: 'error', message: String(e && e.stack) });
    }
  });
  parentPort.postMessage({ op: 'ready', family: locks.family });
})();
`;

function startWorker(url, options, label) {
  const worker = new Worker(WORKER, {
    eval: true,
    workerData: { lib: path.resolve('lib/index.cjs'), url, options, label },
  });
  const inbox = [];
  const waiters = [];
  worker.on('message', (m) => {
    if (m.op === 'error') throw new Error(m.message);
    const w = waiters.findIndex((x) => x.op === m.op);
    if (w >= 0) waiters.splice(w, 1)[0].resolve(m);
    else inbox.push(m);
  });
  const next = (op) => {
    const i = inbox.findIndex((m) => m.op === op);
    if (i >= 0) return Promise.resolve(inbox.splice(i, 1)[0]);
    return new Promise((resolve) => waiters.push({ op, resolve }));
  };
  const ask = (m) => {
    worker.postMessage(m);
    return next(m.op);
  };
  return { worker, ask, next };
}

for (const [family, target] of [
  ['local', () => [path.join(dir, 'locks.db'), {}]],
  ['redis', () => [redis.url, { namespace: uniqueNamespace() }]],
]) {
  test(`holds in two workers exclude each other and are told apart (${family})`, { timeout: 60_000 }, async () => {
    const [url, options] = target();
    const one = startWorker(url, options, 'worker one');
    const two = startWorker(url, options, 'worker two');
    try {
      assert.equal((await one.next('ready')).family, family);
      assert.equal((await two.next('ready')).family, family);
      const first = await one.ask({ op: 'hold', key: 'shared', stopKey: 'stop:one' });
      assert.equal(first.granted, true);
      assert.equal((await two.ask({ op: 'hold', key: 'shared' })).granted, false, 'excluded while one holds');
      const main = await open(url, options);
      const info = await main.info('shared');
      assert.equal(info.holder, 'worker one');
      assert.equal(info.fence, first.fence);
      // A stop raised from the main thread reaches worker one's lease only.
      await main.stopHolders('shared', { ttl: 30 });
      assert.equal((await one.next('aborted')).flag, 'stop:one');
      assert.equal((await one.ask({ op: 'release' })).outcome, 'released');
      const second = await two.ask({ op: 'hold', key: 'shared' });
      assert.equal(second.granted, true);
      assert.ok(second.fence > first.fence);
      assert.equal((await main.info('shared')).holder, 'worker two');
      assert.equal((await two.ask({ op: 'release' })).outcome, 'released');
    } finally {
      await Promise.all([one.worker.terminate(), two.worker.terminate()]);
    }
  });
}

test('a worker ended with a lease still held leaves the process healthy', { timeout: 60_000 }, async () => {
  const namespace = uniqueNamespace();
  const w = startWorker(redis.url, { namespace }, 'short-lived');
  await w.next('ready');
  assert.equal((await w.ask({ op: 'hold', key: 'left' })).granted, true);
  const exited = once(w.worker, 'exit');
  await w.worker.terminate();
  await exited;
  // The main thread still works (the addon's threads and dispatchers are per thread).
  const main = await open(redis.url, { namespace });
  // Its lease is freed: released in the background as the worker's objects
  // are finalized, at the latest expired at its ttl (5 s), so a wait of
  // twice the ttl gets it.
  const got = await main.request('left', { ttl: 5, wait: 10 }, async (l) => l.key);
  assert.equal(got, 'left');
});
