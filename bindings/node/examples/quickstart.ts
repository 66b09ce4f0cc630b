// The README's Node quick start: test/types.test.mjs compiles it with
// `tsc --strict` and runs it. MISTRI_URL: any backend URL (default memory://).
import { open, Interrupted } from 'mistri-locks';

const url = process.env.MISTRI_URL ?? 'memory://';
const locks = await open(url, { label: 'report worker' });
const other = url === 'memory://' ? locks.newOwner() : await open(url); // another process, as it were

// Web Locks' shape: held while the callback runs, renewed in the background,
// released when it settles (returned or thrown).
const batches = await locks.request('nightly-report', { ttl: 30, stopKey: 'stop:nightly-report' }, async (lease) => {
  console.log(`holding with fence ${lease.fence}`); // storage can refuse older fences
  await other.stopHolders('nightly-report', { ttl: 60 }); // from anywhere: Node, Ruby, Python, C, the CLI
  let done = 0;
  try {
    for (;;) {
      lease.checkpoint(); // throws Interrupted once stopped or lost
      await fetchBatch(lease.signal); // lease.signal is a real AbortSignal
      done += 1;
    }
  } catch (e) {
    if (!(e instanceof Interrupted)) throw e;
    console.log(`${e.reason} by ${e.flag} after ${done} batches`);
  }
  return done;
});
await other.clearFlag('stop:nightly-report');

// ifAvailable: one try, null when held elsewhere.
const lease = await locks.hold('nightly-report', { ttl: 30, ifAvailable: true });
console.log(`free again: ${lease !== null}, ${batches >= 0}`);
await lease?.release();

async function fetchBatch(signal: AbortSignal): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, 20));
  signal.throwIfAborted();
}
