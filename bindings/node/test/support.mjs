// Throwaway servers for the node:test suites: a redis-server and a
// PostgreSQL, each on a free 127.0.0.1 port, stopped and removed by
// `stop()`. PostgreSQL comes from tests/support/throwaway_postgres.py (the
// helper the C, Python and Ruby suites share: initdb with trust auth, no
// fsync, and, as root, initdb and postgres run as the `postgres` user).
//
//   import { startRedis, startPostgres, startMariadb } from './support.mjs';
//   const redis = await startRedis();      // .url, .port, .command(...args)
//   const pg = startPostgres();            // .url, .port, .psql(sql)
//   after(() => { redis.stop(); pg.stop(); });

import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '../../..');

/** A port nobody listens on right now (the kernel's choice on 127.0.0.1). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** One RESP command on a fresh connection; resolves with the first reply line. */
export function redisCommand(port, ...args) {
  const payload =
    `*${args.length}\r\n` +
    args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join('');
  return new Promise((resolve, reject) => {
    const socket = net.createConnection({ host: '127.0.0.1', port });
    let reply = '';
    socket.setTimeout(5000, () => socket.destroy(new Error('redis command timed out')));
    socket.on('connect', () => socket.write(payload));
    socket.on('data', (chunk) => {
      reply += chunk.toString();
      if (reply.includes('\r\n')) {
        socket.end();
        resolve(reply.split('\r\n')[0]);
      }
    });
    socket.on('error', reject);
  });
}

/** A redis-server on a free loopback port, no persistence, its own folder. */
export async function startRedis() {
  if (!existsOnPath('redis-server')) {
    throw new Error('redis-server is not installed (scripts/setup installs it)');
  }
  const dir = mkdtempSync(path.join(os.tmpdir(), 'mistri-node-redis-'));
  let last = '';
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const proc = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let exited = false;
    proc.on('exit', () => {
      exited = true;
    });
    proc.stderr.on('data', (d) => {
      last += d;
    });
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline && !exited) {
      try {
        if ((await redisCommand(port, 'PING')) === '+PONG') {
          return {
            port,
            url: `redis://127.0.0.1:${port}/0`,
            proc,
            command: (...args) => redisCommand(port, ...args),
            stop() {
              if (!exited) proc.kill('SIGKILL');
              rmSync(dir, { recursive: true, force: true });
            },
          };
        }
      } catch {
        await sleep(20);
      }
    }
    if (!exited) proc.kill('SIGKILL');
  }
  rmSync(dir, { recursive: true, force: true });
  throw new Error(`redis-server did not start: ${last || 'timeout'}`);
}

/** A throwaway PostgreSQL (database `mistri`), via tests/support/throwaway_postgres.py. */
export function startPostgres() {
  const helper = path.join(repoRoot, 'tests/support/throwaway_postgres.py');
  // The folder must not exist yet and must be reachable by the postgres user.
  const parent = mkdtempSync('/tmp/mistri-node-pg-');
  execFileSync('chmod', ['755', parent]);
  const dir = path.join(parent, 'pg');
  let url;
  try {
    url = execFileSync('python3', [helper, 'start', dir], { encoding: 'utf8', timeout: 120_000 }).trim();
  } catch (e) {
    rmSync(parent, { recursive: true, force: true });
    throw new Error(`could not start PostgreSQL (scripts/setup installs postgresql): ${e.stderr || e.message}`);
  }
  const port = Number(new URL(url).port);
  return {
    url,
    port,
    dir,
    psql(sql) {
      return execFileSync(
        'psql',
        ['-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', '-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-d', 'mistri', '-c', sql],
        { encoding: 'utf8', timeout: 30_000 },
      ).trim();
    },
    stop() {
      try {
        execFileSync('python3', [helper, 'stop', dir], { stdio: 'ignore', timeout: 90_000 });
      } finally {
        rmSync(parent, { recursive: true, force: true });
      }
    },
  };
}

/** A throwaway MariaDB (database `mistri`, user `mistri`), via tests/support/throwaway_mariadb.py. */
export function startMariadb() {
  const helper = path.join(repoRoot, 'tests/support/throwaway_mariadb.py');
  const parent = mkdtempSync('/tmp/mistri-node-my-');
  const dir = path.join(parent, 'my');
  let url;
  try {
    url = execFileSync('python3', [helper, 'start', dir], { encoding: 'utf8', timeout: 120_000 }).trim();
  } catch (e) {
    rmSync(parent, { recursive: true, force: true });
    throw new Error(`could not start MariaDB (scripts/setup installs mariadb-server): ${e.stderr || e.message}`);
  }
  return {
    url,
    port: Number(new URL(url).port),
    dir,
    stop() {
      try {
        execFileSync('python3', [helper, 'stop', dir], { stdio: 'ignore', timeout: 90_000 });
      } finally {
        rmSync(parent, { recursive: true, force: true });
      }
    },
  };
}

let counter = 0;
/** A namespace no other test (or earlier run) uses. */
export function uniqueNamespace(prefix = 'node') {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}-${Math.random().toString(36).slice(2, 8)}`;
}

function existsOnPath(cmd) {
  return (process.env.PATH || '')
    .split(path.delimiter)
    .some((d) => d && existsSync(path.join(d, cmd)));
}
