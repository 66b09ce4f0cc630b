#!/usr/bin/env python3
"""Acquire+release pairs per second on one throwaway redis-server:
mistri_locks.Redis next to redis-py's ``redis.lock.Lock`` and
python-redis-lock, plus the raw two-round-trip ceiling (SET NX PX + DEL
with redis-py, no scripts, no token checks).

A benchmark, not a test. Build mistri_locks in release mode first (see
bench.sh, which does everything):

    python bench.py --install        # pip install redis python-redis-lock
    python bench.py [--seconds 3] [--rounds 3]

Every contender does the same two round trips per pair (take the lease,
delete it if still ours), sequentially, on one connection, one thread.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Callable


def install() -> None:
    subprocess.check_call(
        [sys.executable, "-m", "pip", "install", "-q", "redis>=5", "python-redis-lock>=4"]
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis() -> tuple[subprocess.Popen[bytes], int, str]:
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="mistri-bench-")
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return proc, port, workdir
        except OSError:
            time.sleep(0.02)
    proc.kill()
    raise SystemExit("redis-server did not start")


def measure(pair: Callable[[], None], seconds: float) -> float:
    for _ in range(200):  # warm up: connections, scripts loaded
        pair()
    n = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while True:
        for _ in range(100):
            pair()
        n += 100
        now = time.perf_counter()
        if now >= end:
            return n / (now - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--install", action="store_true", help="pip install the contenders first")
    ap.add_argument("--seconds", type=float, default=3.0, help="per contender per round")
    ap.add_argument("--rounds", type=int, default=3, help="best of N rounds")
    ap.add_argument("--port", type=int, help="use the redis-server on this loopback port")
    ap.add_argument("--kv", action="store_true", help="also print key=value lines (scripts/bench)")
    args = ap.parse_args()
    if args.install:
        install()

    import mistri_locks
    import redis
    import redis_lock

    if args.port:
        proc, port, workdir = None, args.port, None
    else:
        proc, port, workdir = start_redis()
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        ns = f"bench:{uuid.uuid4().hex}"
        mistri = mistri_locks.Redis(url, namespace=ns)
        key = "job"

        def mistri_pair() -> None:
            if not mistri.acquire(key, 10):
                raise RuntimeError("mistri: not acquired")
            mistri.release(key)

        rp_lock = client.lock(f"{ns}:redis-py", timeout=10)

        def redis_py_pair() -> None:
            if not rp_lock.acquire(blocking=False):
                raise RuntimeError("redis-py: not acquired")
            rp_lock.release()

        prl = redis_lock.Lock(client, f"{ns}:prl", expire=10)

        def prl_pair() -> None:
            if not prl.acquire(blocking=False):
                raise RuntimeError("python-redis-lock: not acquired")
            prl.release()

        raw_key = f"{ns}:raw"

        def raw_pair() -> None:
            client.set(raw_key, "x", nx=True, px=10_000)
            client.delete(raw_key)

        contenders = [
            ("raw SET NX PX + DEL (ceiling)", raw_pair),
            ("mistri_locks.Redis", mistri_pair),
            ("redis-py redis.lock.Lock", redis_py_pair),
            ("python-redis-lock", prl_pair),
        ]
        best = {name: 0.0 for name, _ in contenders}
        for _ in range(args.rounds):
            for name, pair in contenders:  # interleaved: load drifts hit all alike
                best[name] = max(best[name], measure(pair, args.seconds))

        print(f"redis-server {port}, best of {args.rounds} x {args.seconds:g} s, "
              f"Python {sys.version.split()[0]}, mistri_locks {mistri_locks.__name__}")
        mistri_rate = best["mistri_locks.Redis"]
        for name, _ in contenders:
            rate = best[name]
            ratio = mistri_rate / rate
            print(f"  {name:32s} {rate:9.0f} pairs/s   mistri/this = {ratio:5.2f}x")
        if args.kv:
            print(f"py_mistri_pairs={mistri_rate:.0f}")
            print(f"py_redis_py_pairs={best['redis-py redis.lock.Lock']:.0f}")
            print(f"py_prl_pairs={best['python-redis-lock']:.0f}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
