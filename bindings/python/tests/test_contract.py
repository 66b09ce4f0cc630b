"""The contract suite of core/tests/contract.rs, through the Python face,
run against every backend in conftest.BACKENDS."""

from __future__ import annotations

import math
import threading
import time

import pytest

import mistri_locks


def test_acquire_once_and_refuse_while_live(backend) -> None:
    a, b = backend.adapter(), backend.owner()
    assert a.acquire("job", 5) is True
    assert a.acquire("job", 5) is False, "same owner, live lease"
    assert b.acquire("job", 5) is False, "other owner, live lease"
    assert a.held("job") and b.held("job")
    assert b.renew("job", 5) is False, "b never acquired it"
    assert b.release("job") is False, "b never acquired it"
    assert a.held("job")
    assert a.renew("job", 5) is True
    assert a.release("job") is True
    assert a.held("job") is False
    assert a.release("job") is False, "release is not repeated"
    assert b.acquire("job", 5.0) is True


def test_fractional_ttl_expires_and_can_be_retaken(backend) -> None:
    a, b = backend.adapter(), backend.owner()
    assert a.acquire("short", 0.01)
    assert not b.acquire("short", 0.01)
    time.sleep(0.05)
    assert not a.held("short"), "a 0.01 s lease is gone after 0.05 s"
    assert b.acquire("short", 5)
    assert a.held("short")


def test_flags_set_read_clear_and_expire(backend) -> None:
    a, b = backend.adapter(), backend.owner()
    assert a.flag("stop") is False
    assert a.set_flag("stop", 5) is None
    assert b.flag("stop") is True, "a flag needs no owner"
    b.clear_flag("stop")
    assert a.flag("stop") is False
    b.clear_flag("stop")  # lowering a lowered flag is fine
    a.set_flag("blink", 0.02)
    assert a.flag("blink")
    time.sleep(0.06)
    assert not a.flag("blink")
    a.set_flag("default-ttl")  # ttl defaults to 300 s
    assert a.flag("default-ttl")
    # flags and leases live apart
    a.set_flag("both", 5)
    assert not a.held("both")
    assert a.acquire("both", 5)


def test_hold_outlives_its_ttl_by_renewing(backend) -> None:
    a = backend.adapter()
    hold = a.hold("beating", ttl=0.2, heartbeat=0.05)
    assert hold is not None
    time.sleep(0.7)
    assert a.held("beating"), "renewed past 3.5 ttls"
    assert not hold.lost
    assert not hold.signal.aborted
    assert hold.release() is True


def test_heartbeat_at_the_ttl_still_never_lapses(backend) -> None:
    a = backend.adapter()
    hold = a.hold("equal", ttl=0.3, heartbeat=0.3)
    assert hold is not None
    for _ in range(10):
        time.sleep(0.1)
        assert a.held("equal"), "lapsed"
    assert not hold.lost
    hold.release()


def test_released_lease_is_gone_and_stays_gone(backend) -> None:
    a = backend.adapter()
    hold = a.hold("done", ttl=0.2, heartbeat=0.01)
    assert hold is not None
    time.sleep(0.05)
    assert hold.release() is True
    assert not a.held("done")
    time.sleep(0.1)  # many heartbeats
    assert not a.held("done"), "a tick re-stamped a released lease"
    assert hold.release() is False, "release is idempotent"
    assert not hold.signal.aborted, "release is not a loss"


def test_leaving_the_with_block_releases(backend) -> None:
    a = backend.adapter()
    hold = a.hold("scoped", ttl=5, heartbeat=1)
    assert hold is not None
    with hold as h:
        assert h is hold
        assert h.key == "scoped"
        assert a.held("scoped")
    assert not a.held("scoped")
    with pytest.raises(RuntimeError):
        with a.hold("scoped2", ttl=5, heartbeat=1):  # type: ignore[union-attr]
            raise RuntimeError("work failed")
    assert not a.held("scoped2"), "released on the way out of an exception"


