#!/usr/bin/env python3
"""Acquire+release pairs per second on one throwaway redis-server:
mistri_locks.Redis next to redis-py's ``redis.lock.Lock`` and
python-redis-lock, plus the raw two-round-trip ceiling (SET NX PX + DEL
with redis-py, no scripts, no token checks).

A benchmark, not a test. Build mistri_locks in release mode first (see
bench.sh, which does everything):

    python bench.py --install        # pip install redis python-redis-lock
    python bench.py [--seconds 3] [--rounds 3]
    python bench.py --before OLD.so  # A/B: another build of the native
                                     # module, measured in the same rounds
    python bench.py --pairs 2000 --only mistri   # N pairs of one contender,
                                     # untimed (instruction counts: pair_cost.sh)

Every contender does the same two round trips per pair (take the lease,
delete it if still ours), sequentially, on one connection, one thread.
The rounds are interleaved (load drifts hit every contender alike); each
contender's figure is its best round, and the ratios are also given round
by round (median and range), so the spread is visible.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import statistics
import time
import uuid
from types import ModuleType
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
    # On the last core, as scripts/bench does (run this script itself with
    # `taskset -c 0` to keep the client off it).
    cores = os.cpu_count() or 1
    pin = ["taskset", "-c", str(cores - 1)] if cores > 1 and shutil.which("taskset") else []
    proc = subprocess.Popen(
        [*pin, "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
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


def load_build(path: str) -> ModuleType:
    """Another build of ``mistri_locks._native`` (a ``.so`` file), loaded
    next to the installed one under its own name (each copy has its own
    statics: an acquire+release pair needs nothing else from the package)."""
    name = "mistri_locks_before._native"
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


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
    ap.add_argument("--before", metavar="SO",
                    help="also measure this other build of mistri_locks/_native*.so (A/B)")
    ap.add_argument("--pairs", type=int, metavar="N",
                    help="run N pairs of --only after the warm-up, untimed, and exit")
    ap.add_argument("--only", choices=["raw", "mistri", "before", "redis-py", "prl"],
                    default="mistri", help="the contender for --pairs")
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

        if args.before:
            old = load_build(args.before).Redis(url, namespace=f"{ns}:before")

            def before_pair() -> None:
                if not old.acquire(key, 10):
                    raise RuntimeError("mistri (before): not acquired")
                old.release(key)

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

        if args.pairs is not None:
            pair = {"raw": raw_pair, "mistri": mistri_pair, "redis-py": redis_py_pair,
                    "prl": prl_pair, "before": before_pair if args.before else None}[args.only]
            if pair is None:
                raise SystemExit("--only before needs --before")
            for _ in range(200 + args.pairs):  # the warm-up of measure(), then N
                pair()
            return

        contenders = [
            ("raw SET NX PX + DEL (ceiling)", raw_pair),
            ("mistri_locks.Redis", mistri_pair),
            ("redis-py redis.lock.Lock", redis_py_pair),
            ("python-redis-lock", prl_pair),
        ]
        if args.before:
            contenders.insert(2, ("mistri_locks.Redis (before)", before_pair))
        rates: dict[str, list[float]] = {name: [] for name, _ in contenders}
        for _ in range(args.rounds):
            for name, pair in contenders:  # interleaved: load drifts hit all alike
                rates[name].append(measure(pair, args.seconds))
        best = {name: max(r) for name, r in rates.items()}

        print(f"redis-server {port}, best of {args.rounds} x {args.seconds:g} s, "
              f"Python {sys.version.split()[0]}, mistri_locks {mistri_locks.__name__}")
        mistri_rate = best["mistri_locks.Redis"]
        mine = rates["mistri_locks.Redis"]
        for name, _ in contenders:
            rate = best[name]
            ratio = mistri_rate / rate
            per_round = sorted(m / r for m, r in zip(mine, rates[name]))
            print(f"  {name:32s} {rate:9.0f} pairs/s   mistri/this = {ratio:5.2f}x "
                  f"(by round: median {statistics.median(per_round):.2f}, "
                  f"{per_round[0]:.2f}-{per_round[-1]:.2f})")
        if args.before:
            print(f"  after/before: best {mistri_rate / best['mistri_locks.Redis (before)']:.3f}")
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
