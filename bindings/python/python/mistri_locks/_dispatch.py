"""The dispatcher thread: delivers aborts that happen off Python threads.

When the heartbeat engine (a Rust thread, which never calls Python) trips a
signal, the ``on_abort`` callbacks of a ``mistri_locks.AbortSignal`` and the
``abort(reason)`` method of a duck-typed ``signal=`` object still have to run
somewhere. The core's delivery queue (``mistri_locks::delivery``) holds them;
this daemon thread waits for it without holding the GIL and runs them. The
core says when to start one: once per process, again in a forked child
(which inherits no threads). It is stopped at interpreter exit.
"""

from __future__ import annotations

import atexit
import threading

from . import _native

_POLL = 0.25  # seconds; the wait is woken at once when work arrives

_thread: threading.Thread | None = None


def start() -> None:
    """Starts this process's dispatcher (called by the native module)."""
    global _thread
    _thread = threading.Thread(target=_run, name="mistri-locks-dispatch", daemon=True)
    _thread.start()


def _run() -> None:
    while _native._deliver_pending(_POLL):
        pass


def _stop() -> None:
    # Finish before the interpreter finalizes: a daemon thread coming back
    # from a GIL-free wait during finalization is not a clean exit. (A
    # parent's thread, seen in a forked child, is not alive there.)
    thread = _thread
    if thread is None or not thread.is_alive():
        return
    _native._stop_dispatch()
    thread.join(timeout=2.0)


atexit.register(_stop)
