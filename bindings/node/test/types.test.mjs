// TypeScript: `tsc --strict` passes on the declarations (lib/index.d.ts)
// and on the README's quick start (examples/quickstart.ts), which then runs
// as written, importing the package by its name.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync, symlinkSync, mkdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const tsc = path.join(pkg, 'node_modules/typescript/bin/tsc');

test('tsc --strict passes on the declarations, the quick start and an `await using` block, which run', { timeout: 120_000 }, () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'mistri-node-ts-'));
  try {
    // A project that depends on the package by name, as a user's would.
    mkdirSync(path.join(dir, 'node_modules/@types'), { recursive: true });
    symlinkSync(pkg, path.join(dir, 'node_modules/mistri-locks'));
    symlinkSync(path.join(pkg, 'node_modules/@types/node'), path.join(dir, 'node_modules/@types/node'));
    writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ type: 'module', private: true }));
    writeFileSync(path.join(dir, 'quickstart.ts'), readFileSync(path.join(pkg, 'examples/quickstart.ts')));
    // `await using` (TypeScript lowers it for runtimes without the syntax; it
    // calls the lease's Symbol.asyncDispose on the way out of the block).
    writeFileSync(
      path.join(dir, 'using.ts'),
      [
        "import { open } from 'mistri-locks';",
        "const locks = await open('memory://');",
        'const other = locks.newOwner();',
        '{',
        "  await using lease = await locks.hold('scoped', { ttl: 5, ifAvailable: true });",
        "  console.log(`inside: ${await other.held('scoped')}, fence ${lease?.fence}`);",
        '}',
        "console.log(`after: ${await other.held('scoped')}`);",
        '',
      ].join('\n'),
    );
    writeFileSync(
      path.join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          target: 'es2022',
          module: 'nodenext',
          moduleResolution: 'nodenext',
          lib: ['es2022', 'esnext.disposable', 'dom'],
          types: ['node'],
          skipLibCheck: false,
          outDir: 'out',
        },
        files: ['quickstart.ts', 'using.ts', 'node_modules/mistri-locks/lib/index.d.ts'],
      }),
    );
    const compiled = spawnSync(process.execPath, [tsc, '-p', dir], { encoding: 'utf8', cwd: dir });
    assert.equal(compiled.status, 0, `tsc --strict failed:\n${compiled.stdout}${compiled.stderr}`);
    const ran = spawnSync(process.execPath, [path.join(dir, 'out/quickstart.js')], { encoding: 'utf8', cwd: dir, timeout: 60_000 });
    assert.equal(ran.status, 0, ran.stderr);
    assert.match(ran.stdout, /holding with fence \d+/);
    assert.match(ran.stdout, /stopped by stop:nightly-report after \d+ batches/);
    assert.match(ran.stdout, /free again: true, \d+ batches/);
    const using = spawnSync(process.execPath, [path.join(dir, 'out/using.js')], { encoding: 'utf8', cwd: dir, timeout: 60_000 });
    assert.equal(using.status, 0, using.stderr);
    assert.match(using.stdout, /^inside: true, fence \d+\nafter: false\n$/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the README\'s Node quick start is examples/quickstart.ts, word for word', () => {
  const readme = readFileSync(path.join(pkg, '../../README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Node quick start'));
  const block = section.slice(section.indexOf('```ts\n') + 6, section.indexOf('```\n', section.indexOf('```ts\n') + 6));
  assert.equal(block, readFileSync(path.join(pkg, 'examples/quickstart.ts'), 'utf8'));
});

test('require and import of the package give the same objects', () => {
  const run = spawnSync(
    process.execPath,
    ['--input-type=module', '-e', `
      import { createRequire } from 'node:module';
      const require = createRequire(${JSON.stringify(path.join(pkg, 'x.js'))});
      const cjs = require('mistri-locks');
      const esm = await import('mistri-locks');
      if (cjs.open !== esm.open || cjs.Lease !== esm.Lease || esm.default !== cjs) throw new Error('two instances');
      console.log(typeof esm.open, esm.version);
    `],
    { encoding: 'utf8', cwd: pkg },
  );
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /^function \d+\.\d+\.\d+/);
});
