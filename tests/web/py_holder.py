"""The browser test's Python holder (tests/web/browser.mjs): holds KEY with
STOP_KEY through the built extension, until its hold trips, then releases.
Exit 76 when stopped by its flag (as `mistri-locks run` does), 77 when the
lease was lost, 1 when refused or on a deadline of 60 s.

Usage: python py_holder.py URL NAMESPACE KEY STOP_KEY LABEL HEARTBEAT
"""

import sys

import mistri_locks


def main() -> int:
    url, namespace, key, stop_key, label, heartbeat = sys.argv[1:7]
    locks = mistri_locks.open(url, namespace=namespace, label=label)
    hold = locks.hold(key, ttl=10, heartbeat=float(heartbeat), stop_key=stop_key)
    if hold is None:
        print(f"{key}: held elsewhere", flush=True)
        return 1
    print(f"holding {key} (fence {hold.fence})", flush=True)
    tripped = hold.signal.wait(60)
    lost = hold.lost
    reason = hold.signal.reason
    hold.release()
    print(f"tripped={tripped} lost={lost} reason={reason!r}", flush=True)
    if not tripped:
        return 1
    return 77 if lost else 76


if __name__ == "__main__":
    sys.exit(main())