def test_dropping_a_hold_releases_it(backend) -> None:
    a = backend.adapter()
    hold = a.hold("dropped", ttl=5, heartbeat=1)
    assert a.held("dropped")
    del hold
    assert not a.held("dropped")


def test_refused_hold_is_none_and_holder_keeps_its_lease(backend) -> None:
    a, b = backend.adapter(), backend.owner()
    hold = a.hold("one", ttl=0.3, heartbeat=0.05)
    assert hold is not None
    fence = hold.fence
    assert b.hold("one", ttl=0.3, heartbeat=0.05) is None
    assert not b.release("one")
    time.sleep(0.5)
    assert a.held("one")
    assert not hold.lost
    assert hold.fence == fence
    hold.release()
    again = b.hold("one", ttl=0.3, heartbeat=0.05)
    assert again is not None
    again.release()


def test_stale_owner_can_neither_renew_nor_release(backend) -> None:
    a, b = backend.adapter(), backend.owner()
    assert a.acquire("stale", 0.03)
    time.sleep(0.08)
    assert b.acquire("stale", 5)
    assert not a.renew("stale", 5)
    assert not a.release("stale")
    assert b.held("stale")
    assert b.release("stale")


def test_fencing_numbers_strictly_increase(backend) -> None:
    owners = [backend.adapter(), backend.owner()]
    last = 0
    for i in range(6):
        o = owners[i % 2]
        hold = o.hold("fenced", ttl=5, heartbeat=1)
        assert hold is not None
        assert isinstance(hold.fence, int)
        assert hold.fence > last
        last = hold.fence
        hold.release()
        assert o.acquire("fenced", 0.01)
        fence = o.fence("fenced")
        assert fence is not None and fence > last
        last = fence
        time.sleep(0.02)  # let it expire instead of releasing


def test_stop_flag_raised_elsewhere_trips_the_signal_within_a_tick(backend) -> None:
    a, b = backend.adapter(), backend.owner()
    signal = mistri_locks.AbortSignal()
    hold = a.hold("worker", ttl=2, heartbeat=0.1, stop_key="stop:worker", signal=signal)
    assert hold is not None
    assert hold.signal is signal
    time.sleep(0.15)
    assert not signal.aborted
    raised = time.monotonic()
    b.set_flag("stop:worker", 30)
    assert signal.wait(1.0), "no trip"
    took = time.monotonic() - raised
    assert took <= 0.1 + 0.25, f"tripped after {took:.3f} s"
    assert signal.reason is not None and "stop:worker" in signal.reason
    assert not hold.lost, "a stop is not a loss"
    assert a.held("worker"), "still renewing until released"
    hold.release()
    assert not b.held("worker")


def test_stop_flag_already_up_trips_at_once(backend) -> None:
    a = backend.adapter()
    a.set_flag("stop:early", 30)
    hold = a.hold("early", ttl=2, heartbeat=1, stop_key="stop:early")
    assert hold is not None
    assert isinstance(hold.signal, mistri_locks.AbortSignal)
    assert hold.signal.wait(0.5)
    hold.release()


def test_deleting_the_lease_trips_the_signal_as_lost(backend) -> None:
    a = backend.adapter()
    hold = a.hold("victim", ttl=0.3, heartbeat=0.05)
    assert hold is not None
    time.sleep(0.06)
    deleted = time.monotonic()
    backend.delete_lease("victim")
    assert hold.signal.wait(1.0), "no trip"
    took = time.monotonic() - deleted
    assert took <= 0.05 + 0.25, f"tripped after {took:.3f} s"
    assert hold.lost
    assert "lease lost" in (hold.signal.reason or "")
    assert hold.release() is False
    # a lost holder deletes nothing: the next holder is safe
    b = backend.owner()
    assert b.acquire("victim", 5)
    del hold
    assert b.held("victim")


