// Acquire+release pairs on one redis-server, in the same run: mistri-locks
// (the seven-op `acquire`/`release`, and a `hold` with ifAvailable +
// `release`, which also starts and stops the heartbeat) against redlock
// (npm redlock, one ioredis client, no retry) and redis-semaphore's Mutex
// (its tryAcquire/release, one ioredis client). One pair at a time
// (await acquire, await release), as a job guard does. Candidates run in
// interleaved slices (rounds × candidates, order rotated each round), so
// drift in the machine's load falls on all of them alike.
// A benchmark (scripts/bench runs it, pinned), not a test.
//
//   node bench/pairs.mjs --port 6379 [--seconds 2] [--rounds 8]
// Prints key=value lines: node_<candidate>_pairs (pairs per second).
import { parseArgs } from 'node:util';
import Redis from 'ioredis';
import Redlock from 'redlock';
import { Mutex } from 'redis-semaphore';
import { open } from '../lib/index.mjs';

const { values } = parseArgs({
  options: { port: { type: 'string' }, seconds: { type: 'string', default: '2' }, rounds: { type: 'string', default: '8' } },
});
const port = Number(values.port);
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const ns = `bench:node:${process.pid}`;

const locks = await open(`redis://127.0.0.1:${port}/0`, { namespace: ns });
const client = new Redis({ host: '127.0.0.1', port, lazyConnect: false });
const redlock = new Redlock([client], { retryCount: 0, driftFactor: 0.01 });
const TTL_MS = 30_000;

const candidates = {
  async mistri() {
    if (!(await locks.acquire('pair:mistri', TTL_MS / 1000))) throw new Error('mistri: not acquired');
    await locks.release('pair:mistri');
  },
  async mistri_hold() {
    const lease = await locks.hold('pair:hold', { ttl: TTL_MS / 1000, ifAvailable: true });
    if (lease === null) throw new Error('mistri hold: not acquired');
    await lease.release();
  },
  async redlock() {
    const lock = await redlock.lock(`${ns}:pair:redlock`, TTL_MS);
    await lock.unlock();
  },
  async semaphore() {
    const mutex = new Mutex(client, `${ns}:pair:semaphore`, { lockTimeout: TTL_MS, refreshInterval: 0 });
    if (!(await mutex.tryAcquire())) throw new Error('redis-semaphore: not acquired');
    await mutex.release();
  },
};

const names = Object.keys(candidates);
const pairs = Object.fromEntries(names.map((n) => [n, 0]));
const spent = Object.fromEntries(names.map((n) => [n, 0]));
// Warm up each (connections, scripts loaded).
for (const n of names) for (let i = 0; i < 50; i++) await candidates[n]();
const slice = (seconds * 1000) / rounds;
for (let r = 0; r < rounds; r++) {
  const order = names.slice(r % names.length).concat(names.slice(0, r % names.length));
  for (const n of order) {
    const run = candidates[n];
    const start = performance.now();
    const end = start + slice;
    let k = 0;
    while (performance.now() < end) {
      await run();
      k += 1;
    }
    pairs[n] += k;
    spent[n] += performance.now() - start;
  }
}
for (const n of names) console.log(`node_${n}_pairs=${((pairs[n] * 1000) / spent[n]).toFixed(1)}`);
client.disconnect();
process.exit(0);
