"""AbortSignal, callbacks, duck-typed signals, and which thread runs them."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Optional

import pytest

import mistri_locks


def test_abort_is_one_way_and_first_reason_wins() -> None:
    s = mistri_locks.AbortSignal()
    assert not s.aborted and s.reason is None
    assert s.abort("first") is True
    assert s.abort("second") is False
    assert s.aborted and s.reason == "first"
    assert "first" in repr(s)
    plain = mistri_locks.AbortSignal()
    plain.abort()
    assert plain.aborted and plain.reason is None


def test_callbacks_run_on_the_aborting_python_thread_before_abort_returns() -> None:
    s = mistri_locks.AbortSignal()
    seen: list[tuple[Optional[str], threading.Thread]] = []
    s.on_abort(lambda r: seen.append((r, threading.current_thread())))
    s.abort("why")
    assert seen == [("why", threading.current_thread())]
    s.abort("again")
    assert len(seen) == 1, "exactly once"
    # registered after the abort: runs at once, with the reason
    late: list[Optional[str]] = []
    handle = s.on_abort(late.append)
    assert late == ["why"]
    assert isinstance(handle, int)


def test_removed_callbacks_do_not_run() -> None:
    s = mistri_locks.AbortSignal()
    ran: list[Optional[str]] = []
    h1 = s.on_abort(ran.append)
    h2 = s.on_abort(lambda r: ran.append(f"second {r}"))
    assert h1 != h2
    assert s.remove_callback(h1) is True
    assert s.remove_callback(h1) is False
    assert s.remove_callback(12345) is False
    s.abort("x")
    assert ran == ["second x"]


def test_a_failing_callback_is_reported_and_the_rest_still_run(monkeypatch) -> None:
    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    s = mistri_locks.AbortSignal()
    ran: list[Optional[str]] = []

    def bad(reason: Optional[str]) -> None:
        raise RuntimeError("bad callback")

    s.on_abort(bad)
    s.on_abort(ran.append)
    s.abort("r")
    assert ran == ["r"]
    assert len(reported) == 1
    assert isinstance(reported[0].exc_value, RuntimeError)


def test_a_callback_may_reenter_signals() -> None:
    s = mistri_locks.AbortSignal()
    other = mistri_locks.AbortSignal()
    seen: list[object] = []
    s.on_abort(lambda r: seen.append((s.aborted, s.reason, other.abort(f"via {r}"))))
    other.on_abort(seen.append)
    s.abort("r")
    assert seen == ["via r", (True, "r", True)]


def test_derive_hears_the_parent_never_the_reverse() -> None:
    parent = mistri_locks.AbortSignal()
    child = parent.derive()
    grandchild = child.derive()
    sibling = parent.derive()
    heard: list[Optional[str]] = []
    grandchild.on_abort(heard.append)
    sibling.abort("sibling")
    assert not parent.aborted and not child.aborted
    parent.abort("parent")
    assert child.reason == "parent" and grandchild.reason == "parent"
    assert sibling.reason == "sibling"
    assert heard == ["parent"], "derived callbacks run on the aborting thread too"
    late = parent.derive()
    assert late.aborted and late.reason == "parent"


def test_wait_times_out_then_sees_an_abort_from_another_thread() -> None:
    s = mistri_locks.AbortSignal()
    t0 = time.monotonic()
    assert s.wait(0.03) is False
    assert time.monotonic() - t0 >= 0.03
    assert s.wait(0) is False
    threading.Timer(0.05, s.abort).start()
    assert s.wait(10) is True
    assert s.wait() is True
    assert s.wait(0) is True


def test_wait_releases_the_gil() -> None:
    # A waiting thread must not stop this one from running Python code.
    s = mistri_locks.AbortSignal()
    waiter = threading.Thread(target=s.wait, args=(5,))
    waiter.start()
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < 0.3:
        n += 1
    s.abort()
    waiter.join(2)
    assert not waiter.is_alive()
    assert n > 1000


def test_bad_arguments() -> None:
    s = mistri_locks.AbortSignal()
    with pytest.raises(TypeError, match="callable"):
        s.on_abort(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        s.wait(-1)
    with pytest.raises(ValueError, match="timeout"):
        s.wait(float("nan"))
    with pytest.raises(TypeError):
        s.wait(True)
    with pytest.raises(TypeError):
        s.wait("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        s.abort(42)  # type: ignore[arg-type]


def assert_python_thread(thread: threading.Thread) -> None:
    assert isinstance(thread, threading.Thread)
    assert not isinstance(thread, threading._DummyThread), "called from a foreign thread"
    assert thread is not threading.main_thread()
    assert thread.name == "mistri-locks-dispatch"


def test_heartbeat_trips_deliver_callbacks_on_a_python_thread(backend) -> None:
    a, b = backend.adapter(), backend.owner()
    s = mistri_locks.AbortSignal()
    got = threading.Event()
    seen: list[tuple[Optional[str], threading.Thread]] = []

    def callback(reason: Optional[str]) -> None:
        seen.append((reason, threading.current_thread()))
        got.set()

    s.on_abort(callback)
    hold = a.hold("cb", ttl=2, heartbeat=0.05, stop_key="stop:cb", signal=s)
    assert hold is not None
    b.set_flag("stop:cb", 30)
    assert got.wait(2), "callback never ran"
    assert len(seen) == 1
    reason, thread = seen[0]
    assert reason is not None and "stop:cb" in reason
    assert_python_thread(thread)
    hold.release()


class DuckSignal:
    """Any object with abort(reason), like a framework's own signal."""

    def __init__(self) -> None:
        self.calls: list[tuple[Optional[str], threading.Thread]] = []
        self.called = threading.Event()

    def abort(self, reason: Optional[str] = None) -> None:
        self.calls.append((reason, threading.current_thread()))
        self.called.set()


