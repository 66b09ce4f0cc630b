'use strict';
// The operator's page for Node servers: one handler for `node:http`
// (`http.createServer(handler)`) and Express (`app.use('/locks', handler)`),
// serving what `mistri-locks serve` serves. The routes, the Host check, the
// token and CSRF rules, the JSON and the metrics are the core's one handler
// (native.operatorHandle); this file reads the request and writes the answer.

const ACTIONS = ['/api/stop', '/api/clear', '/api/break'];

// setTimeout's largest delay (about 24.8 days); a longer one would fire at once.
const MAX_TIMER_MS = 2 ** 31 - 1;

module.exports = ({ native, NATIVE, Locks, LocksError, call, checkSeconds }) => {
  function invalid(message) {
    return new LocksError(message, 'MISTRI_INVALID_ARGUMENT');
  }

  function header(req, name) {
    const v = req.headers[name];
    if (v === undefined) return null;
    return Array.isArray(v) ? v.join(', ') : v;
  }

  function send(req, res, answer) {
    const headers = answer.headers.map(([k, v]) => [k, v]);
    headers.push(['Content-Length', String(answer.body.length)]);
    res.writeHead(answer.status, answer.reason, headers.flat());
    res.end(req.method === 'HEAD' ? undefined : answer.body);
  }

  function refusal(status, reason, message) {
    const body = Buffer.from(JSON.stringify({ ok: false, error: message }));
    return { status, reason, headers: [['Content-Type', 'application/json']], body };
  }

  const TIMED_OUT = Symbol('timed out');

  /**
   * The body, at most `max` bytes; null when it is longer; TIMED_OUT when it
   * is not complete within `ms` of the call.
   */
  function readBody(req, max, ms) {
    return new Promise((resolve, reject) => {
      const chunks = [];
      let size = 0;
      let done = false;
      const finish = (settle, value) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        settle(value);
      };
      const timer = setTimeout(() => finish(resolve, TIMED_OUT), ms);
      req.on('data', (chunk) => {
        if (done) return;
        size += chunk.length;
        if (size > max) {
          finish(resolve, null);
          req.resume();
          return;
        }
        chunks.push(chunk);
      });
      req.on('end', () => finish(resolve, Buffer.concat(chunks)));
      req.on('error', (e) => finish(reject, e));
    });
  }

  /**
   * A request handler `(req, res[, next])` serving the operator's page for
   * `locks`. Read-only unless `token` (Authorization: Bearer) or `authorize(req)`
   * is given; `allowedHosts` (default: the loopback names), `trustForwarded`
   * and `prefix` as `mistri-locks serve` has them (docs/OPERATING.md). A
   * request whose body is not complete within `requestTimeout` seconds of
   * the call (default 10, as `serve`) is answered 408, its connection
   * closed, and nothing done for it.
   */
  function operatorHandler(locks, options = {}) {
    if (!(locks instanceof Locks)) throw new TypeError('operatorHandler takes a Locks (from open(url))');
    const { authorize, token, prefix = '', allowedHosts = [], trustForwarded = false, requestTimeout = 10 } = options;
    checkSeconds('requestTimeout', requestTimeout);
    call(() => native.checkSeconds('requestTimeout', requestTimeout));
    const timeoutMs = Math.min(Math.ceil(requestTimeout * 1000), MAX_TIMER_MS);
    let { allowActions } = options;
    if (authorize !== undefined && typeof authorize !== 'function') {
      throw new TypeError('authorize must be a function (req) => boolean');
    }
    if (token !== undefined && typeof token !== 'string') throw invalid('token must be a string');
    if (typeof prefix !== 'string') throw new TypeError('prefix must be a string');
    if (!Array.isArray(allowedHosts) || allowedHosts.some((h) => typeof h !== 'string' || h === '')) {
      throw new TypeError('allowedHosts must be an array of non-empty host names');
    }
    if (typeof trustForwarded !== 'boolean') throw new TypeError('trustForwarded must be a boolean');
    // The core's one parser holds the rules (the token's length; actions
    // need a token or authorize; allowActions' default).
    if (allowActions !== undefined) allowActions = Boolean(allowActions);
    const served = { prefix, allowActions, token, authorize: authorize !== undefined, allowedHosts, trustForwarded };
    call(() => native.operatorOptionsCheck(served));
    const n = NATIVE.get(locks);
    const max = native.operatorMaxBody();

    async function answer(req) {
      const length = req.headers['content-length'];
      if (length !== undefined && !/^[0-9]+$/.test(length)) {
        return refusal(400, 'Bad Request', 'Content-Length must be a non-negative decimal integer');
      }
      if (length !== undefined && Number(length) > max) return native.operatorTooLarge();
      const body = await readBody(req, max, timeoutMs);
      if (body === TIMED_OUT) {
        const late = refusal(408, 'Request Timeout', `the request body did not arrive within ${requestTimeout} s`);
        late.headers.push(['Connection', 'close']);
        return late;
      }
      if (body === null) return native.operatorTooLarge();
      // Express strips its mount point from req.url and keeps it in req.baseUrl.
      const url = new URL(req.url || '/', 'http://mount.invalid');
      const path = url.pathname || '/';
      let hostAuthorized;
      if (req.method === 'POST' && ACTIONS.includes(path) && authorize) {
        hostAuthorized = Boolean(await authorize(req));
      }
      return native.operatorHandle(
        n,
        {
          method: req.method || 'GET',
          path,
          query: url.search.replace(/^\?/, ''),
          mount: req.baseUrl || '',
          scheme: req.socket && req.socket.encrypted ? 'https' : 'http',
          host: header(req, 'host') ?? undefined,
          forwardedProto: header(req, 'x-forwarded-proto') ?? undefined,
          forwardedHost: header(req, 'x-forwarded-host') ?? undefined,
          origin: header(req, 'origin') ?? undefined,
          authorization: header(req, 'authorization') ?? undefined,
          csrf: header(req, 'x-csrf-token') ?? undefined,
          cookie: header(req, 'cookie') ?? undefined,
          body,
          hostAuthorized,
        },
        served,
      );
    }

    return function mistriLocksOperator(req, res, next) {
      answer(req).then(
        (a) => send(req, res, a),
        (e) => {
          if (typeof next === 'function') return next(e);
          if (!res.headersSent) send(req, res, refusal(500, 'Internal Server Error', String(e && e.message)));
          else res.destroy(e);
        },
      );
    };
  }

  return { operatorHandler };
};
