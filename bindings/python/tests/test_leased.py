"""``mistri_locks.leased``, ``current_lease()``, ``Hold.checkpoint()``:
sync and async functions, threads and tasks, conflict modes, bad input."""

from __future__ import annotations

import asyncio
import contextvars
import math
import pickle
import threading
import time
from typing import Any, Optional

import pytest

import mistri_locks
from mistri_locks import Conflict, Interrupted, current_lease, leased
from conftest import RedisBackend

TTL = 1.0
HEARTBEAT = 0.05
TICK = min(HEARTBEAT, 1.0)


@pytest.fixture
def mem() -> mistri_locks.Memory:
    return mistri_locks.Memory()


def test_the_key_is_formatted_from_the_bound_arguments(mem: mistri_locks.Memory) -> None:
    seen: list[tuple[str, int]] = []

    @leased("report:{account_id}:{kind}:{opts[day]}", ttl=TTL, locks=mem)
    def report(account_id: int, opts: dict[str, str], kind: str = "daily") -> str:
        lease = current_lease()
        assert lease is not None
        assert mem.held(lease.key)
        seen.append((lease.key, lease.fence))
        return "done"

    assert current_lease() is None
    assert report(42, {"day": "mon"}) == "done"
    assert report(account_id=42, kind="weekly", opts={"day": "tue"}) == "done"
    assert [k for k, _ in seen] == ["report:42:daily:mon", "report:42:weekly:tue"]
    assert current_lease() is None
    assert not mem.held("report:42:daily:mon") and not mem.held("report:42:weekly:tue"), "released"
    assert report.__name__ == "report"  # functools.wraps


def test_var_keyword_arguments_fill_the_template(mem: mistri_locks.Memory) -> None:
    @leased("job:{name}", ttl=TTL, locks=mem)
    def job(**kwargs: Any) -> Optional[str]:
        lease = current_lease()
        return None if lease is None else lease.key

    assert job(name="x") == "job:x"


def test_an_exception_releases_the_lease_and_propagates(mem: mistri_locks.Memory) -> None:
    @leased("boom", ttl=TTL, locks=mem)
    def boom() -> None:
        assert mem.held("boom")
        raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        boom()
    assert not mem.held("boom")
    assert current_lease() is None


def test_fences_grow_call_after_call(mem: mistri_locks.Memory) -> None:
    @leased("fenced", ttl=TTL, locks=mem)
    def fence() -> int:
        lease = current_lease()
        assert lease is not None
        return lease.fence

    first, second = fence(), fence()
    assert second > first


@pytest.mark.parametrize("mode", ["skip", "raise", "callable"])
def test_conflict_modes(mem: mistri_locks.Memory, mode: str) -> None:
    ran: list[int] = []
    fallback: list[tuple[int, str]] = []

    def on_conflict(n: int, tag: str = "t") -> str:
        fallback.append((n, tag))
        return "fell back"

    @leased("busy:{n}", ttl=TTL, locks=mem,
            on_conflict=on_conflict if mode == "callable" else mode)
    def work(n: int, tag: str = "t") -> str:
        ran.append(n)
        return "ran"

    other = mem.new_owner()
    assert other.acquire("busy:1", 5)
    if mode == "skip":
        assert work(1) is None
    elif mode == "raise":
        with pytest.raises(Conflict) as info:
            work(1)
        assert info.value.key == "busy:1"
        assert isinstance(info.value, mistri_locks.Error)
    else:
        assert work(1, tag="x") == "fell back"
        assert fallback == [(1, "x")]
    assert ran == [], "the function did not run"
    assert other.held("busy:1") and other.release("busy:1"), "the holder's lease was left alone"
    assert work(2) == "ran" and ran == [2]