def test_lease_taken_by_another_is_lost_not_restamped(backend) -> None:
    a, b = backend.adapter(), backend.owner()
    hold = a.hold("taken", ttl=0.3, heartbeat=0.05)
    assert hold is not None
    backend.delete_lease("taken")
    assert b.acquire("taken", 5)
    assert hold.signal.wait(1.0)
    assert hold.lost
    assert hold.release() is False
    assert b.held("taken")
    assert b.release("taken"), "b's token still owns it"


def test_contending_threads_never_both_hold(backend) -> None:
    threads_n, wins_each = 8, 3
    inside = 0
    inside_lock = threading.Lock()
    barrier = threading.Barrier(threads_n)
    deadline = time.monotonic() + 20
    results: list[tuple[int, int]] = []
    failures: list[str] = []

    def contend() -> None:
        nonlocal inside
        adapter = backend.owner()
        barrier.wait()
        wins = refusals = 0
        while wins < wins_each and time.monotonic() < deadline:
            hold = adapter.hold("contended", ttl=5, heartbeat=1)
            if hold is None:
                refusals += 1
                continue
            with inside_lock:
                inside += 1
                if inside != 1:
                    failures.append("two holders at once")
            time.sleep(0.0003)
            with inside_lock:
                inside -= 1
            if hold.release() is not True:
                failures.append("release did not delete the lease")
            wins += 1
        results.append((wins, refusals))

    threads = [threading.Thread(target=contend) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    assert all(w == wins_each for w, _ in results), results
    assert sum(r for _, r in results) > 0, f"no contention: {results}"


@pytest.mark.parametrize("bad", [0, 0.0, -1, -0.5, math.nan, math.inf, -math.inf, 2e9, 10**400])
def test_bad_durations_are_value_errors(backend, bad: float) -> None:
    a = backend.adapter()
    with pytest.raises(ValueError, match="ttl"):
        a.acquire("k", bad)
    with pytest.raises(ValueError, match="ttl"):
        a.renew("k", bad)
    with pytest.raises(ValueError, match="ttl"):
        a.set_flag("k", bad)
    with pytest.raises(ValueError, match="ttl"):
        a.hold("k", ttl=bad)
    with pytest.raises(ValueError, match="heartbeat"):
        a.hold("k", heartbeat=bad)
    assert not a.held("k"), "a refused call took nothing"


@pytest.mark.parametrize("bad", [True, False, "1", None, b"1", [1]])
def test_non_numbers_are_type_errors(backend, bad: object) -> None:
    a = backend.adapter()
    with pytest.raises(TypeError, match="ttl"):
        a.acquire("k", bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ttl"):
        a.hold("k", ttl=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="heartbeat"):
        a.hold("k", heartbeat=bad)  # type: ignore[arg-type]
    assert not a.held("k")


def test_bad_keys(backend) -> None:
    a = backend.adapter()
    for call in (
        lambda k: a.acquire(k, 1),
        lambda k: a.renew(k, 1),
        a.release,
        a.held,
        lambda k: a.set_flag(k, 1),
        a.flag,
        a.clear_flag,
        a.break_lease,
        a.hold,
    ):
        with pytest.raises(ValueError, match="key must not be empty"):
            call("")
        with pytest.raises(TypeError):
            call(42)
        with pytest.raises(TypeError):
            call(b"key")
    with pytest.raises(ValueError, match="stop_key must not be empty"):
        a.hold("k", stop_key="")
    with pytest.raises(TypeError, match="signal must be"):
        a.hold("k", signal=42)  # type: ignore[arg-type]
    assert not a.held("k")


def test_numbers_other_than_float_are_accepted(backend) -> None:
    a = backend.adapter()
    assert a.acquire("int", 5)
    assert a.renew("int", 5.5)

    class Secs:
        def __float__(self) -> float:
            return 2.0

    assert a.acquire("float-like", Secs())  # type: ignore[arg-type]
