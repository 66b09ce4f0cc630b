// A real BullMQ Worker process whose processor is `leased(...)`, for
// test/bullmq.test.mjs. Every run appends lines to a witness file (one
// appendFileSync of one line each: atomic with O_APPEND):
//   "w <queue:id> <pid> <time>"     before the run asks for its lease
//   "+ <queue:id> <fence> <time>"   the lease is held, the work starts
//   "- <queue:id> <fence> <time>"   the work ended (before the release)
//   "x <queue:id> <reason> <time>"  Interrupted (stopped | lost) at a checkpoint
// (BullMQ numbers jobs per queue: the queue tells two queues' job 1 apart.)
// Times are Date.now() / 1000 (the machine's one clock, as the test's).
//
// Settings from the environment:
//   MISTRI_URL, MISTRI_NS   the lease backend
//   BULL_PORT, QUEUE        BullMQ's redis-server and queue
//   WITNESS, READY          the witness file; a file created once the worker is ready
//   JOB_TTL, JOB_HEARTBEAT  the lease (seconds)
//   JOB_OPTIONS             more leased() options, as JSON (wait, onConflict, backoff ...)
//   CONCURRENCY             the Worker's concurrency (default 5)
// A job's data: { tag, seconds } — the key is `serial:<tag>`, the work
// `seconds` long with a checkpoint every heartbeat / 4.
import { appendFileSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { Worker } from 'bullmq';
import { open } from '../../lib/index.mjs';
import { leased, jobRef, Interrupted } from '../../lib/bullmq.mjs';

const env = process.env;
const ttl = Number(env.JOB_TTL);
const heartbeat = Number(env.JOB_HEARTBEAT);
const extra = JSON.parse(env.JOB_OPTIONS || '{}');
const witness = (...fields) => appendFileSync(env.WITNESS, `${fields.join(' ')} ${Date.now() / 1000}\n`);

const locks = await open(env.MISTRI_URL, { namespace: env.MISTRI_NS });

const work = leased(
  async (job, lease) => {
    witness('+', jobRef(job), lease.fence);
    const deadline = performance.now() + job.data.seconds * 1000;
    try {
      while (performance.now() < deadline) {
        lease.checkpoint();
        await sleep((heartbeat * 1000) / 4);
      }
    } catch (e) {
      if (e instanceof Interrupted) witness('x', jobRef(job), e.reason);
      throw e;
    }
    witness('-', jobRef(job), lease.fence);
    return 'done';
  },
  { locks, key: (job) => `serial:${job.data.tag}`, ttl, heartbeat, ...extra },
);

const worker = new Worker(
  env.QUEUE,
  async (job, token, signal) => {
    witness('w', jobRef(job), process.pid);
    return work(job, token, signal);
  },
  {
    connection: { host: '127.0.0.1', port: Number(env.BULL_PORT), maxRetriesPerRequest: null },
    concurrency: Number(env.CONCURRENCY || 5),
    // The delayed set is promoted by the worker itself; a short drain delay
    // keeps an idle worker's blocking poll short for a clean shutdown.
    drainDelay: 1,
  },
);
worker.on('error', (e) => process.stderr.write(`worker error: ${e.stack || e}\n`));
await worker.waitUntilReady();
writeFileSync(env.READY, String(process.pid));

process.on('SIGTERM', async () => {
  await worker.close();
  process.exit(0);
});
