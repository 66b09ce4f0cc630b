#!/usr/bin/env python3
"""Benchmark: what a lease costs a short Celery task.

One real Celery worker (``--pool=prefork --concurrency=1``) against one
redis-server (broker, results, leases, celery-once's locks), three
variants of the same short task, measured interleaved in the same run:

- ``plain``: ``@app.task``, no lock (the baseline);
- ``leased``: ``base=mistri_locks.integrations.celery.LeasedTask`` (acquire, renew on
  the heartbeat, watch the stop flag, release);
- ``once``: celery-once's ``base=QueueOnce`` (a Redis lock taken at
  ``apply_async`` and deleted when the task returns).

Throughput: batches of N tasks sent at once, tasks/s from the first send to
the last result, median of the rounds. Latency: one task at a time, send to
result, p50 and p99, and what each adds to ``plain``'s.

    python bench_celery.py --port PORT [--tasks 200] [--rounds 5] [--latency 200] [--kv]

Without ``--port`` it starts its own redis-server. ``scripts/bench`` runs it
(``BENCH_SMOKE=1``: tiny counts). The file is also the worker's app
module (``celery -A bench_celery``): with ``BENCH_CELERY_BROKER`` set,
importing it defines the app.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))

if os.environ.get("BENCH_CELERY_BROKER"):
    # The worker's side (and the sender's: the same app, by task name).
    from celery import Celery
    from celery_once import QueueOnce

    import mistri_locks
    from mistri_locks.integrations.celery import LeasedTask

    broker = os.environ["BENCH_CELERY_BROKER"]
    app = Celery("bench_celery", broker=broker, backend=broker)
    app.conf.update(
        worker_prefetch_multiplier=4,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        ONCE={"backend": "celery_once.backends.Redis",
              "settings": {"url": os.environ["BENCH_CELERY_LOCKS"], "default_timeout": 60}},
    )
    mistri_locks.configure(mistri_locks.Redis(os.environ["BENCH_CELERY_LOCKS"],
                                              namespace=os.environ["BENCH_CELERY_NS"]))

    @app.task(name="bench.plain")
    def plain(n: int) -> int:
        return n

    @app.task(name="bench.leased", base=LeasedTask, lease={"key": "bench:{n}", "ttl": 60, "heartbeat": 10})
    def leased(n: int) -> int:
        return n

    @app.task(name="bench.once", base=QueueOnce, once={"graceful": True})
    def once(n: int) -> int:
        return n


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, help="a running redis-server (default: start one)")
    ap.add_argument("--tasks", type=int, default=200, help="tasks per throughput batch")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved throughput rounds")
    ap.add_argument("--latency", type=int, default=200, help="one-at-a-time tasks per variant")
    ap.add_argument("--kv", action="store_true", help="print key=value lines (for scripts/bench)")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="mistri-bench-celery-")
    server = None
    worker = None
    try:
        port = args.port
        if port is None:
            port = free_port()
            server = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        sys.exit("redis-server did not start")
                    time.sleep(0.05)
        ns = f"mistri:bench:{uuid.uuid4().hex[:8]}"
        env = dict(os.environ,
                   BENCH_CELERY_BROKER=f"redis://127.0.0.1:{port}/7",
                   BENCH_CELERY_LOCKS=f"redis://127.0.0.1:{port}/8",
                   BENCH_CELERY_NS=ns,
                   PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
        os.environ.update({k: env[k] for k in ("BENCH_CELERY_BROKER", "BENCH_CELERY_LOCKS", "BENCH_CELERY_NS")})
        log_path = os.path.join(work, "worker.log")
        log = open(log_path, "w")
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "bench_celery", "worker", "--pool=prefork",
             "--concurrency=1", "--loglevel=WARNING", "--without-gossip", "--without-mingle",
             "--without-heartbeat", "-n", f"bench-{uuid.uuid4().hex[:6]}@localhost"],
            cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        sys.path.insert(0, HERE)
        import bench_celery as me  # this file as the app module, with the env set

        variants: dict[str, Any] = {"plain": me.plain, "leased": me.leased, "once": me.once}
        counter = iter(range(10**9))

        def run_batch(task: Any, n: int) -> float:
            start = time.perf_counter()
            results = [task.apply_async((next(counter),)) for _ in range(n)]
            for r in results:
                r.get(timeout=120)
            return n / (time.perf_counter() - start)

        # Warm up: the worker is ready when a task comes back; every variant
        # once, so connections and scripts are loaded before timing.
        deadline = time.monotonic() + 120
        while True:
            try:
                me.plain.apply_async((0,)).get(timeout=5)
                break
            except Exception:
                if worker.poll() is not None or time.monotonic() > deadline:
                    sys.exit("celery worker did not start:\n" + open(log_path).read())
        for task in variants.values():
            run_batch(task, 3)

        rates: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.rounds):
            for name, task in variants.items():  # interleaved: drift hits all alike
                rates[name].append(run_batch(task, args.tasks))

        latency: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.latency):
            for name, task in variants.items():
                t = time.perf_counter()
                task.apply_async((next(counter),)).get(timeout=60)
                latency[name].append((time.perf_counter() - t) * 1e3)

        figures: dict[str, float] = {}
        for name in variants:
            figures[f"celery_{name}_tps"] = statistics.median(rates[name])
            figures[f"celery_{name}_p50_ms"] = pct(latency[name], 50)
            figures[f"celery_{name}_p99_ms"] = pct(latency[name], 99)
        figures["celery_tasks"] = args.tasks
        figures["celery_rounds"] = args.rounds
        figures["celery_latency_n"] = args.latency
        if args.kv:
            for k, v in figures.items():
                print(f"{k}={v:.4f}")
        else:
            base = figures["celery_plain_p50_ms"], figures["celery_plain_p99_ms"]
            print(f"one prefork worker (concurrency 1), redis on 127.0.0.1:{port}; "
                  f"{args.rounds} rounds of {args.tasks} tasks, {args.latency} one-at-a-time")
            print(f"{'variant':<8} {'tasks/s':>9} {'vs plain':>8} {'p50 ms':>8} {'p99 ms':>8} "
                  f"{'+p50 ms':>8} {'+p99 ms':>8}")
            for name in variants:
                tps = figures[f"celery_{name}_tps"]
                p50, p99 = figures[f"celery_{name}_p50_ms"], figures[f"celery_{name}_p99_ms"]
                print(f"{name:<8} {tps:9.1f} {tps / figures['celery_plain_tps']:8.2f} {p50:8.2f} "
                      f"{p99:8.2f} {p50 - base[0]:8.2f} {p99 - base[1]:8.2f}")
    finally:
        if worker is not None:
            try:
                os.killpg(worker.pid, signal.SIGTERM)
                worker.wait(timeout=15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            try:
                os.killpg(worker.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            worker.wait()
        if server is not None:
            server.terminate()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
