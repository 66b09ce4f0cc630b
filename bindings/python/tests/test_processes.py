"""Several processes: stop flags across processes, Ctrl-C in a blocked
wait, and forked children (os.fork and multiprocessing)."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import time

import pytest

import mistri_locks
from conftest import RedisBackend, python_child

HOLDER = """
import sys, time, mistri_locks
url, ns = sys.argv[1], sys.argv[2]
mistri_locks.configure(mistri_locks.Redis(url, namespace=ns))
with mistri_locks.hold("worker", ttl=5, heartbeat=0.1, stop_key="stop:worker") as h:
    print("holding", flush=True)
    tripped = h.signal.wait(10)
    print("tripped" if tripped else "timeout", time.time(), h.signal.reason, flush=True)
"""

RAISER = """
import sys, time, mistri_locks
r = mistri_locks.Redis(sys.argv[1], namespace=sys.argv[2])
r.acquire("warm", 1)  # connect first, so the timing covers only the SET
t = time.time()
r.set_flag("stop:worker", 30)
print(t, flush=True)
"""


def test_stop_flag_from_another_process_trips_the_holder_within_a_tick(
    redis_backend: RedisBackend,
) -> None:
    url, ns = redis_backend.server.url, redis_backend.namespace
    holder = python_child(HOLDER, url, ns)
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.strip() == "holding", line + holder.stderr.read()  # type: ignore[union-attr]
        assert redis_backend.adapter().held("worker")
        time.sleep(0.3)  # a few quiet ticks
        raiser = python_child(RAISER, url, ns)
        out, err = raiser.communicate(timeout=30)
        assert raiser.returncode == 0, err
        raised = float(out)
        status, at, reason = holder.stdout.readline().split(" ", 2)
        assert status == "tripped"
        took = float(at) - raised
        assert took <= 0.1 + 0.25, f"tripped {took:.3f} s after the flag went up"
        assert "stop:worker" in reason
        holder.wait(timeout=10)
        assert holder.returncode == 0
        assert not redis_backend.adapter().held("worker"), "released on exit"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


# The child sets SIGINT's disposition first: a shell that starts jobs in the
# background (cron, nohup, a CI agent) starts them with SIGINT ignored, and
# children inherit that. "waiting" is printed inside the try, so a SIGINT
# that lands before the wait begins still ends in the handler.
WAITER = """
import signal, sys, time, mistri_locks
signal.signal(signal.SIGINT, signal.default_int_handler)
try:
    print("waiting", flush=True)
    mistri_locks.AbortSignal().wait({timeout})
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(42)
print("returned", flush=True)
"""


@pytest.mark.parametrize("timeout", ["None", "60"])
def test_ctrl_c_interrupts_a_blocked_wait(timeout: str) -> None:
    child = python_child(WAITER.format(timeout=timeout))
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "waiting"
        time.sleep(0.2)  # let it block
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=10)
        took = time.monotonic() - sent
        assert child.returncode == 42, (out, err)
        assert out.strip() == "interrupted"
        assert took < 2.0, f"took {took:.2f} s to notice Ctrl-C"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _child_report(fn) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """Runs fn() in an os.fork child; returns what it returned (or raised)."""
    import json

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            result = {"ok": fn()}
        except BaseException as e:  # report everything to the parent
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
    return report["ok"]  # type: ignore[no-any-return]


def test_forked_child_works_but_never_touches_the_parents_lease(backend) -> None:
    a = backend.adapter()
    assert a.acquire("plain", 5)
    hold = a.hold("forked", ttl=0.4, heartbeat=0.05)
    assert hold is not None
    a.held("forked")  # the connection pool has a live connection to inherit

    def in_child() -> dict:  # type: ignore[type-arg]
        out = {
            # the parent's Hold, copied: no renewing, no releasing
            "hold_release": hold.release(),
            # the parent's issued leases are not the child's
            "release_plain": a.release("plain"),
            "renew_plain": a.renew("plain", 5),
            # but the adapter works (Redis: reconnects in the child)
            "held": a.held("forked"),
            "acquire": a.acquire("child-key", 5),
            "child_release": a.release("child-key"),
        }
        a.set_flag("from-child", 5)
        out["flag"] = a.flag("from-child")
        child_hold = a.hold("child-hold", ttl=1, heartbeat=0.05)
        out["child_hold"] = child_hold is not None and child_hold.release()
        return out

    report = _child_report(in_child)
    assert report == {
        "hold_release": False,
        "release_plain": False,
        "renew_plain": False,
        "held": True,
        "acquire": True,
        "child_release": True,
        "flag": True,
        "child_hold": True,
    }
    # The parent is untouched: still holding, still renewing past its ttl.
    assert a.held("plain")
    time.sleep(0.6)
    assert a.held("forked"), "the parent's lease lapsed"
    assert not hold.lost
    assert a.flag("from-child") == (backend.name != "memory")
    assert hold.release() is True
    assert a.release("plain")


def test_a_hold_dropped_in_a_forked_child_is_left_alone(backend) -> None:
    a = backend.adapter()
    hold = a.hold("dropped-in-child", ttl=0.4, heartbeat=0.05)
    assert hold is not None

    def in_child() -> bool:
        nonlocal hold
        hold = None  # drops the child's copy
        gc.collect()
        return True

    assert _child_report(in_child)
    time.sleep(0.5)
    assert a.held("dropped-in-child")
    assert hold is not None and hold.release() is True


def _mp_worker(url: str, ns: str, q) -> None:  # type: ignore[no-untyped-def]
    adapter = mistri_locks.locks()
    assert adapter is not None, "configured adapter is inherited"
    inherited = isinstance(adapter, mistri_locks.Redis) and adapter.namespace == ns
    fresh = mistri_locks.Redis(url, namespace=ns)
    q.put((inherited, adapter.release("mp"), adapter.held("mp"), mistri_locks.hold("mp") is None,
           fresh.held("mp")))


def test_multiprocessing_fork_children_share_leases_not_ownership(
    redis_backend: RedisBackend,
) -> None:
    a = redis_backend.adapter()
    mistri_locks.configure(a)
    hold = mistri_locks.hold("mp", ttl=0.5, heartbeat=0.05)
    assert hold is not None
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [
        ctx.Process(target=_mp_worker, args=(redis_backend.server.url, redis_backend.namespace, q))
        for _ in range(3)
    ]
    for p in procs:
        p.start()
    results = [q.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    # each child: sees the parent's lease, can't release it, is refused a hold
    assert results == [(True, False, True, True, True)] * 3
    time.sleep(0.6)
    assert a.held("mp") and not hold.lost
    assert hold.release() is True
