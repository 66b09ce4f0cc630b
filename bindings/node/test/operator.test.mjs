// The operator's page mounted in a node:http server and in Express by the
// same handler, over real HTTP: the core's one handler answers (the page,
// /api/state, /metrics, actions behind a token or authorize + same origin +
// the page's CSRF token, the Host check, the body limit, the request deadline).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { once } from 'node:events';
import express from 'express';
import { open, operatorHandler, LocksError } from '../lib/index.mjs';
import { startRedis, uniqueNamespace } from './support.mjs';

const TOKEN = 'a-token-of-32-characters-0123456';
let redis;
before(async () => {
  redis = await startRedis();
});
after(() => redis?.stop());

async function listen(server) {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return server.address().port;
}

/** One real HTTP request; resolves with {status, headers, body}. */
function request(port, method, path, { headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * A POST whose head goes at once and whose body goes one byte every
 * `everyMs`; the client ends its side once every byte is sent. Resolves at
 * the connection's close with what came back and how many body bytes were
 * sent when the answer arrived and when the connection closed.
 */
function trickle(port, path, headers, body, everyMs) {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks = [];
    let sent = 0;
    let sentAtAnswer = null;
    let error = null;
    let timer;
    socket.on('connect', () => {
      const head = [
        `POST ${path} HTTP/1.1`,
        `Host: 127.0.0.1:${port}`,
        `Content-Length: ${body.length}`,
        ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
        '',
        '',
      ].join('\r\n');
      socket.write(head);
      timer = setInterval(() => {
        if (socket.destroyed || !socket.writable) return clearInterval(timer);
        socket.write(body[sent]);
        sent += 1;
        if (sent === body.length) {
          clearInterval(timer);
          socket.end();
        }
      }, everyMs);
    });
    socket.on('data', (c) => {
      if (sentAtAnswer === null) sentAtAnswer = sent;
      chunks.push(c);
    });
    // A write racing the server's close may fail (EPIPE, ECONNRESET).
    socket.on('error', (e) => {
      error = e;
    });
    socket.on('close', () => {
      clearInterval(timer);
      resolve({ text: Buffer.concat(chunks).toString(), sentAtAnswer, sentAtClose: sent, error });
    });
  });
}

async function pageCsrf(port, mount) {
  const r = await request(port, 'GET', `${mount}/`);
  assert.equal(r.status, 200);
  const cookie = r.headers['set-cookie'][0].split(';')[0];
  const token = cookie.split('=')[1];
  assert.ok(r.body.includes(`content="${token}"`));
  return { cookie, token, setCookie: r.headers['set-cookie'][0] };
}

