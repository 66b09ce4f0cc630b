// The contract suite: the cases of tests/contract/cases.txt (shared with
// the Rust, C, Python and Ruby runners; format in tests/contract/README.md)
// run through the Node face on Memory, Local, Redis and PostgreSQL, each on
// real servers started here (test/support.mjs).
//
// Node's mapping: a `hold` step is `locks.hold(key, {ifAvailable: true, …})`
// (one try, as the contract's hold); `signal s` is an AbortController whose
// signal a hold may be given. JavaScript cannot abort a caller's signal, so
// the lease's own `lease.signal` follows it: after `hold … signal=s -> h`,
// the steps on `s` read h's lease signal and `same_signal h s` asks whether
// h was given s.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { open, configure, hold as holdConfigured, LocksError } from '../lib/index.mjs';
import { repoRoot, startRedis, startPostgres, startMariadb, uniqueNamespace } from './support.mjs';

const CASES_FILE = path.join(repoRoot, 'tests/contract/cases.txt');

/** Spaces separate, quotes group (possibly nothing), `#` comments. */
export function words(line) {
  const out = [];
  let word = null;
  let quoted = false;
  for (const c of line) {
    if (c === '#' && !quoted && word === null) break;
    if (/\s/.test(c) && !quoted) {
      if (word !== null) out.push(word);
      word = null;
    } else if (c === '"') {
      quoted = !quoted;
      word = word ?? '';
    } else {
      word = (word ?? '') + c;
    }
  }
  if (word !== null) out.push(word);
  return out;
}

function parse() {
  const cases = new Map();
  let steps = null;
  readFileSync(CASES_FILE, 'utf8')
    .split('\n')
    .forEach((line, i) => {
      const w = words(line);
      if (w[0] === 'case') {
        steps = [];
        cases.set(w[1], steps);
      } else if (w.length) {
        steps.push([i + 1, w]);
      }
    });
  return cases;
}

const CASES = parse();

function num(text) {
  if (text === 'inf') return Infinity;
  if (text === '-inf') return -Infinity;
  if (text === 'nan') return NaN;
  const n = Number(text);
  assert.ok(!Number.isNaN(n), `not a number: ${text}`);
  return n;
}

class Run {
  constructor(backend) {
    this.backend = backend;
    this.owners = new Map();
    this.holds = new Map();
    this.signals = new Map(); // name -> {controller, givenTo}
    this.fences = new Map();
    this.mark = performance.now();
  }

  async owner(name) {
    if (!this.owners.has(name)) {
      this.owners.set(name, name === 'A' ? await this.backend.first() : await this.backend.owner());
    }
    return this.owners.get(name);
  }

  /** The AbortSignal a step names: a hold's, or a caller's (followed by the lease it was given to). */
  signal(name) {
    const s = this.signals.get(name);
    if (s) return s.givenTo ? s.givenTo.signal : s.controller.signal;
    const h = this.holds.get(name);
    assert.ok(h, `no signal or hold ${name}`);
    return h.signal;
  }

  fence(key, got, want) {
    const last = this.fences.get(key) ?? 0;
    if (want === 'none') assert.equal(got, null, `fence ${got}`);
    else if (want === 'same') assert.equal(got, last, `fence ${got}, the last one ${last}`);
    else if (want === 'greater') {
      assert.ok(typeof got === 'number' && got > last, `fence ${got}, the last one ${last}`);
      this.fences.set(key, got);
    }
  }

  async hold(start, key, rest, want) {
    const opts = { ifAvailable: true };
    let given = null;
    for (const w of rest) {
      const [k, v] = [w.slice(0, w.indexOf('=')), w.slice(w.indexOf('=') + 1)];
      if (k === 'ttl' || k === 'heartbeat') opts[k] = num(v);
      else if (k === 'stop') opts.stopKey = v;
      else if (k === 'signal') {
        given = this.signals.get(v);
        assert.ok(given, `no signal ${v}`);
        opts.signal = given.controller.signal;
      } else assert.fail(`unknown hold option ${k}`);
    }
    const lease = await start(key, opts);
    if (want === 'none') assert.equal(lease, null, 'got a hold, wanted none');
    else if (want !== undefined) {
      assert.ok(lease, 'refused, wanted a hold');
      this.holds.set(want, lease);
      if (given) given.givenTo = lease;
    }
  }