def test_duck_typed_signal_receives_abort_on_a_python_thread(backend) -> None:
    a, b = backend.adapter(), backend.owner()
    duck = DuckSignal()
    hold = a.hold("duck", ttl=2, heartbeat=0.05, stop_key="stop:duck", signal=duck)
    assert hold is not None
    assert hold.signal is duck
    time.sleep(0.1)
    assert duck.calls == []
    b.set_flag("stop:duck", 30)
    assert duck.called.wait(2), "abort never called"
    assert len(duck.calls) == 1
    reason, thread = duck.calls[0]
    assert reason is not None and "stop:duck" in reason
    assert_python_thread(thread)
    assert hold.release() is True
    time.sleep(0.1)
    assert len(duck.calls) == 1, "called exactly once"


def test_duck_typed_signal_hears_a_lost_lease(backend) -> None:
    a = backend.adapter()
    duck = DuckSignal()
    hold = a.hold("duck-lost", ttl=0.3, heartbeat=0.05, signal=duck)
    assert hold is not None
    backend.delete_lease("duck-lost")
    assert duck.called.wait(2)
    assert hold.lost
    assert "lease lost" in (duck.calls[0][0] or "")


def test_objects_without_a_callable_abort_are_refused() -> None:
    m = mistri_locks.Memory()

    class NotCallable:
        abort = 5

    for bad in (object(), NotCallable(), "signal", 1):
        with pytest.raises(TypeError, match="abort"):
            m.hold("k", signal=bad)  # type: ignore[arg-type]
    assert not m.held("k")


def test_one_timeout_rule_for_every_wait() -> None:
    # The core's rule: None, +inf or more than 1e9 s wait forever; 0 looks;
    # NaN or negative is a ValueError naming the argument.
    for forever in (float("inf"), 1e10, 10**400):
        s = mistri_locks.AbortSignal()
        threading.Timer(0.02, s.abort).start()
        assert s.wait(forever) is True
    for bad in (float("nan"), -0.5, float("-inf"), -(10**400)):
        with pytest.raises(ValueError, match="timeout"):
            s.wait(bad)


def test_the_dispatcher_step_follows_the_timeout_rule() -> None:
    # It used to panic on NaN (Duration::from_secs_f64).
    from mistri_locks import _native

    for bad in (float("nan"), -1.0):
        with pytest.raises(ValueError, match="timeout"):
            _native._deliver_pending(bad)
    assert _native._deliver_pending(0) is True
