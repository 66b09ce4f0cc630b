'use strict';
// Loads the native addon, one file per platform, named
// mistri_locks.<platform>-<arch>[-<abi>].node (the napi-rs layout), from:
//   1. the package's own folder: the file `npm run build` (napi build
//      --platform) puts there in a checkout (the dev build);
//   2. the platform package @mistri-locks/<platform>-<arch>[-<abi>], the
//      prebuilt addon npm installs as an optional dependency of
//      mistri-locks (only the one whose os/cpu/libc match).
// Each worker_thread loads it for itself.
const path = require('node:path');

function abi() {
  if (process.platform !== 'linux') return '';
  const report = process.report && process.report.getReport ? process.report.getReport() : null;
  const glibc = report && report.header && report.header.glibcVersionRuntime;
  return glibc ? '-gnu' : '-musl';
}

const suffix = `${process.platform}-${process.arch}${abi()}`;
const file = path.join(__dirname, '..', `mistri_locks.${suffix}.node`);
const platformPackage = `@mistri-locks/${suffix}`;

function load() {
  const failures = [];
  for (const where of [file, platformPackage]) {
    try {
      return require(where);
    } catch (e) {
      failures.push({ where, e });
    }
  }
  const tried = failures.map(({ where, e }) => `${where} (${e.message.split('\n')[0]})`).join('; ');
  const err = new Error(
    `mistri-locks: no native addon for ${suffix} could be loaded: tried ${tried}. ` +
      `Install the prebuilt addon with \`npm install ${platformPackage}\` (npm installs it with mistri-locks ` +
      'unless optional dependencies are omitted), or build it from source with `npm run build` in bindings/node ' +
      '(needs a Rust toolchain)',
  );
  err.code = 'MISTRI_NO_ADDON';
  err.cause = failures[failures.length - 1].e;
  throw err;
}

module.exports = load();