for (const [name, mount, serve] of [
  ['node:http', '', (handler) => http.createServer(handler)],
  ['Express', '/locks', (handler) => {
    const app = express();
    app.use('/locks', handler);
    return http.createServer(app);
  }],
]) {
  test(`the page in ${name}: read-only by default, the Host check, state and metrics`, { timeout: 60_000 }, async () => {
    const namespace = uniqueNamespace();
    const locks = await open(redis.url, { namespace });
    const other = await open(redis.url, { namespace });
    const server = serve(operatorHandler(locks));
    const port = await listen(server);
    try {
      const lease = await other.hold('report:42', { ttl: 30, stopKey: 'stop:report', ifAvailable: true });
      const page = await request(port, 'GET', `${mount}/`);
      assert.equal(page.status, 200);
      assert.equal(page.headers['content-type'], 'text/html; charset=utf-8');
      assert.ok(page.body.includes('<meta name="mistri-actions" content="off">'));
      const state = await request(port, 'GET', `${mount}/api/state?prefix=report`);
      assert.equal(state.status, 200);
      const doc = JSON.parse(state.body);
      assert.deepEqual(doc.leases.map((l) => [l.key, l.fence]), [['report:42', lease.fence]]);
      const metrics = await request(port, 'GET', `${mount}/metrics`);
      assert.equal(metrics.status, 200);
      assert.match(metrics.body, /mistri_locks_holds_active/);
      // DNS rebinding: another Host is refused before the backend is read.
      const rebound = await request(port, 'GET', `${mount}/api/state`, { headers: { Host: 'evil.example' } });
      assert.equal(rebound.status, 421);
      const { cookie, token } = await pageCsrf(port, mount);
      const stop = await request(port, 'POST', `${mount}/api/stop`, {
        headers: { Origin: `http://127.0.0.1:${port}`, Cookie: cookie, 'X-CSRF-Token': token, 'Content-Type': 'application/json' },
        body: JSON.stringify({ key: 'report:42' }),
      });
      assert.equal(stop.status, 403);
      assert.match(JSON.parse(stop.body).error, /read-only/);
      assert.equal(await other.flag('stop:report'), false);
      await lease.release();
    } finally {
      server.close();
    }
  });

  test(`actions in ${name}: a bearer token, or authorize + same origin + the page's CSRF token`, { timeout: 60_000 }, async () => {
    const namespace = uniqueNamespace();
    const locks = await open(redis.url, { namespace });
    const other = await open(redis.url, { namespace });
    let allowed = true;
    const seen = [];
    const authorize = (req) => {
      seen.push(req.method);
      return allowed;
    };
    const withToken = serve(operatorHandler(locks, { token: TOKEN }));
    const withAuthorize = serve(operatorHandler(locks, { authorize }));
    const tokenPort = await listen(withToken);
    const authPort = await listen(withAuthorize);
    try {
      const lease = await other.hold('job:1', { ttl: 30, heartbeat: 0.2, stopKey: 'stop:job:1', ifAvailable: true });
      const body = JSON.stringify({ key: 'job:1' });
      const post = (port, path, headers) => request(port, 'POST', `${mount}${path}`, { headers, body });
      assert.equal((await post(tokenPort, '/api/stop', {})).status, 403);
      assert.equal((await post(tokenPort, '/api/stop', { Authorization: 'Bearer wrong-token-0123456789' })).status, 403);
      assert.equal((await post(tokenPort, '/api/stop', { Authorization: `Bearer ${TOKEN}`, Origin: 'http://evil.example' })).status, 403);
      const aborted = once(lease.signal, 'abort');
      const keep = setInterval(() => {}, 1000);
      const stopped = await post(tokenPort, '/api/stop', { Authorization: `Bearer ${TOKEN}` });
      assert.equal(stopped.status, 200, stopped.body);
      await aborted;
      clearInterval(keep);
      assert.equal(lease.signal.reason.flag, 'stop:job:1', 'the page\'s Stop reached the lease');
      await other.clearFlag('stop:job:1');

      const { cookie, token, setCookie } = await pageCsrf(authPort, mount);
      assert.ok(setCookie.includes(`Path=${mount || '/'}`), setCookie);
      const good = { Origin: `http://127.0.0.1:${authPort}`, Cookie: cookie, 'X-CSRF-Token': token };
      assert.equal((await post(authPort, '/api/break', {})).status, 403);
      assert.equal((await post(authPort, '/api/break', { ...good, Origin: 'http://evil.example' })).status, 403);
      assert.equal((await post(authPort, '/api/break', { ...good, 'X-CSRF-Token': 'nope' })).status, 403);
      allowed = false;
      assert.equal((await post(authPort, '/api/break', good)).status, 403);
      allowed = true;
      const broken = await post(authPort, '/api/break', good);
      assert.equal(broken.status, 200, broken.body);
      assert.equal(await other.held('job:1'), false);
      assert.ok(seen.length >= 2, 'authorize was asked for actions');
      await lease.releaseOutcome();
      // A body over the limit is refused unread; a bad Content-Length too.
      const big = await request(tokenPort, 'POST', `${mount}/api/clear`, {
        headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Length': '70000' },
        body: 'x'.repeat(70000),
      });
      assert.equal(big.status, 413);
    } finally {
      withToken.close();
      withAuthorize.close();
    }
  });

  test(`a body trickled past requestTimeout in ${name}: 408, the connection closed, nothing done`, { timeout: 60_000 }, async () => {
    const namespace = uniqueNamespace();
    const locks = await open(redis.url, { namespace });
    const other = await open(redis.url, { namespace });
    const server = serve(operatorHandler(locks, { token: TOKEN, requestTimeout: 0.5 }));
    const port = await listen(server);
    try {
      const lease = await other.hold('job:2', { ttl: 30, stopKey: 'stop:job:2', ifAvailable: true });
      // 60 bytes, one every 200 ms: the whole body would take 12 s, the
      // deadline is 0.5 s from the head.
      const body = JSON.stringify({ key: 'job:2' }).padEnd(60, ' ');
      const headers = { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' };
      const slow = await trickle(port, `${mount}/api/stop`, headers, body, 200);
      assert.match(slow.text, /^HTTP\/1\.1 408 Request Timeout\r\n/, slow.text);
      assert.match(slow.text, /\r\nConnection: close\r\n/i, slow.text);
      assert.match(slow.text, /did not arrive within 0\.5 s/, slow.text);
      assert.ok(slow.sentAtAnswer < body.length, `408 after ${slow.sentAtAnswer} of ${body.length} bytes`);
      assert.ok(slow.sentAtClose < body.length, `closed after ${slow.sentAtClose} of ${body.length} bytes: the server closed it`);
      assert.equal(await other.flag('stop:job:2'), false, 'the trickled stop was not performed');
      assert.equal(lease.signal.aborted, false);
      // The same handler serves a request whose body comes at once.
      const stopped = await request(port, 'POST', `${mount}/api/stop`, { headers, body });
      assert.equal(stopped.status, 200, stopped.body);
      assert.equal(await other.flag('stop:job:2'), true);
      await lease.release();
    } finally {
      server.close();
    }
  });
}

test('operatorHandler refuses what the other faces refuse', async () => {
  const locks = await open('memory://');
  assert.throws(() => operatorHandler(locks, { token: 'short' }), LocksError);
  assert.throws(() => operatorHandler(locks, { allowActions: true }), LocksError);
  assert.throws(() => operatorHandler('not a handle'), TypeError);
  assert.throws(() => operatorHandler(locks, { allowedHosts: 'localhost' }), TypeError);
  for (const bad of [0, -1, NaN, Infinity, 2e9]) {
    assert.throws(
      () => operatorHandler(locks, { requestTimeout: bad }),
      (e) => e instanceof LocksError && e.code === 'MISTRI_INVALID_ARGUMENT' && /^requestTimeout must be /.test(e.message),
      String(bad),
    );
  }
  for (const bad of ['10', null, 10n]) {
    assert.throws(() => operatorHandler(locks, { requestTimeout: bad }), /requestTimeout must be a number of seconds/);
  }
  assert.equal(typeof operatorHandler(locks, { requestTimeout: 1e9 }), 'function');
});
