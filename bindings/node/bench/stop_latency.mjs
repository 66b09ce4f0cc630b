// Stop -> lease.signal abort latency on one redis-server: this process
// holds a lease (ttl 30 s, heartbeat 1 s: a tick of 1 s, so a poll would
// show as ~500 ms) watching a fresh stop key per trial; a second handle
// (its own connection, another owner, as another process would be) raises
// the flag. Two series, interleaved: "live", raised 50–53 ms after the
// hold resolved (its subscription to the stop key is live: the issue's
// goal), and "fresh", raised 0–3 ms after (as core/examples/stop_latency.rs
// does: a raise that may beat the subscription is caught when it is
// confirmed, or at the tick). Latency: from
// just before `setFlag` is called to the lease.signal 'abort' listener,
// both on process.hrtime (the raise's round trip, the push, the core's
// signal, the thread-safe call into JS, the AbortController). Baseline: a
// Redis round trip from this process (ioredis PING, p50). Five warm-up
// trials are not counted. A benchmark (scripts/bench runs it), not a test.
//
//   node bench/stop_latency.mjs --port 6379 [--trials 200]
// Prints key=value lines (milliseconds).
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import Redis from 'ioredis';
import { open } from '../lib/index.mjs';

const { values } = parseArgs({ options: { port: { type: 'string' }, trials: { type: 'string', default: '200' } } });
const port = Number(values.port);
const trials = Number(values.trials);
const url = `redis://127.0.0.1:${port}/0`;
const ns = `bench:node-stop:${process.pid}`;
const holder = await open(url, { namespace: ns });
const stopper = await open(url, { namespace: ns });
const ms = (a, b) => Number(b - a) / 1e6;
const pct = (xs, p) => xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];

// The lease's dispatcher keeps nothing alive (by design); a timer keeps
// this process up while it waits for an abort.
const keepAlive = setInterval(() => {}, 1000);
const took = { live: [], fresh: [] };
for (let i = 0; i < 2 * (trials + 5); i++) {
  const series = i % 2 === 0 ? 'live' : 'fresh';
  const stopKey = `stop:bench:${i}`;
  const lease = await holder.hold(`bench:stop:${i}`, { ttl: 30, heartbeat: 1, stopKey, ifAvailable: true });
  if (lease === null) throw new Error('not held');
  const aborted = new Promise((resolve) =>
    lease.signal.addEventListener('abort', () => resolve(process.hrtime.bigint()), { once: true }),
  );
  await sleep((series === 'live' ? 50 : 0) + Math.random() * 3);
  const raised = process.hrtime.bigint();
  await stopper.setFlag(stopKey, { ttl: 30 });
  const at = await aborted;
  if (i >= 10) took[series].push(ms(raised, at));
  await lease.release();
}
clearInterval(keepAlive);
took.live.sort((a, b) => a - b);
took.fresh.sort((a, b) => a - b);

const client = new Redis({ host: '127.0.0.1', port });
const rtt = [];
for (let i = 0; i < 2000; i++) {
  const t = process.hrtime.bigint();
  await client.ping();
  rtt.push(ms(t, process.hrtime.bigint()));
}
rtt.sort((a, b) => a - b);
client.disconnect();
console.log(`node_stop_trials=${took.live.length}`);
console.log(`node_stop_p50_ms=${pct(took.live, 50).toFixed(3)}`);
console.log(`node_stop_p99_ms=${pct(took.live, 99).toFixed(3)}`);
console.log(`node_stop_fresh_p50_ms=${pct(took.fresh, 50).toFixed(3)}`);
console.log(`node_stop_fresh_p99_ms=${pct(took.fresh, 99).toFixed(3)}`);
console.log(`node_ping_p50_ms=${pct(rtt, 50).toFixed(3)}`);
process.exit(0);
