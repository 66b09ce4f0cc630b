// N holds in one Node process on one redis-server: the process's CPU and
// RSS while they renew (heartbeat 1 s, ttl 30 s), against the same N locks
// as redis-semaphore Mutexes (npm redis-semaphore, one ioredis client, its
// own refresh timer per lock: refreshInterval 1 s, lockTimeout 30 s). Each
// side runs in a child process of its own (so RSS is its own), one after
// the other, on the same server. After every lock is taken and a second of
// settling, CPU (process.cpuUsage, user + system) is sampled over the
// window; at its end the locks still held are counted.
// A benchmark (scripts/bench runs it, pinned), not a test.
//
// Locks are taken `--inflight` at a time (default 50); `--ttl` (default 30)
// is both sides' lease ttl, so `--inflight 200 --ttl 3` asks whether taking
// them starves the renewals (`kept` must stay N: no hold lost).
//
//   node bench/holds.mjs --port 6379 [--holds 10000] [--seconds 10] [--inflight 50] [--ttl 30]
// Prints key=value lines: node_holds_<N>_{cpu_s_per_min,rss_mb,kept,take_s}
// and node_semholds_<N>_… for the baseline.
import { parseArgs } from 'node:util';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

const { values } = parseArgs({
  options: {
    port: { type: 'string' },
    holds: { type: 'string', default: '10000' },
    seconds: { type: 'string', default: '10' },
    side: { type: 'string' },
    inflight: { type: 'string', default: '50' },
    ttl: { type: 'string', default: '30' },
  },
});
const port = Number(values.port);
const n = Number(values.holds);
const seconds = Number(values.seconds);

if (!values.side) {
  for (const side of ['mistri', 'semaphore']) {
    const out = execFileSync(process.execPath, [fileURLToPath(import.meta.url), ...process.argv.slice(2), '--side', side], {
      encoding: 'utf8',
      timeout: (seconds + 120) * 1000,
    });
    process.stdout.write(out);
  }
  process.exit(0);
}

const BATCH = Number(values.inflight);
const ttl = Number(values.ttl);
async function take(count, one) {
  const got = [];
  for (let i = 0; i < count; i += BATCH) {
    const part = await Promise.all(Array.from({ length: Math.min(BATCH, count - i) }, (_, j) => one(i + j)));
    got.push(...part);
  }
  return got;
}

let kept;
let release;
const started = performance.now();
if (values.side === 'mistri') {
  const { open } = await import('../lib/index.mjs');
  const locks = await open(`redis://127.0.0.1:${port}/0`, { namespace: `bench:node-holds:${process.pid}` });
  const leases = await take(n, (i) => locks.hold(`h:${i}`, { ttl, heartbeat: 1, ifAvailable: true }));
  kept = () => leases.filter((l) => l !== null && !l.lost && !l.signal.aborted).length;
  release = () => take(n, (i) => leases[i] && leases[i].releaseOutcome());
} else {
  const { default: Redis } = await import('ioredis');
  const { Mutex } = await import('redis-semaphore');
  const client = new Redis({ host: '127.0.0.1', port });
  const mutexes = await take(n, async (i) => {
    const m = new Mutex(client, `bench:node-semholds:${process.pid}:${i}`, { lockTimeout: ttl * 1000, refreshInterval: 1000 });
    return (await m.tryAcquire()) ? m : null;
  });
  kept = () => mutexes.filter((m) => m !== null && m.isAcquired).length;
  release = async () => {
    await take(n, (i) => mutexes[i] && mutexes[i].release());
    client.disconnect();
  };
}
const takeS = (performance.now() - started) / 1000;
await sleep(1000);
const cpu0 = process.cpuUsage();
const t0 = performance.now();
await sleep(seconds * 1000);
const cpu = process.cpuUsage(cpu0);
const wall = (performance.now() - t0) / 1000;
const rss = process.memoryUsage().rss / 2 ** 20;
const tag = values.side === 'mistri' ? `node_holds_${n}` : `node_semholds_${n}`;
console.log(`${tag}_cpu_s_per_min=${(((cpu.user + cpu.system) / 1e6 / wall) * 60).toFixed(3)}`);
console.log(`${tag}_rss_mb=${rss.toFixed(1)}`);
console.log(`${tag}_kept=${kept()}`);
console.log(`${tag}_take_s=${takeS.toFixed(2)}`);
await release();
process.exit(0);
