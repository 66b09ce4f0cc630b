"""Hold.release_outcome() (and its coroutine): what a release did, as the
core's ReleaseOutcome says it in Rust and C. Hold.release() keeps
answering True/False."""

from __future__ import annotations

import asyncio
import json
import os

import mistri_locks
from mistri_locks import ReleaseOutcome


def test_the_outcomes_are_a_str_enum() -> None:
    assert [o.value for o in ReleaseOutcome] == [
        "released", "not_held", "lost", "already_released", "other_process", "expired",
    ]
    assert ReleaseOutcome.RELEASED == "released" and isinstance(ReleaseOutcome.LOST, str)
    assert ReleaseOutcome("not_held") is ReleaseOutcome.NOT_HELD
    assert str(ReleaseOutcome.OTHER_PROCESS) == "other_process"
    assert json.dumps({"outcome": ReleaseOutcome.ALREADY_RELEASED}) == '{"outcome": "already_released"}'


def test_released_then_already_released(backend) -> None:
    locks = backend.adapter()
    hold = locks.hold("job", ttl=30, heartbeat=5)
    assert hold is not None
    assert hold.release_outcome() is ReleaseOutcome.RELEASED
    assert not locks.held("job")
    assert hold.release_outcome() is ReleaseOutcome.ALREADY_RELEASED
    assert hold.release() is False


def test_release_after_release_outcome_and_back() -> None:
    locks = mistri_locks.Memory()
    hold = locks.hold("job", ttl=30, heartbeat=5)
    assert hold is not None
    assert hold.release() is True
    assert hold.release_outcome() is ReleaseOutcome.ALREADY_RELEASED
    with locks.hold("scoped", ttl=30, heartbeat=5) as scoped:
        assert scoped is not None
    assert scoped.release_outcome() is ReleaseOutcome.ALREADY_RELEASED


def test_not_held_when_the_lease_went_before_the_delete(backend) -> None:
    locks = backend.adapter()
    # A long heartbeat: no renewal notices the break before the release.
    hold = locks.hold("job", ttl=30, heartbeat=10)
    assert hold is not None
    backend.delete_lease("job")
    assert hold.release_outcome() is ReleaseOutcome.NOT_HELD
    assert hold.release_outcome() is ReleaseOutcome.ALREADY_RELEASED


def test_not_held_answers_false_from_release() -> None:
    locks = mistri_locks.Memory()
    hold = locks.hold("job", ttl=30, heartbeat=10)
    assert hold is not None
    assert locks.break_lease("job")
    assert hold.release() is False


def test_lost_when_the_hold_was_lost_before(backend) -> None:
    locks = backend.adapter()
    hold = locks.hold("job", ttl=2, heartbeat=0.05)
    assert hold is not None
    backend.delete_lease("job")
    assert hold.signal.wait(5), "the loss was not noticed"
    assert hold.lost
    # The new holder's lease is left alone.
    thief = backend.owner()
    assert thief.acquire("job", ttl=30)
    assert hold.release_outcome() is ReleaseOutcome.LOST
    assert thief.held("job") and thief.release("job")


def test_other_process_in_a_forked_child(backend) -> None:
    locks = backend.adapter()
    hold = locks.hold("forked", ttl=30, heartbeat=5)
    assert hold is not None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            report = {"ok": [hold.release_outcome().value, hold.release()]}
        except BaseException as e:  # everything to the parent
            report = {"error": f"{type(e).__name__}: {e}"}
        with os.fdopen(w, "w") as f:
            json.dump(report, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert json.loads(data) == {"ok": ["other_process", False]}
    assert locks.held("forked") and not hold.lost
    assert hold.release_outcome() is ReleaseOutcome.RELEASED


def test_release_outcome_async(backend) -> None:
    locks = backend.adapter()

    async def main() -> list[ReleaseOutcome]:
        hold = await locks.hold_async("job", ttl=30, heartbeat=5)
        assert hold is not None
        first = await hold.release_outcome_async()
        second = await hold.release_outcome_async()
        return [first, second]

    assert asyncio.run(main()) == [ReleaseOutcome.RELEASED, ReleaseOutcome.ALREADY_RELEASED]
    assert not locks.held("job")



def test_a_release_unanswered_by_the_lease_end_is_expired() -> None:
    """Release is bounded by the lease too: with the server frozen (SIGSTOP)
    right after a confirmed renewal, release returns by the lease's end
    (ttl 2 s), not the adapter's 5 s timeout, and says EXPIRED; the plain
    release() would answer False."""
    import signal as signals
    import time

    from conftest import RedisServer

    server = RedisServer()
    try:
        locks = mistri_locks.Redis(url=server.url, namespace="mistri:py:expired")
        hold = locks.hold("job", ttl=2.0, heartbeat=0.5)
        assert hold is not None
        before = locks.stats()["renewals_confirmed"]
        deadline = time.monotonic() + 3
        while locks.stats()["renewals_confirmed"] == before:
            assert time.monotonic() < deadline, "no renewal"
            time.sleep(0.001)
        time.sleep(0.03)
        os.kill(server.proc.pid, signals.SIGSTOP)
        try:
            start = time.monotonic()
            outcome = hold.release_outcome()
            took = time.monotonic() - start
        finally:
            os.kill(server.proc.pid, signals.SIGCONT)
        assert outcome is ReleaseOutcome.EXPIRED, outcome
        assert 1.6 < took < 2.5, took  # the old release waited 5 s
        assert hold.release_outcome() is ReleaseOutcome.ALREADY_RELEASED
    finally:
        server.stop()
