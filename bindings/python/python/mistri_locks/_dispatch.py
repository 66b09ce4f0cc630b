"""The dispatcher thread: delivers aborts that happen off Python threads.

When the heartbeat engine (a Rust thread, which never calls Python) trips a
signal, the ``on_abort`` callbacks of a ``mistri_locks.AbortSignal`` and the
``abort(reason)`` method of a duck-typed ``signal=`` object still have to run
somewhere. The native module queues them; this daemon thread waits for the
queue without holding the GIL and runs them. One thread per process, started
on first need (again in a forked child, which inherits no threads), stopped
at interpreter exit.
"""

from __future__ import annotations

import atexit
import os
import threading

from . import _native

_POLL = 0.25  # seconds; the wait is woken at once when work arrives

_lock = threading.Lock()
_thread: threading.Thread | None = None
_pid = 0


def ensure_running() -> None:
    """Starts the dispatcher in this process unless it runs already."""
    global _thread, _pid
    with _lock:
        if _thread is not None and _pid == os.getpid() and _thread.is_alive():
            return
        thread = threading.Thread(target=_run, name="mistri-locks-dispatch", daemon=True)
        thread.start()
        _thread, _pid = thread, os.getpid()


def _run() -> None:
    while _native._deliver_pending(_POLL):
        pass


def _stop() -> None:
    # Finish before the interpreter finalizes: a daemon thread coming back
    # from a GIL-free wait during finalization is not a clean exit.
    thread = _thread
    if thread is None or _pid != os.getpid():
        return
    _native._stop_dispatch()
    thread.join(timeout=2.0)


def _after_fork_in_child() -> None:
    global _lock, _thread
    _lock = threading.Lock()  # another thread may have held it at fork
    _thread = None


atexit.register(_stop)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
