"""Measures what the history checker's settle margin must cover
(tests/support/src/history.rs, "How a fault's end is judged"): how long
after SIGCONT a thawed PostgreSQL answers a statement sent while it was
frozen (postmaster and every backend SIGSTOPped, as the soak's fault does).

    bindings/python/.venv/bin/python tests/support/settle_margin.py [ROUNDS]

Prints min / p50 / max in ms and the load average. The proxy's share needs
no measuring: its pumps poll a blackholed socket every 5 ms (POLL in
tests/support/src/proxy.rs). Needs psycopg (bindings/python/test.sh
installs it into that virtualenv).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import throwaway_postgres  # noqa: E402


def server_pids(data_dir: str) -> list[int]:
    """The postmaster of `data_dir` and its children (the backends)."""
    postmaster = int(open(os.path.join(data_dir, "postmaster.pid")).readline())
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                kids.append(int(entry))
    return [postmaster, *kids]


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    server = throwaway_postgres.start()
    try:
        conns = [psycopg.connect(server.url, autocommit=True) for _ in range(4)]
        for c in conns:
            c.execute("select 1")
        delays = []
        for n in range(rounds):
            pids = server_pids(server.data)
            for p in pids:
                os.kill(p, signal.SIGSTOP)
            answered: dict[str, float] = {}
            con = conns[n % len(conns)]

            def ask() -> None:
                con.execute("select 1").fetchone()
                answered["at"] = time.monotonic()

            asker = threading.Thread(target=ask)
            asker.start()
            time.sleep(0.3)  # the statement is sent and buffered meanwhile
            for p in pids:
                os.kill(p, signal.SIGCONT)
            thawed = time.monotonic()
            asker.join(10)
            if "at" not in answered:
                print("no answer 10 s after the thaw", file=sys.stderr)
                return 1
            delays.append((answered["at"] - thawed) * 1000)
        delays.sort()
        print(
            f"thawed PostgreSQL answered a statement sent during the freeze "
            f"{delays[0]:.1f} / {delays[len(delays) // 2]:.1f} / {delays[-1]:.1f} ms "
            f"(min / p50 / max of {rounds}) after SIGCONT; load average {os.getloadavg()[0]:.1f}"
        )
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
