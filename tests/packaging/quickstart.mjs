// The Node quick start against the backend at argv[2], run by
// tests/packaging/run.sh with the installed npm tarball: holds
// "nightly-report" watching "stop:nightly-report", has another process
// raise that flag, and works until the lease's signal aborts. Prints
// HELD <fence>, then STOPPED <reason>.
import { execFileSync } from 'node:child_process';
import { open } from 'mistri-locks';

const url = process.argv[2];
const locks = await open(url, { namespace: 'mistri:locks' });
const opts = { ttl: 60, heartbeat: 10, stopKey: 'stop:nightly-report', ifAvailable: true };
await locks.request('nightly-report', opts, async (lease) => {
  if (lease === null) throw new Error('another worker is on it');
  console.log('HELD', lease.fence);
  // From any process, any language:
  execFileSync(process.execPath, [
    '--input-type=module',
    '-e',
    "import { open } from 'mistri-locks';" +
      "await (await open(process.argv[1], { namespace: 'mistri:locks' })).setFlag('stop:nightly-report', { ttl: 300 });",
    url,
  ]);
  // The signal aborts within a tick (1 s) of the flag; the wait is bounded
  // only so that a broken install ends the run instead of hanging it.
  for (let i = 0; i < 600 && !lease.signal.aborted; i++) await new Promise((r) => setTimeout(r, 100));
  if (!lease.signal.aborted) throw new Error("the stop flag did not abort the lease's signal");
  console.log('STOPPED', lease.signal.reason.message);
});
if (await locks.held('nightly-report')) throw new Error('not released');
await locks.clearFlag('stop:nightly-report');
