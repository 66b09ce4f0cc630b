// `npm run build` (debug) and `npm run build -- --release`: builds the addon
// with cargo in the workspace's own target dir (no --target, so the core and
// its dependencies compiled by `cargo test --workspace` are reused), then
// copies the library next to package.json under the name lib/native.cjs
// loads: mistri_locks.<platform>-<arch>[-gnu|-musl].node.
// (`npm run build:napi` is @napi-rs/cli's own build, which always passes
// --target and so compiles the core a second time in target/<triple>/.)
import { execFileSync } from 'node:child_process';
import { copyFileSync, renameSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const pkgDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const release = process.argv.includes('--release');
const args = ['build', '-p', 'mistri_locks_node', '--message-format=short'];
if (release) args.push('--release');
execFileSync('cargo', args, { cwd: pkgDir, stdio: 'inherit' });

const meta = JSON.parse(
  execFileSync('cargo', ['metadata', '--format-version', '1', '--no-deps'], { cwd: pkgDir, encoding: 'utf8' }),
);
const lib = { linux: 'libmistri_locks_node.so', darwin: 'libmistri_locks_node.dylib', win32: 'mistri_locks_node.dll' }[
  process.platform
];
const src = path.join(meta.target_directory, release ? 'release' : 'debug', lib);
const report = process.platform === 'linux' ? process.report.getReport() : null;
const abi = report ? (report.header.glibcVersionRuntime ? '-gnu' : '-musl') : '';
const dest = path.join(pkgDir, `mistri_locks.${process.platform}-${process.arch}${abi}.node`);
// Copy then rename: a process that has the old file loaded keeps its mapping.
copyFileSync(src, `${dest}.tmp`);
renameSync(`${dest}.tmp`, dest);
console.log(`built ${path.relative(pkgDir, dest)} from ${src}`);
