"""Counters (Locks.stats) and hold events (Locks.on_event): they move when
they should, callbacks run on a Python thread (never the heartbeat's), a
removed hook hears nothing more, bad input is a clear error."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pytest

import mistri_locks

FAST = {"ttl": 0.3, "heartbeat": 0.02}


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.threads: set[str] = set()
        self.cond = threading.Condition()

    def __call__(self, event: dict[str, Any]) -> None:
        with self.cond:
            self.events.append(event)
            self.threads.add(threading.current_thread().name)
            self.cond.notify_all()

    def wait(self, kind: str, timeout: float = 5.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for e in self.events:
                    if e["kind"] == kind:
                        return e
                left = deadline - time.monotonic()
                assert left > 0, f"no {kind} event in {self.events}"
                self.cond.wait(left)


def wait_until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_stats_is_a_dict_of_counters() -> None:
    locks = mistri_locks.Memory()
    s = locks.stats()
    for name in ("holds_active", "renewals_sent", "renewals_failed", "beats", "lost_not_held",
                 "lost_too_late", "lost_deadline", "stop_flags_seen", "pushes_received"):
        assert s[name] == 0, name
    assert s["beat_rtt_p50"] is None and s["beat_rtt_p99"] is None
    h = locks.hold("renewing", **FAST)
    assert h is not None
    assert locks.stats()["holds_active"] == 1
    wait_until(lambda: locks.stats()["renewals_sent"] >= 3)
    s = locks.stats()
    assert isinstance(s["beat_rtt_p50"], float)
    assert s["beat_rtt_p50"] <= s["beat_rtt_p99"] < 1.0
    h.release()
    s = locks.stats()
    assert (s["holds_active"], s["holds_acquired"], s["holds_released"]) == (0, 1, 1)


def test_events_run_on_a_python_thread_in_order() -> None:
    locks = mistri_locks.Memory()
    other = locks.new_owner()
    rec, other_rec = Recorder(), Recorder()
    locks.on_event(rec)
    other.on_event(other_rec)
    h = locks.hold("job", **FAST)
    assert h is not None
    e = rec.wait("acquired")
    assert (e["key"], e["fence"], e["reason"], e["cause"]) == ("job", h.fence, None, None)
    assert other.hold("job", **FAST) is None
    assert other_rec.wait("refused")["fence"] == 0
    assert other.stats()["holds_refused"] == 1

    assert other.break_lease("job")
    e = rec.wait("lost")
    assert e["cause"] == "not_held"
    assert e["reason"].startswith("lease lost:")
    assert locks.stats()["lost_not_held"] == 1
    assert h.lost

    s = locks.hold("worker", stop_key="stop:worker", **FAST)
    assert s is not None
    other.set_flag("stop:worker", 5)
    e = rec.wait("stopped")
    assert e["key"] == "worker" and "stop:worker" in e["reason"]
    assert locks.stats()["stop_flags_seen"] == 1
    s.release()
    rec.wait("released")
    # delivered by the dispatcher, a Python thread; never a heartbeat thread
    assert rec.threads == {"mistri-locks-dispatch"}
    kinds = [e["kind"] for e in rec.events]
    assert kinds == ["acquired", "lost", "acquired", "stopped", "released"]


def test_a_removed_hook_hears_nothing() -> None:
    locks = mistri_locks.Memory()
    rec = Recorder()
    handle = locks.on_event(rec)
    assert not locks.new_owner().remove_event_hook(handle)  # not that owner's
    h = locks.hold("k", **FAST)
    assert h is not None
    rec.wait("acquired")
    assert locks.remove_event_hook(handle)
    assert not locks.remove_event_hook(handle)
    h.release()
    h2 = locks.hold("k2", **FAST)
    assert h2 is not None
    h2.release()
    time.sleep(0.2)
    assert [e["kind"] for e in rec.events] == ["acquired"]


def test_a_raising_callback_is_reported_and_others_still_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    reported: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))
    locks = mistri_locks.Memory()
    rec = Recorder()

    def boom(event: dict[str, Any]) -> None:
        raise RuntimeError("hook raised")

    locks.on_event(boom)
    locks.on_event(rec)
    h = locks.hold("k", **FAST)
    assert h is not None
    h.release()
    rec.wait("released")
    wait_until(lambda: len(reported) >= 2)
    assert all(isinstance(e, RuntimeError) for e in reported)


def test_bad_input_is_a_clear_error() -> None:
    locks = mistri_locks.Memory()
    with pytest.raises(TypeError, match="callable"):
        locks.on_event(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        locks.remove_event_hook("nope")  # type: ignore[arg-type]
    assert not locks.remove_event_hook(12345)
