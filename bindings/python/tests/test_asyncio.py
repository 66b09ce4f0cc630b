"""The asyncio face: hold_async, the *_async operations, wait_async, abort
callbacks on the loop, cancellation. Plain ``asyncio.run``, no plugin."""

from __future__ import annotations

import asyncio
import math
import threading
import time
import uuid
from typing import Any, Awaitable, Callable, Optional

import pytest

import mistri_locks


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 20))  # type: ignore[arg-type]


def key(name: str) -> str:
    return f"aio:{name}:{uuid.uuid4().hex[:8]}"


class Ticker:
    """Counts 10 ms ticks on the loop: if a call blocked the loop, the count
    stays low."""

    def __init__(self) -> None:
        self.ticks = 0
        self.task: Optional[asyncio.Task[None]] = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.ticks += 1

    def __enter__(self) -> "Ticker":
        self.task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        assert self.task is not None
        self.task.cancel()


def test_async_with_hold_async_holds_and_releases(backend) -> None:
    adapter = backend.adapter()
    mistri_locks.configure(adapter)
    k = key("with")

    async def main() -> None:
        async with mistri_locks.hold_async(k, ttl=5, heartbeat=1) as h:
            assert isinstance(h, mistri_locks.Hold)
            assert h.key == k and h.fence > 0
            assert adapter.held(k)
            async with mistri_locks.hold_async(k, ttl=5) as refused:
                assert refused is None, "held elsewhere: None, as hold() returns"
            async with backend.owner().hold_async(k, ttl=5) as other:
                assert other is None
        assert not adapter.held(k)

    run(main())


def test_hold_async_without_configuration_is_none() -> None:
    async def main() -> None:
        async with mistri_locks.hold_async("aio:none") as h:
            assert h is None
        assert await mistri_locks.hold_async("aio:none") is None
        with pytest.raises(ValueError, match="key"):
            await mistri_locks.hold_async("")

    run(main())


def test_awaited_hold_and_release_async(backend) -> None:
    adapter = backend.adapter()
    k = key("await")

    async def main() -> None:
        h = await adapter.hold_async(k, ttl=5, heartbeat=1, label="aio test")
        assert h is not None
        info = adapter.info(k)
        assert info is not None and info["holder"] == "aio test"
        assert await h.release_async() is True
        assert await h.release_async() is False
        assert not adapter.held(k)

    run(main())


def test_the_seven_operations_async(backend) -> None:
    a, b = backend.adapter(), backend.owner()
    k, f = key("ops"), key("flag")

    async def main() -> None:
        assert await a.acquire_async(k, 0.5) is True
        assert await b.acquire_async(k, 0.5) is False
        assert await a.renew_async(k, 5) is True
        assert await b.renew_async(k, 5) is False
        assert await b.held_async(k) is True
        assert await b.release_async(k) is False
        assert await a.release_async(k) is True
        assert await a.held_async(k) is False
        assert await a.flag_async(f) is False
        assert await b.set_flag_async(f) is None
        assert await a.flag_async(f) is True
        assert await a.clear_flag_async(f) is None
        assert await a.flag_async(f) is False
        await a.set_flag_async(f, 0.05)
        await asyncio.sleep(0.15)
        assert await a.flag_async(f) is False, "the ttl was passed through"
        with pytest.raises(ValueError, match="ttl"):
            await a.acquire_async(k, -1)
        with pytest.raises(TypeError):
            await a.held_async(3)  # type: ignore[arg-type]

    run(main())


def test_wait_async_times_out_and_wakes_without_blocking_the_loop() -> None:
    signal = mistri_locks.AbortSignal()

    async def main() -> None:
        with Ticker() as ticker:
            started = time.monotonic()
            assert await signal.wait_async(0.3) is False
            assert time.monotonic() - started >= 0.29
            assert ticker.ticks >= 10, "the loop kept running while waiting"
        assert await signal.wait_async(0) is False
        threading.Timer(0.1, signal.abort, ("from a thread",)).start()
        started = time.monotonic()
        assert await signal.wait_async() is True
        assert time.monotonic() - started < 1.0
        assert await signal.wait_async(0) is True

    run(main())


def test_wait_async_checks_its_timeout_like_wait() -> None:
    signal = mistri_locks.AbortSignal()
    for bad in (-1, math.nan):
        with pytest.raises(ValueError, match="timeout"):
            signal.wait_async(bad)
    with pytest.raises(TypeError):
        signal.wait_async("1")  # type: ignore[arg-type]

    async def main() -> bool:
        return await signal.wait_async(math.inf) or True

    threading.Timer(0.05, signal.abort).start()
    assert run(main()) is True


def test_a_stop_flag_wakes_wait_async_within_a_tick(backend) -> None:
    adapter, other = backend.adapter(), backend.owner()
    k = key("stop")

    async def main() -> None:
        async with adapter.hold_async(k, ttl=5, heartbeat=0.1, stop_key=k + ":stop") as h:
            assert h is not None
            await other.set_flag_async(k + ":stop", 10)
            started = time.monotonic()
            assert await h.signal.wait_async(5) is True
            assert time.monotonic() - started < 2.0
            assert "stop" in (h.signal.reason or "")
        assert not adapter.held(k)

    run(main())


def test_cancelling_the_task_inside_async_with_releases_the_lease(backend) -> None:
    adapter = backend.adapter()
    k = key("cancel")
    inside = threading.Event()

    async def worker() -> None:
        async with adapter.hold_async(k, ttl=30, heartbeat=1) as h:
            assert h is not None
            inside.set()
            await h.signal.wait_async()  # cancelled here

    async def main() -> None:
        task = asyncio.create_task(worker())
        while not inside.is_set():
            await asyncio.sleep(0.01)
        assert adapter.held(k)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not adapter.held(k), "released on the way out of the cancelled task"

    run(main())


