"""Waiting acquires and holds (``wait=``), ``limit=`` and hold options'
argument rules, ``Hold.touch``, and Ctrl-C / asyncio cancellation of a
wait (issue 14)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import signal
import threading
import time
from typing import Any, Callable

import pytest

import mistri_locks

from conftest import python_child


def release_later(locks: mistri_locks.Locks, key: str, after: float) -> threading.Timer:
    timer = threading.Timer(after, locks.release, (key,))
    timer.start()
    return timer


@pytest.mark.parametrize("make", ["memory", "redis"])
def test_a_waiting_acquire_gets_the_lease_when_the_holder_releases(make: str, request: Any) -> None:
    if make == "memory":
        holder: mistri_locks.Locks = mistri_locks.Memory()
    else:
        holder = request.getfixturevalue("redis_backend").adapter()
    waiter = holder.new_owner()  # type: ignore[attr-defined]
    assert holder.acquire("job", 30)
    timer = release_later(holder, "job", 0.3)
    started = time.monotonic()
    assert waiter.acquire("job", 30, wait=20) is True
    took = time.monotonic() - started
    timer.join()
    assert 0.2 <= took < 10, took
    assert waiter.release("job")


def test_a_waiting_acquire_is_refused_at_the_end_of_its_wait() -> None:
    holder = mistri_locks.Memory()
    waiter = holder.new_owner()
    assert holder.acquire("job", 30)
    started = time.monotonic()
    assert waiter.acquire("job", 30, wait=0.3) is False
    took = time.monotonic() - started
    assert 0.25 <= took < 5, took
    assert holder.fence("job") is not None, "the holder's lease is untouched"


def test_wait_zero_and_none_try_once() -> None:
    holder = mistri_locks.Memory()
    waiter = holder.new_owner()
    assert waiter.acquire("free", 30, wait=0) is True
    assert holder.acquire("job", 30)
    for wait in (0, 0.0, None):
        started = time.monotonic()
        assert waiter.acquire("job", 30, wait=wait) is False
        assert time.monotonic() - started < 1


def test_an_aborted_signal_ends_a_waiting_acquire() -> None:
    holder = mistri_locks.Memory()
    waiter = holder.new_owner()
    assert holder.acquire("job", 30)
    stop = mistri_locks.AbortSignal()
    threading.Timer(0.2, stop.abort, ("enough",)).start()
    started = time.monotonic()
    assert waiter.acquire("job", 30, wait=math.inf, signal=stop) is False
    assert time.monotonic() - started < 5
    holder.release("job")
    assert waiter.acquire("job", 30, wait=0) is True


@pytest.mark.parametrize("make", ["memory", "redis"])
def test_a_waiting_hold_gets_the_lease_when_the_holder_releases(make: str, request: Any) -> None:
    if make == "memory":
        owner: mistri_locks.Locks = mistri_locks.Memory()
    else:
        owner = request.getfixturevalue("redis_backend").adapter()
    first = owner.hold("job", ttl=30, heartbeat=1)
    assert first is not None
    threading.Timer(0.3, first.release).start()
    started = time.monotonic()
    with owner.hold("job", ttl=30, heartbeat=1, wait=20) as second:
        assert second is not None
        assert second.fence > first.fence
        took = time.monotonic() - started
    assert 0.2 <= took < 10, took
    assert not owner.held("job")


def test_a_waiting_hold_is_refused_at_the_end_of_its_wait_and_the_module_form_waits() -> None:
    locks = mistri_locks.Memory()
    mistri_locks.configure(locks)
    first = mistri_locks.hold("job", ttl=30)
    assert first is not None
    started = time.monotonic()
    assert mistri_locks.hold("job", ttl=30, wait=0.3) is None
    assert 0.25 <= time.monotonic() - started < 5
    threading.Timer(0.2, first.release).start()
    second = mistri_locks.hold("job", ttl=30, wait=math.inf)
    assert second is not None
    second.release()


def test_an_aborted_hold_signal_ends_its_wait() -> None:
    locks = mistri_locks.Memory()
    held = locks.new_owner().hold("job2", ttl=30)
    assert held is not None
    stop = mistri_locks.AbortSignal()
    threading.Timer(0.2, stop.abort, ("enough",)).start()
    started = time.monotonic()
    assert locks.hold("job2", ttl=30, wait=60, signal=stop) is None
    assert time.monotonic() - started < 5
    held.release()


def test_touch_is_callable_and_cheap() -> None:
    locks = mistri_locks.Memory()
    with locks.hold("job", ttl=30, progress_timeout=10, max_hold=60) as h:
        assert h is not None
        assert h.touch() is None
        started = time.perf_counter()
        for _ in range(10_000):
            h.touch()
        assert time.perf_counter() - started < 5
        assert not h.signal.aborted
    with locks.hold("plain", ttl=30) as h:
        assert h is not None
        h.touch()  # a no-op without a progress timeout


BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"wait": -1}, ValueError, "wait"),
    ({"wait": math.nan}, ValueError, "wait"),
    ({"wait": "1"}, TypeError, "wait"),
    ({"limit": 0}, ValueError, "limit"),
    ({"limit": -1}, ValueError, "limit"),
    ({"limit": 2**40}, ValueError, "limit"),
    ({"limit": "3"}, TypeError, "limit"),
    ({"limit": 2.0}, TypeError, "limit"),
    ({"limit": True}, TypeError, "limit"),
]

BAD_HOLD: list[tuple[dict[str, Any], type[Exception], str]] = BAD + [
    ({"max_hold": 0}, ValueError, "max_hold"),
    ({"max_hold": math.inf}, ValueError, "max_hold"),
    ({"progress_timeout": -1}, ValueError, "progress_timeout"),
    ({"progress_timeout": math.nan}, ValueError, "progress_timeout"),
    ({"progress_timeout": "2"}, TypeError, "progress_timeout"),
]


@pytest.mark.parametrize(("kwargs", "error", "names"), BAD)
def test_bad_acquire_arguments(kwargs: dict[str, Any], error: type[Exception], names: str) -> None:
    locks = mistri_locks.Memory()
    with pytest.raises(error, match=names):
        locks.acquire("k", 5, **kwargs)
    assert not locks.held("k")


@pytest.mark.parametrize(("kwargs", "error", "names"), BAD_HOLD)
def test_bad_hold_arguments(kwargs: dict[str, Any], error: type[Exception], names: str) -> None:
    locks = mistri_locks.Memory()
    forms: list[Callable[[], object]] = [
        lambda: locks.hold("k", ttl=5, **kwargs),
        lambda: mistri_locks.hold("k", ttl=5, **kwargs),  # nothing configured: still checked
    ]
    for form in forms:
        with pytest.raises(error, match=names):
            form()
    assert not locks.held("k")


def test_hold_arguments_are_one_list() -> None:
    locks = mistri_locks.Memory()
    with pytest.raises(TypeError, match=r"hold\(\) got an unexpected keyword argument 'nope'"):
        locks.hold("k", nope=1)
    with pytest.raises(TypeError, match=r"hold\(\) got an unexpected keyword argument 'nope'"):
        mistri_locks.hold("k", nope=1)
    # Positional arguments keep their places: key, ttl, heartbeat, stop_key.
    h = locks.hold("k", 5, 1, "stop:k")
    assert h is not None and h.key == "k"
    h.release()


# The child sets SIGINT's disposition first (a background shell starts its
# jobs with SIGINT ignored, and children inherit that); "waiting" is printed
# inside the try, so a SIGINT that lands before the wait still ends there.
WAITER = """
import math, signal, sys, mistri_locks
signal.signal(signal.SIGINT, signal.default_int_handler)
holder = mistri_locks.Memory()
waiter = holder.new_owner()
assert holder.acquire("job", 60)
try:
    print("waiting", flush=True)
    {call}
