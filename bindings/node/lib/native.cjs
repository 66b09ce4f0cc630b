'use strict';
// Loads the addon built by `npm run build` (napi build --platform): one
// file per platform, named mistri_locks.<platform>-<arch>[-<abi>].node, in
// the package's folder. Each worker_thread loads it for itself.
const path = require('node:path');

function abi() {
  if (process.platform !== 'linux') return '';
  const report = process.report && process.report.getReport ? process.report.getReport() : null;
  const glibc = report && report.header && report.header.glibcVersionRuntime;
  return glibc ? '-gnu' : '-musl';
}

const suffix = `${process.platform}-${process.arch}${abi()}`;
const file = path.join(__dirname, '..', `mistri_locks.${suffix}.node`);
try {
  module.exports = require(file);
} catch (e) {
  const err = new Error(
    `mistri-locks: could not load the native addon ${file} (${e.message}); ` +
      'build it with `npm run build` in bindings/node (needs a Rust toolchain)',
  );
  err.code = 'MISTRI_NO_ADDON';
  err.cause = e;
  throw err;
}