def test_limit_shares_the_lease_among_n_holders(mem: mistri_locks.Memory) -> None:
    inside = threading.Barrier(3, timeout=10)
    results: list[Optional[str]] = []

    @leased("pool", ttl=TTL, heartbeat=HEARTBEAT, limit=2, locks=mem)
    def slot() -> str:
        inside.wait()  # the two holders and the test meet here
        inside.wait()  # ... and leave once the third call was refused
        return "held"

    threads = [threading.Thread(target=lambda: results.append(slot())) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    assert slot() is None, "a third holder is refused while two hold"
    inside.wait()
    for t in threads:
        t.join(10)
    assert results == ["held", "held"]


def test_wait_takes_the_lease_when_the_holder_releases(mem: mistri_locks.Memory) -> None:
    other = mem.new_owner()
    assert other.acquire("queue", 30)

    @leased("queue", ttl=TTL, wait=30, locks=mem)
    def after() -> float:
        return time.monotonic()

    releaser = threading.Timer(0.2, lambda: other.release("queue"))
    released_by = time.monotonic() + 0.2
    releaser.start()
    took = after()
    releaser.join()
    assert took >= released_by - 0.05, "ran only after the release"


def test_checkpoint_raises_stopped_when_the_stop_flag_goes_up(
    redis_backend: RedisBackend,
) -> None:
    locks = redis_backend.adapter()
    started = threading.Event()
    outcome: list[Any] = []

    @leased("nightly:{n}", ttl=TTL, heartbeat=HEARTBEAT, locks=locks)
    def nightly(n: int) -> None:
        lease = current_lease()
        assert lease is not None
        lease.checkpoint()  # nothing to report yet
        started.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                lease.checkpoint()
            except Interrupted as e:
                outcome.append((time.monotonic(), e))
                raise
            time.sleep(0.005)

    worker = threading.Thread(target=lambda: pytest.raises(Interrupted, nightly, 7))
    worker.start()
    assert started.wait(10)
    raised = time.monotonic()
    redis_backend.owner().set_flag("nightly:7:stop", 30)  # the default stop key
    worker.join(15)
    (at, err), = outcome
    assert err.reason == "stopped" and err.key == "nightly:7"
    assert "nightly:7:stop" in (err.detail or "")
    assert at - raised <= TICK + 0.25, f"interrupted {at - raised:.3f} s after the flag"
    assert not locks.held("nightly:7"), "released on the way out"


def test_checkpoint_raises_lost_when_the_lease_is_taken(mem: mistri_locks.Memory) -> None:
    @leased("fragile", ttl=TTL, heartbeat=HEARTBEAT, locks=mem)
    def fragile() -> None:
        lease = current_lease()
        assert lease is not None
        assert mem.break_lease("fragile")  # an operator breaks it
        assert mem.new_owner().acquire("fragile", 5)  # someone else takes it
        assert lease.signal.wait(TTL), "the next renewal finds it gone"  # type: ignore[union-attr]
        assert lease.lost
        lease.checkpoint()

    with pytest.raises(Interrupted) as info:
        fragile()
    assert info.value.reason == "lost"


def test_interrupted_and_conflict_survive_pickling_and_json() -> None:
    # Celery stores a failed task's exception pickled in its result.
    # Celery's JSON backend rebuilds it as cls(*args).
    for err in (pickle.loads(pickle.dumps(Interrupted("stopped", "k", "stop flag raised"))),
                Interrupted(*Interrupted("stopped", "k", "stop flag raised").args)):
        assert (err.reason, err.key, err.detail) == ("stopped", "k", "stop flag raised")
        assert str(err) == "lease 'k' was asked to stop (stop flag raised)"
    conflict = pickle.loads(pickle.dumps(Conflict("report:1")))
    assert conflict.key == "report:1" and str(conflict) == "lease 'report:1' is held elsewhere"


def test_current_lease_is_per_thread_and_follows_a_copied_context(
    mem: mistri_locks.Memory,
) -> None:
    seen: dict[str, Any] = {}
    both_inside = threading.Barrier(2, timeout=10)

    @leased("t:{name}", ttl=TTL, locks=mem)
    def work(name: str) -> None:
        both_inside.wait()  # both calls hold at once
        lease = current_lease()
        assert lease is not None
        seen[name] = lease.key
        ctx = contextvars.copy_context()
        inner: list[Any] = []
        carried = threading.Thread(target=ctx.run, args=(lambda: inner.append(current_lease()),))
        plain = threading.Thread(target=lambda: inner.append(current_lease()))
        carried.start(); carried.join(10)
        plain.start(); plain.join(10)
        seen[name + ":carried"] = inner[0].key
        seen[name + ":plain"] = inner[1]

    threads = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {
        "a": "t:a", "a:carried": "t:a", "a:plain": None,
        "b": "t:b", "b:carried": "t:b", "b:plain": None,
    }


def test_async_def_holds_and_releases(mem: mistri_locks.Memory) -> None:
    @leased("async:{n}", ttl=TTL, heartbeat=HEARTBEAT, locks=mem)
    async def job(n: int) -> str:
        lease = current_lease()
        assert lease is not None and mem.held(lease.key)

        async def child() -> Optional[str]:
            inner = current_lease()
            return None if inner is None else inner.key

        # A task spawned inside sees the lease (asyncio copies the context).
        assert await asyncio.create_task(child()) == lease.key
        return lease.key

    async def main() -> None:
        assert await job(1) == "async:1"
        assert current_lease() is None
        # Two calls side by side each see their own.
        assert await asyncio.gather(job(2), job(3)) == ["async:2", "async:3"]

    asyncio.run(main())
    assert not any(mem.held(f"async:{n}") for n in (1, 2, 3))


@pytest.mark.parametrize("mode", ["skip", "raise", "callable"])
def test_async_conflict_modes(mem: mistri_locks.Memory, mode: str) -> None:
    async def fallback(n: int) -> str:
        return f"fallback {n}"

    @leased("abusy", ttl=TTL, locks=mem, on_conflict=fallback if mode == "callable" else mode)
    async def job(n: int) -> str:
        return "ran"

    other = mem.new_owner()
    assert other.acquire("abusy", 5)

    async def main() -> Any:
        return await job(5)

    if mode == "raise":
        with pytest.raises(Conflict):
            asyncio.run(main())
    else:
        assert asyncio.run(main()) == (None if mode == "skip" else "fallback 5")
    assert other.held("abusy")


def test_cancelling_an_async_call_releases_the_lease(mem: mistri_locks.Memory) -> None:
    async def main() -> None:
        inside = asyncio.Event()

        @leased("cancel-me", ttl=30, heartbeat=1, locks=mem)
        async def forever() -> None:
            inside.set()
            await asyncio.sleep(3600)

        task = asyncio.create_task(forever())
        await asyncio.wait_for(inside.wait(), 10)
        assert mem.held("cancel-me")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Released, not left to its 30 s ttl.
        assert not mem.held("cancel-me")

    asyncio.run(main())


def test_nothing_configured_is_a_clear_error() -> None:
    @leased("k", ttl=TTL)
    def f() -> None:
        pass

    with pytest.raises(mistri_locks.ConfigError, match="configure"):
        f()
    mem = mistri_locks.Memory()
    mistri_locks.configure(mem)
    seen: list[bool] = []

    @leased("k", ttl=TTL)
    def g() -> None:
        seen.append(mem.held("k"))

    g()
    assert seen == [True], "the configured handle is used"


def test_locks_may_be_a_callable_resolved_per_call(mem: mistri_locks.Memory) -> None:
    calls: list[int] = []

    def source() -> mistri_locks.Locks:
        calls.append(1)
        return mem

    @leased("lazy", ttl=TTL, locks=source)
    def f() -> bool:
        return mem.held("lazy")

    assert calls == [], "not resolved at decoration"
    assert f() is True and calls == [1]


def test_bad_options_fail_at_decoration() -> None:
    def f(account_id: int) -> None:
        pass

    with pytest.raises(TypeError, match="'user'.*account_id"):
        leased("report:{user}")(f)
    with pytest.raises(ValueError, match="ttl"):
        leased("report:{account_id}", ttl=0)(f)
    with pytest.raises(ValueError, match="ttl"):
        leased("report:{account_id}", ttl=-1)(f)
    with pytest.raises(ValueError, match="ttl"):
        leased("report:{account_id}", ttl=math.nan)(f)
    with pytest.raises(TypeError, match="ttl"):
        leased("report:{account_id}", ttl="60")(f)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="heartbeat"):
        leased("report:{account_id}", heartbeat=0)(f)
    with pytest.raises(ValueError, match="on_conflict"):
        leased("report:{account_id}", on_conflict="retry")(f)
    with pytest.raises(ValueError, match="limit"):
        leased("report:{account_id}", limit=0)(f)
    with pytest.raises(ValueError, match="wait"):
        leased("report:{account_id}", wait=-1)(f)
    with pytest.raises(ValueError, match="positions"):
        leased("report:{}")(f)
    with pytest.raises(ValueError, match="malformed"):
        leased("report:{account_id")(f)
    with pytest.raises(ValueError, match="key"):
        leased("")(f)
    with pytest.raises(TypeError, match="stop_key.*'job'"):
        leased("report:{account_id}", stop_key="stop:{job}")(f)
    with pytest.raises(TypeError):
        leased("report:{account_id}", tll=5)(f)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="generator"):

        @leased("gen")
        def gen() -> Any:
            yield 1

    # LeaseSpec, which the framework faces feed with a dict, names unknown options.
    from mistri_locks._leased import LeaseSpec

    with pytest.raises(TypeError, match="unknown option.*tll"):
        LeaseSpec(f, {"key": "k", "tll": 5})


def test_a_template_failing_at_call_time_fails_that_call_only(mem: mistri_locks.Memory) -> None:
    class Account:
        def __init__(self, ident: int) -> None:
            self.ident = ident

    @leased("acct:{account.ident}", ttl=TTL, locks=mem)
    def work(account: Any) -> str:
        return "ran"

    with pytest.raises(ValueError, match="failed for this call"):
        work(object())
    assert work(Account(3)) == "ran"
    with pytest.raises(TypeError):
        work()  # a missing argument: the same error as calling work() undecorated
    assert mem.list()["leases"] == []
