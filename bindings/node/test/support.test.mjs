// The throwaway servers start, answer and stop (the other suites lean on them).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startRedis, startPostgres } from './support.mjs';

test('a throwaway redis-server answers PING and is gone after stop', async () => {
  const redis = await startRedis();
  try {
    assert.equal(await redis.command('PING'), '+PONG');
  } finally {
    redis.stop();
  }
  await assert.rejects(redis.command('PING'));
});

test('a throwaway PostgreSQL runs SQL on database mistri', () => {
  const pg = startPostgres();
  try {
    assert.equal(pg.psql('SELECT current_database()'), 'mistri');
  } finally {
    pg.stop();
  }
});