def test_a_stop_flag_cancels_the_task(backend) -> None:
    adapter, other = backend.adapter(), backend.owner()
    k = key("canceltask")

    async def worker() -> None:
        async with adapter.hold_async(k, ttl=5, heartbeat=0.1, stop_key=k + ":stop") as h:
            assert h is not None
            h.signal.cancel_task()
            await asyncio.sleep(30)  # work that never looks at the signal

    async def main() -> None:
        task = asyncio.create_task(worker())
        await asyncio.sleep(0.2)
        assert adapter.held(k)
        other.set_flag(k + ":stop", 10)
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError) as raised:
            await task
        assert time.monotonic() - started < 2.0
        assert not adapter.held(k)
        assert task.cancelled()
        assert "stop" in str(raised.value) or raised.value.args == ()

    run(main())


def test_cancel_task_of_another_task_and_unlinking() -> None:
    signal = mistri_locks.AbortSignal()

    async def main() -> None:
        sleeper = asyncio.create_task(asyncio.sleep(30))
        signal.cancel_task(sleeper)
        finished = asyncio.create_task(asyncio.sleep(0))
        signal.cancel_task(finished)
        await finished
        await asyncio.sleep(0)
        threading.Thread(target=signal.abort, args=("shutdown",)).start()
        with pytest.raises(asyncio.CancelledError):
            await sleeper
        assert finished.done() and not finished.cancelled()

    run(main())
    with pytest.raises(RuntimeError):
        signal.cancel_task()  # no running task


def test_abort_callbacks_run_on_the_registering_loop() -> None:
    signal = mistri_locks.AbortSignal()
    heard: list[tuple[str, Optional[str], int]] = []

    async def main() -> None:
        loop_thread = threading.get_ident()
        done = asyncio.Event()

        def plain(reason: Optional[str]) -> None:
            heard.append(("plain", reason, threading.get_ident()))

        async def coroutine(reason: Optional[str]) -> None:
            await asyncio.sleep(0.01)
            heard.append(("coroutine", reason, threading.get_ident()))
            done.set()

        signal.on_abort_async(plain)
        signal.on_abort_async(coroutine)
        removed = signal.on_abort_async(plain)
        assert signal.remove_callback(removed)
        aborter = threading.Thread(target=signal.abort, args=("go",))
        aborter.start()
        aborter.join()
        assert heard == [], "not run on the aborting thread"
        await asyncio.wait_for(done.wait(), 5)
        assert sorted(heard) == [("coroutine", "go", loop_thread), ("plain", "go", loop_thread)]
        # Registered after the abort: scheduled on the loop, not run inline.
        signal.on_abort_async(plain)
        assert len(heard) == 2
        await asyncio.sleep(0.01)
        assert len(heard) == 3
        with pytest.raises(TypeError):
            signal.on_abort_async(3)  # type: ignore[arg-type]

    run(main())
    with pytest.raises(RuntimeError):
        signal.on_abort_async(print)  # no running loop


def test_abort_callbacks_from_the_heartbeat_reach_the_loop(backend) -> None:
    adapter, other = backend.adapter(), backend.owner()
    k = key("hb")

    async def main() -> None:
        loop_thread = threading.get_ident()
        heard: asyncio.Queue[tuple[Optional[str], int]] = asyncio.Queue()

        async def stopped(reason: Optional[str]) -> None:
            await heard.put((reason, threading.get_ident()))

        async with adapter.hold_async(k, ttl=5, heartbeat=0.1, stop_key=k + ":stop") as h:
            assert h is not None
            h.signal.on_abort_async(stopped)
            await other.set_flag_async(k + ":stop")
            reason, thread = await asyncio.wait_for(heard.get(), 5)
            assert "stop" in (reason or "") and thread == loop_thread

    run(main())


def _pause_writes(server: Any, ms: int) -> None:
    assert server.command("CLIENT", "PAUSE", str(ms), "WRITE") == "+OK"


@pytest.mark.parametrize("how", ["acquire_async", "hold_async"])
def test_a_cancelled_acquire_leaves_nothing_held(redis_backend, how: str) -> None:
    """The acquire is in flight (Redis paused) when its task is cancelled;
    the loop keeps running meanwhile, and what the thread then takes is
    released there."""
    adapter = redis_backend.adapter()
    k = key("inflight")

    async def main() -> None:
        start: Callable[[], Awaitable[Any]]
        if how == "acquire_async":
            start = lambda: adapter.acquire_async(k, 30)  # noqa: E731
        else:
            start = lambda: adapter.hold_async(k, ttl=30, heartbeat=10)  # noqa: E731

        async def attempt() -> Any:
            return await start()

        _pause_writes(redis_backend.server, 600)
        with Ticker() as ticker:
            task = asyncio.create_task(attempt())
            await asyncio.sleep(0.3)
            assert not task.done(), "the acquire is waiting for the paused server"
            assert ticker.ticks >= 10, "the loop was not blocked by it"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Let the pause end and the thread's acquire land before anyone
        # else competes for the key.
        await asyncio.sleep(0.6)
        other = redis_backend.owner()
        deadline = time.monotonic() + 5
        while not other.acquire(k, 5):
            assert time.monotonic() < deadline, "the cancelled acquire leaked a lease"
            await asyncio.sleep(0.05)

    run(main())
