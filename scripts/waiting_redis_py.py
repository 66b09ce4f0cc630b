"""The baseline of core/examples/bench_waiting.rs: redis-py's
Lock(blocking=True), which retries SET NX PX every `sleep` (0.1 s) per
waiter, in the same two phases (idle waiting, hand-offs). Prints key=value
lines prefixed pywait_. Needs redis-py."""

import argparse
import threading
import time

import redis
from redis.lock import Lock


def commands(r):
    """Calls of every command but INFO (inside scripts included), and of
    SET (redis-py's acquire tries: its release script does no SET)."""
    stats = r.info("commandstats")
    total = sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")
    return total, stats.get("cmdstat_set", {}).get("calls", 0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--waiters", type=int, default=100)
    p.add_argument("--handoffs", type=int, default=1000)
    p.add_argument("--idle-seconds", type=float, default=3.0)
    p.add_argument("--hold-ms", type=float, default=1.0)
    a = p.parse_args()
    r = redis.Redis(port=a.port)
    key = f"bench-pywait-{time.monotonic_ns()}"
    r.set(key, "someone else", px=30000)
    lock = threading.Lock()
    state = {"handed": 0, "released_at": 0, "go": False}
    latencies = []

    def waiter():
        while True:
            with lock:
                if state["handed"] >= a.handoffs:
                    return
            lk = Lock(r, key, timeout=30, sleep=0.1)
            if not lk.acquire(blocking=True, blocking_timeout=60):
                continue
            got = time.monotonic_ns()
            with lock:
                state["handed"] += 1
                n = state["handed"]
                frm = state["released_at"]
            if n > a.handoffs:
                lk.release()
                return
            latencies.append((got - frm) / 1e6)
            time.sleep(a.hold_ms / 1000)
            with lock:
                state["released_at"] = time.monotonic_ns()
            lk.release()

    threads = [threading.Thread(target=waiter) for _ in range(a.waiters)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    before, _ = commands(r)
    t0 = time.monotonic()
    time.sleep(a.idle_seconds)
    idle_rate = (commands(r)[0] - before) / (time.monotonic() - t0)

    before, sets_before = commands(r)
    t0 = time.monotonic()
    with lock:
        state["released_at"] = time.monotonic_ns()
    r.delete(key)
    while True:
        with lock:
            if state["handed"] >= a.handoffs:
                break
        time.sleep(0.001)
    took = time.monotonic() - t0
    after, sets_after = commands(r)
    rate = (after - before) / took
    for t in threads:
        t.join()
    lat = sorted(latencies)

    def pct(q):
        return lat[min(len(lat) - 1, round((len(lat) - 1) * q))] if lat else float("nan")

    print(f"pywait_handoffs={len(lat)}")
    print(f"pywait_idle_cmds_per_s={idle_rate:.1f}")
    print(f"pywait_handoff_cmds_per_s={rate:.1f}")
    print(f"pywait_cmds_per_handoff={rate * took / max(1, len(lat)):.2f}")
    print(f"pywait_tries_per_handoff={(sets_after - sets_before) / a.handoffs:.2f}")
    print(f"pywait_p50_ms={pct(0.5):.3f}")
    print(f"pywait_p99_ms={pct(0.99):.3f}")
    print(f"pywait_handoffs_per_s={len(lat) / took:.1f}")


if __name__ == "__main__":
    main()
