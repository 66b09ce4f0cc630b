// TypeScript: `tsc --strict` passes on lib/bullmq.d.ts and on a BullMQ
// worker written against it (npm bullmq's own types: its Worker takes the
// leased processor, the processor gets a typed Job and a Lease).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync, symlinkSync, mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const tsc = path.join(pkg, 'node_modules/typescript/bin/tsc');

const program = `
import { Worker, Job } from 'bullmq';
import { open, Interrupted } from 'mistri-locks';
import { leased, stop, stopKey, Conflict } from 'mistri-locks/bullmq';

interface Report { accountId: number }

export async function start(url: string): Promise<Worker<Report>> {
  const locks = await open(url);
  const processor = leased(
    async (job: Job<Report>, lease) => {
      let batches = 0;
      for (let i = 0; i < 3; i++) {
        lease.checkpoint();
        batches += job.data.accountId > 0 ? 1 : 0;
      }
      return lease.fence + batches;
    },
    { locks, key: (job) => \`report:\${job.data.accountId}\`, ttl: 60, onConflict: 'retry', onLost: 'raise' },
  );
  const checked: number = processor.leaseOptions.heartbeat;
  void checked;
  const worker = new Worker<Report>('reports', processor, { connection: { host: '127.0.0.1' } });
  worker.on('failed', (_job, err) => {
    if (err instanceof Conflict) console.log(err.key, err.attempts);
    if (err instanceof Interrupted) console.log(err.reason);
  });
  const key: string = stopKey('reports', 17);
  const raised: string = await stop('reports', '17', { locks, ttl: 60 });
  void key;
  void raised;
  return worker;
}
`;

test('tsc --strict passes on lib/bullmq.d.ts and a BullMQ worker using it', { timeout: 120_000 }, () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'mistri-bullmq-ts-'));
  try {
    mkdirSync(path.join(dir, 'node_modules/@types'), { recursive: true });
    symlinkSync(pkg, path.join(dir, 'node_modules/mistri-locks'));
    symlinkSync(path.join(pkg, 'node_modules/bullmq'), path.join(dir, 'node_modules/bullmq'));
    symlinkSync(path.join(pkg, 'node_modules/@types/node'), path.join(dir, 'node_modules/@types/node'));
    writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ type: 'module', private: true }));
    writeFileSync(path.join(dir, 'worker.ts'), program);
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
          skipLibCheck: true,
          noEmit: true,
        },
        files: ['worker.ts', 'node_modules/mistri-locks/lib/bullmq.d.ts'],
      }),
    );
    const compiled = spawnSync(process.execPath, [tsc, '-p', dir], { encoding: 'utf8', cwd: dir });
    assert.equal(compiled.status, 0, `tsc --strict failed:\n${compiled.stdout}${compiled.stderr}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
