import { open, Interrupted } from 'mistri-locks'; // or require('mistri-locks')

// Any backend by its URL: redis://…, postgres://…, a Local path, memory://.
const url = process.env.MISTRI_URL ?? 'memory://';
const locks = await open(url, { label: 'report worker' });
const ops = url === 'memory://' ? locks.newOwner() : await open(url); // another process, as it were

// Web Locks' shape: held while the callback runs, renewed in the background,
// released when it settles (returned or thrown).
const batches = await locks.request('nightly-report', { ttl: 30, stopKey: 'stop:nightly-report' }, async (lease) => {
  console.log(`holding with fence ${lease.fence}`); // storage can refuse older fences
  await ops.stopHolders('nightly-report'); // from any process: Node, Ruby, Python, C, the CLI
  let done = 0;
  try {
    for (;;) {
      lease.checkpoint(); // throws Interrupted once stopped or lost
      await work(lease.signal); // lease.signal is a real AbortSignal
      done += 1;
    }
  } catch (e) {
    if (!(e instanceof Interrupted)) throw e;
    console.log(`${e.reason} by ${e.flag} after ${done} batches`);
  }
  return done;
});
await ops.clearFlag('stop:nightly-report');

// ifAvailable: one try; null when the key is held elsewhere.
const lease = await locks.hold('nightly-report', { ttl: 30, ifAvailable: true });
console.log(`free again: ${lease !== null}, ${batches} batches`);
await lease?.release();

async function work(signal: AbortSignal): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, 20));
  signal.throwIfAborted();
}