except KeyboardInterrupt:
    holder.release("job")
    # The interrupted waiter left the line: the lease is free for anyone.
    assert holder.new_owner().acquire("job", 60, wait=0)
    print("interrupted", flush=True)
    sys.exit(42)
print("returned", flush=True)
"""


@pytest.mark.parametrize("call", [
    'waiter.acquire("job", 60, wait=math.inf)',
    'waiter.acquire("job", 60, wait=600)',
    'waiter.hold("job", ttl=60, wait=600)',
])
def test_ctrl_c_interrupts_a_waiting_acquire(call: str) -> None:
    child = python_child(WAITER.format(call=call))
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "waiting"
        time.sleep(0.3)  # let it block
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=20)
        took = time.monotonic() - sent
        assert child.returncode == 42, (out, err)
        assert out.strip() == "interrupted"
        assert took < 5.0, f"took {took:.2f} s to notice Ctrl-C"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_waiting_acquire_releases_the_gil() -> None:
    holder = mistri_locks.Memory()
    waiter = holder.new_owner()
    assert holder.acquire("job", 30)
    ticks = 0
    done = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    try:
        assert waiter.acquire("job", 30, wait=0.5) is False
    finally:
        done.set()
        counter.join()
    assert ticks > 20, f"the other thread ran only {ticks} times in 0.5 s"


def test_asyncio_waiting_acquire_and_hold() -> None:
    async def main() -> None:
        holder = mistri_locks.Memory()
        waiter = holder.new_owner()
        assert await holder.acquire_async("job", 30)
        asyncio.get_running_loop().call_later(0.2, holder.release, "job")
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.ensure_future(tick())
        assert await waiter.acquire_async("job", 30, wait=20) is True
        assert ticks >= 5, "the loop kept running while the acquire waited"
        ticker.cancel()
        waiter.release("job")

        first = await holder.hold_async("h", ttl=30)
        assert first is not None
        asyncio.get_running_loop().call_later(0.2, first.release)
        async with holder.new_owner().hold_async("h", ttl=30, wait=20) as second:
            assert second is not None
        mistri_locks.configure(holder)
        async with mistri_locks.hold_async("h", ttl=30, wait=0) as third:
            assert third is not None

    asyncio.run(main())


def test_cancelling_a_task_ends_its_wait_and_frees_its_thread() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        # Two executor threads: both busy waiting until the cancel frees them.
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=2))
        holder = mistri_locks.Memory()
        assert holder.acquire("job", 30)
        waiters = [holder.new_owner() for _ in range(2)]
        hold_task = asyncio.ensure_future(waiters[0].hold_async("job", ttl=30, wait=math.inf))
        acquire_task = asyncio.ensure_future(waiters[1].acquire_async("job", 30, wait=math.inf))
        await asyncio.sleep(0.3)
        hold_task.cancel()
        acquire_task.cancel()
        for task in (hold_task, acquire_task):
            with pytest.raises(asyncio.CancelledError):
                await task
        # The lease was never released: only the cancel can free the threads.
        both = asyncio.gather(loop.run_in_executor(None, time.sleep, 0.01),
                              loop.run_in_executor(None, time.sleep, 0.01))
        await asyncio.wait_for(both, 10)
        holder.release("job")
        await asyncio.sleep(0.2)
        assert not holder.held("job"), "no cancelled waiter took the lease"

    asyncio.run(main())


def test_max_hold_ends_the_renewals_of_a_hung_holder() -> None:
    locks = mistri_locks.Memory()
    h = locks.hold("capped", ttl=0.6, heartbeat=0.1, max_hold=1.2)
    assert h is not None
    time.sleep(0.8)  # renewed past its first ttl
    assert not h.signal.aborted, h.signal.reason
    assert h.signal.wait(10)
    assert "max_hold" in (h.signal.reason or "")
    assert h.lost
    h.release()
    assert locks.stats()["lost_max_hold"] == 1


def test_progress_timeout_stops_a_stalled_hold_and_touch_keeps_it() -> None:
    locks = mistri_locks.Memory()
    h = locks.hold("stalled", ttl=3, heartbeat=0.1, progress_timeout=0.3)
    assert h is not None
    until = time.monotonic() + 0.9
    while time.monotonic() < until:
        h.touch()
        time.sleep(0.05)
    assert not h.signal.aborted, h.signal.reason
    assert h.signal.wait(10)
    assert "stalled" in (h.signal.reason or "")
    assert h.lost
    assert h.release() is True, "the lease was still there: release deletes it"
