"""Demo worker, Python side: holds the lease KEY while it works, watching the
stop flag STOP; prints HELD <fence>, then STOPPED <monotonic time> <reason>
when the flag trips its signal, then RELEASED <monotonic time>.

Usage: worker.py URL KEY STOP   (URL: redis://… or a Local database path)
"""
import sys
import time

import mistri_locks

url, key, stop = sys.argv[1:4]
locks = (mistri_locks.Redis(url=url, namespace="mistri:demo")
         if url.startswith(("redis://", "rediss://")) else mistri_locks.Local(url))
hold = locks.hold(key, ttl=10, heartbeat=0.1, stop_key=stop)
if hold is None:
    print("REFUSED", flush=True)
    sys.exit(3)
print("HELD", hold.fence, flush=True)
units = 0
while not hold.signal.wait(0.5):   # one "unit of work" per half second
    units += 1
tripped = time.monotonic()
print(f"STOPPED {tripped:.6f} after {units} units: {hold.signal.reason}", flush=True)
hold.release()
print(f"RELEASED {time.monotonic():.6f}", flush=True)
