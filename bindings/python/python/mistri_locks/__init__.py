"""Cross-process leases and stop flags.

A *lease* says "this is alive right now" and expires unless renewed; a
*flag* carries a one-bit request ("stop") between processes; a ``Hold``
keeps a lease renewed on a heartbeat, watches a stop flag, and trips an
``AbortSignal`` when asked to stop or when the lease is lost.

    import mistri_locks

    mistri_locks.configure(mistri_locks.Redis("redis://127.0.0.1:6379/0"))
    with mistri_locks.hold("nightly-report", ttl=60, heartbeat=10,
                           stop_key="stop:nightly-report") as h:
        while not h.signal.aborted:
            ...  # one unit of work

On the PostgreSQL a Django or Celery fleet already runs:
``mistri_locks.Postgres("postgres://app@db/app")`` (tables in the schema
``mistri_locks``, created on first use; ``Postgres.schema_sql()`` is the DDL).
A write can refuse a stale holder inside its own transaction with
``SELECT mistri_locks.fence_check(resource, fence)``.

(``hold`` returns None when the lease is held elsewhere or nothing is
configured: check for it before ``with`` in real code.)

Waiting for a busy lease: ``hold(..., wait=30)`` or
``locks.acquire(key, ttl, wait=math.inf)`` (woken by the release or
expiry; GIL-free, Ctrl-C interrupts it). ``limit=N`` shares a lease among N
holders; ``max_hold=`` and ``progress_timeout=`` (with ``Hold.touch()``)
guard against hung holders.

Names: ``Memory``, ``Redis``, ``Local`` and ``Postgres`` are ``Locks``:
owner handles on one backend.

Looking: ``locks.info(key)`` (a ``LeaseInfo`` dict, or None),
``locks.list(prefix="")`` (a ``Listing``: the live leases and raised flags,
what ``mistri-locks list`` shows), ``locks.active_holds()``,
``locks.stats()``. ``hold.release()`` says whether it deleted the lease;
``hold.release_outcome()`` says what happened (a ``ReleaseOutcome``).

Threads: the heartbeat runs on a Rust thread that never calls Python.
Callbacks registered with ``AbortSignal.on_abort`` and duck-typed ``signal=``
objects are called on a Python thread: the thread that calls ``abort()``, or,
when the heartbeat trips the signal (stop flag, lost lease), the package's
dispatcher thread ``mistri-locks-dispatch``.

Functions and tasks: ``@mistri_locks.leased("report:{account_id}", ttl=60)``
runs each call while holding the lease named from its arguments
(``current_lease()`` is the hold inside; ``Hold.checkpoint()`` raises
``Interrupted`` when stopped or lost; ``Conflict`` for
``on_conflict="raise"``). ``mistri_locks.integrations.celery``, ``mistri_locks.integrations.django``
and ``mistri_locks.integrations.dramatiq`` are imported only when asked for.

asyncio: ``async with mistri_locks.hold_async(key, ...) as h`` (``h`` is None
when the lease is held elsewhere), ``adapter.hold_async(...)``,
``await h.release_async()`` (or ``h.release_outcome_async()``),
``await signal.wait_async(timeout)``,
``signal.on_abort_async(cb)`` (``cb`` runs on the caller's loop and may be a
coroutine function), ``signal.cancel_task(task)``, and the seven operations
as ``adapter.acquire_async(...)`` etc. Nothing of it blocks the loop: see
``mistri_locks._aio``.
"""

from ._native import (
    FLAG_TTL,
    HEARTBEAT,
    LEASE_TTL,
    AbortSignal,
    BackendError,
    ConfigError,
    ConnectionError,
    Error,
    Hold,
    Local,
    Locks,
    Memory,
    Postgres,
    Redis,
    SystemResourceError,
    configure,
    hold,
    job_stop_key,
    locks,
    open,
)
from . import _dispatch as _dispatch  # noqa: F401  (atexit hook)
from ._aio import HoldContext, hold_async
from ._info import FlagInfo, HolderInfo, LeaseInfo, Listing, WaitingInfo
from ._leased import Conflict, Interrupted, current_lease, leased
from ._release import ReleaseOutcome

from importlib.metadata import PackageNotFoundError as _NotInstalled  # noqa: E402
from importlib.metadata import version as _dist_version  # noqa: E402

try:
    #: The installed distribution's version: the workspace Cargo.toml's.
    __version__: str = _dist_version("mistri-locks")
except _NotInstalled:  # imported from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "FLAG_TTL",
    "HEARTBEAT",
    "LEASE_TTL",
    "AbortSignal",
    "BackendError",
    "ConfigError",
    "Conflict",
    "ConnectionError",
    "Error",
    "FlagInfo",
    "Hold",
    "HolderInfo",
    "Interrupted",
    "LeaseInfo",
    "Listing",
    "WaitingInfo",
    "Local",
    "Locks",
    "Memory",
    "Postgres",
    "Redis",
    "ReleaseOutcome",
    "SystemResourceError",
    "configure",
    "current_lease",
    "hold",
    "hold_async",
    "job_stop_key",
    "HoldContext",
    "leased",
    "locks",
    "open",
]
