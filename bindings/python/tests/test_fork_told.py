"""A forked child's copy of a hold is told (issue 28 §4): on first use in the
child it reports lost and its signal trips with a reason naming the fork,
also when the child only looks at the signal it passed; the parent's hold is
unaffected. os.fork on every backend, and multiprocessing with fork.
Also: a hold's stop key is in its holder description (info and list)."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from typing import Any, Callable

import mistri_locks


def _in_child(fn: Callable[[], Any]) -> Any:
    """Runs fn() in an os.fork child; returns what it returned (or fails)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            result = {"ok": fn()}
        except BaseException as e:  # everything to the parent
            result = {"error": f"{type(e).__name__}: {e}"}
        with os.fdopen(w, "w") as f:
            json.dump(result, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    report = json.loads(data)
    assert "error" not in report, report["error"]
    return report["ok"]


def _names_the_fork(reason: Any) -> bool:
    return isinstance(reason, str) and "forked" in reason and str(os.getpid()) in reason


def test_a_forked_childs_copy_of_a_hold_reports_lost(backend) -> None:  # type: ignore[no-untyped-def]
    a = backend.adapter()
    asked = mistri_locks.AbortSignal()
    watched = mistri_locks.AbortSignal()
    bystander = mistri_locks.AbortSignal()
    hold = a.hold("told", ttl=1.5, heartbeat=0.1, stop_key="stop", signal=asked)
    other = a.hold("told-2", ttl=1.5, heartbeat=0.1, signal=watched)
    assert hold is not None and other is not None

    def child() -> dict[str, Any]:
        return {
            "lost": hold.lost,
            "aborted": hold.signal.aborted,
            "reason": _names_the_fork(hold.signal.reason),
            # a work loop that only checks its signal
            "watched": watched.wait(5),
            "watched_reason": _names_the_fork(watched.reason),
            "bystander": bystander.aborted,
            "release": hold.release(),
        }

    assert _in_child(child) == {
        "lost": True,
        "aborted": True,
        "reason": True,
        "watched": True,
        "watched_reason": True,
        "bystander": False,
        "release": False,
    }
    time.sleep(2.0)  # past the ttl (1.5 s, not shorter: a loaded machine): the parent still renews
    assert not hold.lost and not asked.aborted, asked.reason
    assert not other.lost and not watched.aborted, watched.reason
    assert a.held("told")
    assert hold.release() is True and other.release() is True


def _mp_child(q) -> None:  # type: ignore[no-untyped-def]
    hold = _MP_HOLD[0]
    q.put((hold.lost, hold.signal.aborted, _names_the_fork(hold.signal.reason)))


_MP_HOLD: list[Any] = []


def test_a_multiprocessing_fork_childs_copy_reports_lost(redis_backend) -> None:  # type: ignore[no-untyped-def]
    a = redis_backend.adapter()
    hold = a.hold("mp-told", ttl=1.5, heartbeat=0.1)
    assert hold is not None
    _MP_HOLD[:] = [hold]
    try:
        ctx = multiprocessing.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=_mp_child, args=(q,))
        p.start()
        assert q.get(timeout=30) == (True, True, True)
        p.join(30)
        assert p.exitcode == 0
    finally:
        _MP_HOLD.clear()
    assert not hold.lost
    assert hold.release() is True


def test_a_holds_stop_key_is_in_its_description(backend) -> None:  # type: ignore[no-untyped-def]
    a = backend.adapter()
    hold = a.hold("described", ttl=5, heartbeat=1, stop_key="stop:job 7")
    assert hold is not None
    info = a.info("described")
    assert info is not None and info["stop_key"] == "stop:job 7"
    assert info["holders"][0]["stop_key"] == "stop:job 7"
    assert "\x1f" not in (info["holder"] or "")
    listed = a.list("describ")["leases"]
    assert [lease["stop_key"] for lease in listed] == ["stop:job 7"]
    assert hold.release() is True
    assert a.acquire("described", 5)
    info = a.info("described")
    assert info is not None and info["stop_key"] is None
    assert a.release("described")
