// The face's own cost, for bench/compare.sh: the peak number of the face's
// call threads while 2,000 one-try holds on Redis are taken 200 at a time
// (an unbounded pool starts one per call in flight), and acquire+release
// pairs on memory:// for 3 s (no backend I/O: the two hops per call between
// the JS thread and the face's threads, and the deferred promises).
// A benchmark, not a test.
//
//   node bench/threads.mjs --dir PACKAGE_DIR --port 6379
import { parseArgs } from 'node:util';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const { values } = parseArgs({ options: { dir: { type: 'string', default: '.' }, port: { type: 'string' } } });
const dir = path.resolve(values.dir);
const { open } = await import(pathToFileURL(path.join(dir, 'lib/index.mjs')).href);
const native = createRequire(import.meta.url)(path.join(dir, 'lib/native.cjs'));

const locks = await open(`redis://127.0.0.1:${values.port}/0`, { namespace: `bench:node-threads:${process.pid}` });
let peak = 0;
let done = false;
const watch = (async () => {
  while (!done) {
    peak = Math.max(peak, native.poolThreads()[0]);
    await new Promise((r) => setImmediate(r));
  }
})();
const held = [];
const started = performance.now();
for (let i = 0; i < 2000; i += 200) {
  held.push(...(await Promise.all(Array.from({ length: 200 }, (_, j) => locks.hold(`t:${i + j}`, { ttl: 30, ifAvailable: true })))));
}
const takeS = (performance.now() - started) / 1000;
done = true;
await watch;
await Promise.all(held.map((l) => l && l.release()));
console.log(`node_threads_peak_calls=${peak}`);
console.log(`node_threads_take_2000_s=${takeS.toFixed(2)}`);

const mem = await open('memory://', { namespace: 'bench' });
for (let i = 0; i < 2000; i++) {
  await mem.acquire('k', 30);
  await mem.release('k');
}
const t0 = performance.now();
let n = 0;
while (performance.now() - t0 < 3000) {
  await mem.acquire('k', 30);
  await mem.release('k');
  n += 1;
}
console.log(`node_memory_pairs=${((n * 1000) / (performance.now() - t0)).toFixed(0)}`);
process.exit(0);
