"""Heartbeat-at-scale baseline for scripts/bench: ONE redis-py process that
holds N leases and renews them all once a second in one pipeline of
compare-and-renew EVALSHAs (transaction=False). Prints key=value lines with
the same names as core/examples/heartbeat_scale.rs.

    python pipelined_renewer.py PORT N SECONDS TAG
"""
import os
import sys
import time

import redis

RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


def cpu():
    t = os.times()
    return t.user + t.system


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def renewals(r):
    stats = r.info("commandstats")
    return sum(stats.get(c, {}).get("calls", 0) for c in ("cmdstat_evalsha", "cmdstat_eval"))


def main():
    port, n, seconds, tag = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    ttl_ms = 10_000
    r = redis.Redis(port=port)
    sha = r.script_load(RENEW)
    ns = f"renewer:{os.getpid()}"
    keys = [f"{ns}:lease:{{hold-{i}}}" for i in range(n)]
    token = os.urandom(16).hex()
    t0 = time.monotonic()
    pipe = r.pipeline(transaction=False)
    for k in keys:
        pipe.set(k, token, nx=True, px=ttl_ms)
    assert all(pipe.execute())
    taken = time.monotonic() - t0

    def beat():
        p = r.pipeline(transaction=False)
        for k in keys:
            p.evalsha(sha, 1, k, token, ttl_ms)
        return sum(1 for x in p.execute() if x == 1)

    next_at = time.monotonic()
    beats = 0
    ok = n

    def run_until(end):
        nonlocal next_at, beats, ok
        while time.monotonic() < end:
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at += 1.0
            ok = min(ok, beat())
            beats += 1

    run_until(time.monotonic() + 2)
    cpu0, ren0, b0, w0 = cpu(), renewals(r), beats, time.monotonic()
    run_until(w0 + seconds)
    window = time.monotonic() - w0
    cpu1, ren1 = cpu(), renewals(r)
    print(f"{tag}_holds={n}")
    print(f"{tag}_taken_s={taken:.2f}")
    print(f"{tag}_window_s={window:.1f}")
    print(f"{tag}_threads={len(os.listdir('/proc/self/task'))}")
    print(f"{tag}_beat_threads=1")
    print(f"{tag}_round_trips_per_s={(beats - b0) / window:.2f}")
    print(f"{tag}_renewals_per_s={(ren1 - ren0) / window:.0f}")
    print(f"{tag}_cpu_s_per_min={(cpu1 - cpu0) / window * 60:.3f}")
    print(f"{tag}_rss_mb={rss_mb():.1f}")
    print(f"{tag}_kept={ok}")
    for i in range(0, n, 10_000):
        r.delete(*keys[i:i + 10_000])


if __name__ == "__main__":
    main()
