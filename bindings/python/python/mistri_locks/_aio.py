"""The asyncio face: ``hold_async``, ``*_async`` operations, waits, and
abort delivery onto an event loop.

Written in Python on purpose (not pyo3's ``experimental-async``): every
blocking call this face makes is already a GIL-free native call that the
core bounds (acquire and release by the adapter's I/O timeout), so running
it on the loop's default executor is exact, works on every Python the
package supports (3.9+) and on any asyncio loop (uvloop included), and
leaves no Rust thread touching Python or a loop. Waiting on a signal takes
no thread at all: an ``on_abort`` callback (run on a Python thread by the
native module's delivery) hands the wake-up to the loop with
``loop.call_soon_threadsafe``; nothing calls ``Future.set_result`` off the
loop's thread.

Cancellation rules (what a task can rely on):
- A blocking call that was started finishes on its thread even if the
  awaiting task is cancelled (threads cannot be interrupted). If what it
  produced would leak, it is undone there: an acquire that succeeds after
  its task was cancelled is released, a hold that starts after its task was
  cancelled is released. So a cancelled ``acquire_async``/``hold_async``
  leaves nothing held.
- A waiting acquire or hold (``wait=``) runs on an executor thread and
  ends as soon as its task is cancelled (``off_loop_waiting``): it leaves
  the line and frees the thread.
- ``async with hold_async(...)`` releases the lease when the block ends,
  also when the task is cancelled inside it (waiting in ``wait_async`` or
  anywhere else).

The native classes' ``*_async`` methods are one-line shims that call the
functions here (see ``bindings/python/src/aio.rs``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from typing import TYPE_CHECKING, Any, Callable, Generator, Optional, TypeVar, Union

if TYPE_CHECKING:
    from ._native import AbortSignal, Hold, Locks
    from ._release import ReleaseOutcome

T = TypeVar("T")

# Tasks started for coroutine abort callbacks: kept here until they finish
# (the loop only keeps weak references to tasks).
_callback_tasks: set[asyncio.Task[Any]] = set()


async def off_loop(call: Callable[[], T], undo: Optional[Callable[[T], object]] = None) -> T:
    """Runs the blocking ``call()`` on the loop's default executor.

    If the awaiting task is cancelled, the call still runs to its end on its
    thread; ``undo(result)`` is then run on a thread too (never on the loop),
    so that a result nobody will receive does not leak."""
    loop = asyncio.get_running_loop()
    lock = threading.Lock()
    abandoned = False
    delivered: list[T] = []

    def run() -> T:
        result = call()
        if undo is None:
            return result
        with lock:
            if not abandoned:
                delivered.append(result)
                return result
        undo(result)
        return result

    inner = loop.run_in_executor(None, run)
    try:
        return await asyncio.shield(inner)
    except asyncio.CancelledError:
        if undo is not None:
            with lock:
                abandoned = True
                late = list(delivered)
            if late:
                # The call finished just before the cancel: undo it off the loop.
                loop.run_in_executor(None, undo, late[0])
        raise


def _release_quietly(hold: Optional[Hold]) -> None:
    if hold is not None:
        hold.release()


async def off_loop_waiting(call: Callable[[AbortSignal], T],
                           undo: Optional[Callable[[T], object]] = None,
                           parent: Optional[AbortSignal] = None) -> T:
    """``off_loop`` for a call that may wait for a lease (``wait=``):
    ``call(cancel)`` gets a fresh signal that is aborted if the awaiting task
    is cancelled, which ends the wait on its thread at once (the native wait
    wakes on it and leaves the line), so a cancelled task frees its
    executor thread instead of waiting on for nobody. With ``parent``, the
    signal is derived from it (so the parent's abort ends the wait too)."""
    from ._native import AbortSignal

    cancel = AbortSignal() if parent is None else parent.derive()
    try:
        return await off_loop(functools.partial(call, cancel), undo)
    except asyncio.CancelledError:
        cancel.abort("the awaiting task was cancelled")
        raise


class HoldContext:
    """What ``hold_async`` returns: ``await`` it for a ``Hold`` (or None when
    the lease is held elsewhere or nothing is configured), or use it as
    ``async with ... as h`` to release the lease when the block ends (also
    on an exception or a cancellation of the task). With ``wait=``, the wait
    runs on an executor thread; cancelling the task ends it."""

    __slots__ = ("_start", "_hold", "_entered")

    def __init__(self, start: Callable[[AbortSignal], Optional[Hold]]) -> None:
        self._start = start
        self._hold: Optional[Hold] = None
        self._entered = False

    def __await__(self) -> Generator[Any, None, Optional[Hold]]:
        return off_loop_waiting(self._start, _release_quietly).__await__()

    async def __aenter__(self) -> Optional[Hold]:
        if self._entered:
            raise RuntimeError("a hold_async(...) context can be entered once")
        self._entered = True
        self._hold = await off_loop_waiting(self._start, _release_quietly)
        return self._hold

    async def __aexit__(self, *_exc: object) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            await release_hold(hold)

    def __repr__(self) -> str:
        return f"<mistri_locks.HoldContext hold={self._hold!r}>"


def _hold_starter(locks: Optional[Locks], args: tuple[Any, ...],
                  kwargs: Optional[dict[str, Any]]) -> Callable[[AbortSignal], Optional[Hold]]:
    from ._native import _hold

    kwargs = dict(kwargs or {})

    def start(cancel: AbortSignal) -> Optional[Hold]:
        return _hold(*args, _locks=locks, _cancel=cancel, **kwargs)

    return start


def hold_context(locks: Locks, args: tuple[Any, ...],
                 kwargs: Optional[dict[str, Any]]) -> HoldContext:
    """``Locks.hold_async``: the same arguments as ``Locks.hold``."""
    return HoldContext(_hold_starter(locks, args, kwargs))


def hold_async(key: str, *args: Any, **kwargs: Any) -> HoldContext:
    """``mistri_locks.hold`` for asyncio (the same arguments): acquires
    (off the loop) on the configured handle when awaited or entered. See
    ``HoldContext``."""
    return HoldContext(_hold_starter(None, (key, *args), kwargs))


async def release_hold(hold: Hold) -> bool:
    """``Hold.release_async``: ``Hold.release`` off the loop."""
    return await off_loop(hold.release)


async def release_hold_outcome(hold: Hold) -> ReleaseOutcome:
    """``Hold.release_outcome_async``: ``Hold.release_outcome`` off the loop."""
    return await off_loop(hold.release_outcome)


async def operation(bound: Callable[..., T], *args: Any) -> T:
    """The adapters' ``renew_async``, ``release_async``, ``held_async``,
    ``set_flag_async``, ``flag_async``, ``clear_flag_async``."""
    return await off_loop(functools.partial(bound, *args))


async def acquire(locks: Locks, key: str, ttl: Union[int, float],
                  wait: Optional[Union[int, float]] = None, limit: Optional[int] = None,
                  signal: Optional[AbortSignal] = None) -> bool:
    """``Locks.acquire_async``: a lease taken after the task was cancelled is
    released again; a waiting acquire ends when the task is cancelled."""

    def call(cancel: AbortSignal) -> bool:
        return locks.acquire(key, ttl, wait, 1 if limit is None else limit, cancel)

    def undo(taken: bool) -> None:
        if taken:
            locks.release(key)

    return await off_loop_waiting(call, undo, signal)


def _to_loop(loop: asyncio.AbstractEventLoop, call: Callable[..., object], *args: Any) -> None:
    """Hands ``call(*args)`` to ``loop``'s thread; a closed loop has nobody
    left to tell."""
    try:
        loop.call_soon_threadsafe(call, *args)
    except RuntimeError:
        if not loop.is_closed():
            raise


async def signal_wait(signal: AbortSignal, timeout: Optional[float]) -> bool:
    """``AbortSignal.wait_async``; ``timeout`` was validated by the native
    shim (None: no limit)."""
    if signal.aborted:
        return True
    if timeout is not None and timeout <= 0:
        return False
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not woken.done():
            woken.set_result(None)

    handle = signal.on_abort(lambda _reason: _to_loop(loop, settle))
    try:
        if timeout is None:
            await woken
        else:
            await asyncio.wait_for(woken, timeout)
        return True
    except asyncio.TimeoutError:
        return signal.aborted
    finally:
        signal.remove_callback(handle)


def _run_callback(loop: asyncio.AbstractEventLoop, callback: Callable[[Optional[str]], object],
                  reason: Optional[str]) -> None:
    try:
        result = callback(reason)
    except Exception as exc:  # reported like an exception in a loop callback
        loop.call_exception_handler({
            "message": "exception in a mistri_locks abort callback",
            "exception": exc,
        })
        return
    if inspect.isawaitable(result):
        task = asyncio.ensure_future(result)
        _callback_tasks.add(task)
        task.add_done_callback(functools.partial(_callback_done, loop))


def _callback_done(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
    _callback_tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        loop.call_exception_handler({
            "message": "exception in a mistri_locks abort callback",
            "exception": task.exception(),
            "task": task,
        })


def signal_on_abort_async(signal: AbortSignal,
                          callback: Callable[[Optional[str]], object]) -> int:
    """``AbortSignal.on_abort_async``: ``callback(reason)`` runs on the
    running loop (scheduled with ``call_soon_threadsafe``); if it returns an
    awaitable (a coroutine function), that runs as a task on the loop."""
    if not callable(callback):
        raise TypeError(f"callback must be callable, got {type(callback).__name__}")
    loop = asyncio.get_running_loop()
    return signal.on_abort(lambda reason: _to_loop(loop, _run_callback, loop, callback, reason))


def _cancel(task: asyncio.Future[Any], reason: Optional[str]) -> None:
    if not task.done():
        message = "mistri_locks: aborted" + (f": {reason}" if reason else "")
        task.cancel(message)


def signal_cancel_task(signal: AbortSignal, task: Optional[asyncio.Future[Any]]) -> int:
    """``AbortSignal.cancel_task``: cancels ``task`` (default: the current
    one) on its own loop when the signal trips, with the reason in the
    cancellation message; the link goes away when the task finishes."""
    if task is None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("cancel_task() without a task must be called from a task")
    loop = task.get_loop()
    handle = signal.on_abort(lambda reason: _to_loop(loop, _cancel, task, reason))
    task.add_done_callback(lambda _task: signal.remove_callback(handle))
    return handle