  async step(w) {
    let args = w;
    let want;
    const arrow = w.indexOf('->');
    if (arrow >= 0) {
      args = w.slice(0, arrow);
      want = w.slice(arrow + 1);
    }
    const [op, ...a] = args;
    const wv = want ? want[0] : undefined;
    if (op === 'error') {
      assert.equal(wv, 'InvalidArgument');
      await assert.rejects(
        async () => this.step(a),
        (e) => {
          assert.ok(e instanceof LocksError, `not a LocksError: ${e}`);
          assert.equal(e.code, 'MISTRI_INVALID_ARGUMENT');
          assert.ok(e.message.includes(want[1]), e.message);
          return true;
        },
      );
      return;
    }
    let got;
    switch (op) {
      case 'acquire':
      case 'renew':
        got = await (await this.owner(a[0]))[op](a[1], num(a[2]));
        break;
      case 'release':
      case 'held':
      case 'flag':
        got = await (await this.owner(a[0]))[op](a[1]);
        break;
      case 'break_lease':
        got = await (await this.owner(a[0])).breakLease(a[1]);
        break;
      case 'set_flag':
        assert.equal(await (await this.owner(a[0])).setFlag(a[1], a.length > 2 ? { ttl: num(a[2]) } : {}), undefined);
        break;
      case 'clear_flag':
        assert.equal(await (await this.owner(a[0])).clearFlag(a[1]), undefined);
        break;
      case 'fence':
        return this.fence(a[1], (await this.owner(a[0])).fence(a[1]), wv);
      case 'hold': {
        const o = await this.owner(a[0]);
        return this.hold((k, opts) => o.hold(k, opts), a[1], a.slice(2), wv);
      }
      case 'hold_configured':
        return this.hold(holdConfigured, a[0], a.slice(1), wv);
      case 'configure':
        configure(a[0] === 'none' ? null : await this.owner(a[0]));
        return;
      case 'hold.release': {
        const outcome = await this.holds.get(a[0]).releaseOutcome();
        if (wv !== undefined) assert.equal(outcome, wv);
        return;
      }
      case 'hold.lost':
        got = this.holds.get(a[0]).lost;
        break;
      case 'hold.fence': {
        const h = this.holds.get(a[0]);
        return this.fence(h.key, h.fence, wv);
      }
      case 'hold.key':
        assert.equal(this.holds.get(a[0]).key, wv);
        return;
      case 'signal':
        this.signals.set(a[0], { controller: new AbortController(), givenTo: null });
        return;
      case 'abort': {
        const s = this.signals.get(a[0]);
        assert.ok(s, `abort: ${a[0]} is not a caller's signal`);
        s.controller.abort(a[1]);
        return;
      }
      case 'aborted':
        got = this.signal(a[0]).aborted;
        break;
      case 'wait':
        got = await waitFor(this.signal(a[0]), num(a[1]));
        break;
      case 'reason': {
        const r = this.signal(a[0]).reason;
        const text = typeof r === 'string' ? r : r?.message;
        assert.ok(typeof text === 'string' && text.includes(a[2]), `reason ${text}`);
        return;
      }
      case 'same_signal': {
        const s = this.signals.get(a[1]);
        got = Boolean(s && s.givenTo === this.holds.get(a[0]));
        break;
      }
      case 'sleep':
        await sleep(num(a[0]) * 1000);
        return;
      case 'mark':
        this.mark = performance.now();
        return;
      case 'elapsed': {
        const took = (performance.now() - this.mark) / 1000;
        assert.ok(took <= num(a[1]), `${took.toFixed(3)} s`);
        return;
      }
      default:
        assert.fail(`unknown step ${op}`);
    }
    if (wv === 'true' || wv === 'false') assert.equal(got, wv === 'true', `got ${got}`);
  }
}

/** Whether `signal` aborts within `seconds`. */
function waitFor(signal, seconds) {
  if (signal.aborted) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(signal.aborted);
    }, seconds * 1000);
    function onAbort() {
      clearTimeout(timer);
      resolve(true);
    }
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

async function runCase(backend, name) {
  const run = new Run(backend);
  try {
    for (const [line, w] of CASES.get(name)) {
      try {
        await run.step(w);
      } catch (e) {
        e.message = `cases.txt:${line}: ${w.join(' ')}: ${e.message}`;
        throw e;
      }
    }
  } finally {
    for (const h of run.holds.values()) await h.releaseOutcome().catch(() => {});
    configure(null);
  }
}

const servers = {};
const BACKENDS = {
  memory: () => {
    let first;
    return {
      first: async () => (first ??= await open('memory://')),
      owner: async () => first.newOwner(),
    };
  },
  local: () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'mistri-node-local-'));
    const file = path.join(dir, 'locks.db');
    let first;
    return {
      first: async () => (first ??= await open(file)),
      owner: async () => open(file),
      cleanup: () => rmSync(dir, { recursive: true, force: true }),
    };
  },
  redis: () => {
    const namespace = `mistri:test:${uniqueNamespace()}`;
    let first;
    return {
      first: async () => (first ??= await open(servers.redis.url, { namespace })),
      owner: async () => open(servers.redis.url, { namespace }),
    };
  },
  postgres: () => {
    const namespace = `mistri:test:${uniqueNamespace()}`;
    let first;
    return {
      first: async () => (first ??= await open(servers.postgres.url, { namespace })),
      owner: async () => open(servers.postgres.url, { namespace }),
    };
  },
  mysql: () => {
    const namespace = `mistri:test:${uniqueNamespace()}`;
    let first;
    return {
      first: async () => (first ??= await open(servers.mysql.url, { namespace })),
      owner: async () => open(servers.mysql.url, { namespace }),
    };
  },
};

before(async () => {
  servers.redis = await startRedis();
  servers.postgres = startPostgres();
  servers.mysql = startMariadb();
});
after(() => {
  servers.redis?.stop();
  servers.postgres?.stop();
  servers.mysql?.stop();
});

for (const [family, make] of Object.entries(BACKENDS)) {
  describe(`contract on ${family}`, () => {
    for (const name of CASES.keys()) {
      test(name, async () => {
        const backend = make();
        try {
          const a = await backend.first();
          assert.equal(a.family, family);
          await runCase(backend, name);
        } finally {
          backend.cleanup?.();
        }
      });
    }
  });
}

test('the data has every case once, and the word splitter reads quotes and comments', () => {
  const names = readFileSync(CASES_FILE, 'utf8')
    .split('\n')
    .map(words)
    .filter((w) => w[0] === 'case')
    .map((w) => w[1]);
  assert.equal(new Set(names).size, names.length);
  assert.equal(names.length, CASES.size);
  assert.ok(CASES.size >= 20);
  assert.deepEqual(words('error hold A k stop="" -> InvalidArgument "a b" # c'), [
    'error', 'hold', 'A', 'k', 'stop=', '->', 'InvalidArgument', 'a b',
  ]);
});
