"""Interop agent, Python side. Usage:
  agent.py hold  URL NS KEY   hold KEY with stop flag stop:KEY until stopped
  agent.py stop  URL NS KEY   check KEY is held, raise stop:KEY
  agent.py check URL NS KEY   print whether KEY is held; lower stop:KEY
  agent.py info  URL NS KEY   print "INFO <fence> <holder label>" (or "INFO none")
"""
import sys

import mistri_locks

cmd, url, ns, key = sys.argv[1:5]
if url.startswith(("postgres://", "postgresql://")):
    locks = mistri_locks.Postgres(url, namespace=ns)
elif url.startswith(("mysql://", "mariadb://")):
    locks = mistri_locks.open(url, namespace=ns)
else:
    locks = mistri_locks.Redis(url=url, namespace=ns)
stop = "stop:" + key
if cmd == "hold":
    hold = locks.hold(key, ttl=5, heartbeat=0.2, stop_key=stop)
    if hold is None:
        print("REFUSED", flush=True)
        sys.exit(3)
    print("HELD", hold.fence, flush=True)
    tripped = hold.signal.wait(10)
    print("STOPPED" if tripped else "TIMEOUT", hold.signal.reason, flush=True)
    hold.release()
    print("RELEASED", flush=True)
    sys.exit(0 if tripped else 4)
elif cmd == "stop":
    held = locks.held(key)
    print("HELD?", held, flush=True)
    locks.set_flag(stop, ttl=30)
    sys.exit(0 if held else 5)
elif cmd == "check":
    held = locks.held(key)
    print("held=" + str(held).lower(), flush=True)
    locks.clear_flag(stop)
    sys.exit(0)
elif cmd == "info":
    info = locks.info(key)
    print("INFO none" if info is None else f"INFO {info['fence']} {info['holder']}", flush=True)
    sys.exit(0)
sys.exit(2)
