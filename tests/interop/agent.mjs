// Interop agent, Node side (the package in bindings/node). Usage:
//   node agent.mjs hold  URL NS KEY   hold KEY with stop flag stop:KEY until stopped
//   node agent.mjs stop  URL NS KEY   check KEY is held, raise stop:KEY
//   node agent.mjs check URL NS KEY   print whether KEY is held; lower stop:KEY
//   node agent.mjs info  URL NS KEY   print "INFO <fence> <holder label>" (or "INFO none")
// The hold waits on lease.signal, the platform's AbortSignal: the stop of
// any language aborts it.
import { open } from '../../bindings/node/lib/index.mjs';

const [cmd, url, ns, key] = process.argv.slice(2);
const locks = await open(url, { namespace: ns });
const stop = `stop:${key}`;
const say = (line) => process.stdout.write(`${line}\n`);

if (cmd === 'hold') {
  const lease = await locks.hold(key, { ttl: 5, heartbeat: 0.2, stopKey: stop, ifAvailable: true });
  if (lease === null) {
    say('REFUSED');
    process.exit(3);
  }
  say(`HELD ${lease.fence}`);
  const tripped = await new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), 10_000);
    lease.signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve(true);
    }, { once: true });
  });
  const reason = lease.signal.reason;
  say(`${tripped ? 'STOPPED' : 'TIMEOUT'} ${reason?.detail ?? reason?.message ?? reason}`);
  await lease.release();
  say('RELEASED');
  process.exit(tripped ? 0 : 4);
} else if (cmd === 'stop') {
  const held = await locks.held(key);
  say(`HELD? ${held}`);
  await locks.setFlag(stop, { ttl: 30 });
  process.exit(held ? 0 : 5);
} else if (cmd === 'check') {
  say(`held=${await locks.held(key)}`);
  await locks.clearFlag(stop);
  process.exit(0);
} else if (cmd === 'info') {
  const info = await locks.info(key);
  say(info === null ? 'INFO none' : `INFO ${info.fence} ${info.holder}`);
  process.exit(0);
}
process.exit(2);
