"""Forking in a tight loop while a busy heartbeat runs: no child may hang on
a lock that another thread of the parent held at the moment of the fork
(the engine's state, the connection pools, the Memory store, SQLite's own
lock bookkeeping, the abort-delivery queue)."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from typing import List

import pytest

import mistri_locks


def fork_loop(adapter: mistri_locks.Locks, holds: int, heartbeat: float) -> None:
    delivered: List[object] = []
    kept = []
    for i in range(holds):
        sig = mistri_locks.AbortSignal()
        sig.on_abort(delivered.append)
        kept.append(
            adapter.hold(
                f"busy-{i}",
                ttl=1,
                heartbeat=heartbeat,
                stop_key=f"stop-{i}" if i % 10 == 0 else None,
                signal=sig,
            )
        )
    ok = hung = failed = 0
    for j in range(100):
        if j % 10 == 0:
            # Keep the delivery path busy too: some holds get stopped.
            adapter.set_flag(f"stop-{(j // 10) * 10}", ttl=5)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            signal.alarm(5)
            try:
                got = adapter.hold(f"child-{j}", ttl=1, heartbeat=0.1)
                os._exit(0 if got is not None else 1)
            except BaseException:
                os._exit(2)
        deadline = time.monotonic() + 3
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
                    ok += 1
                else:
                    failed += 1
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                hung += 1
                break
            time.sleep(0.001)
    assert (hung, failed) == (0, 0), f"{ok} ok, {hung} hung, {failed} failed"
    assert not any(h is not None and h.lost for h in kept)


def test_fork_loop_memory() -> None:
    fork_loop(mistri_locks.Memory(), holds=2000, heartbeat=0.001)


def test_fork_loop_local() -> None:
    path = os.path.join(tempfile.mkdtemp(prefix="mistri-py-fork-"), "locks.db")
    fork_loop(mistri_locks.Local(path=path), holds=200, heartbeat=0.01)


@pytest.fixture(autouse=True)
def _no_configured_adapter() -> None:
    mistri_locks.configure(None)
