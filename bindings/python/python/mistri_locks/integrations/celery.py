"""Celery tasks that run while holding a lease, and a stop by task id.

    from mistri_locks.integrations.celery import LeasedTask

    @app.task(base=LeasedTask, bind=True,
              lease={"key": "report:{account_id}", "ttl": 60, "on_conflict": "retry"})
    def nightly_report(self, account_id):
        lease = mistri_locks.current_lease()
        for batch in batches(account_id):
            lease.checkpoint()          # Interrupted when stopped or lost
            write(batch, fence=lease.fence)

    mistri_locks.integrations.celery.stop(result.id)  # from any process

``lease=`` takes the options of ``mistri_locks.leased`` (``key``, ``ttl``,
``heartbeat``, ``limit``, ``wait``, ``on_conflict``, ``locks``; the key is
formatted from the task's arguments) plus, for ``on_conflict="retry"``,
``countdown`` (seconds before the retry; default: the ttl, the longest a
dead holder can block the key) and ``max_retries`` (default: no limit, as
the lease always frees within its ttl; Celery counts these retries in
``request.retries`` with any others). Bad options raise when Celery
creates the task class, and so does ``stop_key``: a task watches its
job stop key ``stop_key(task id)``, never a template of its own.

A backend that can't be reached when the task starts
(``mistri_locks.ConnectionError``) does not lose the job, whatever
``on_conflict`` says: the task is retried after ``countdown`` seconds, at
most ``max_retries`` times (default: the task's own ``max_retries``,
Celery's 3), with a warning in the task's log; the last attempt fails
with the ``ConnectionError``.

Eager mode (``task_always_eager``, or ``task.apply()``): Celery would run
a retry at once, inside the call, ignoring the countdown. Instead a busy
key under ``"retry"`` raises ``Conflict`` and an unreachable backend its
``ConnectionError``, to the caller, on the first attempt.

Each task call watches the job stop key ``stop_key(task_id)``, built by
the core (docs/PROTOCOL.md, "Jobs") as for ActiveJob and Sidekiq job ids
in Ruby, so ``stop(task_id)`` here, ``MistriLocks::Job.stop(id)`` in Ruby
and ``mistri-locks stop`` on that key are the same act.

Prefork: the hold is started inside the task call, in the pool child that
runs it; nothing of it exists before the fork. A child killed by
``kill -9``, a hard ``time_limit`` or ``revoke(terminate=True)`` stops
renewing with it, and its lease lapses within the ttl. Configure the
backend at import of the app module (a handle created before the fork
reconnects in each child) or in ``worker_process_init``.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, Optional

from celery import Task  # type: ignore[import-untyped, import-not-found, unused-ignore]

from celery.utils.log import get_task_logger  # type: ignore[import-untyped, import-not-found, unused-ignore]

from .._leased import Conflict, LeaseSpec, run_held, stop_job
from .._native import job_stop_key
from .._native import FLAG_TTL, ConnectionError, Locks

logger = get_task_logger(__name__)

_CELERY_OPTIONS = frozenset({"countdown", "max_retries"})

#: Celery's ``max_retries`` for "no limit" is None, which ``Task.retry``
#: reads as "the task's own setting"; this stands for no limit instead.
_NO_LIMIT = 2**31 - 1


def stop_key(task_id: str) -> str:
    """The stop flag a leased task with this id watches (the core's job stop
    key, ``mistri_locks.job_stop_key``)."""
    return job_stop_key(task_id)


def stop(task_id: str, *, locks: Optional[Locks] = None, ttl: float = FLAG_TTL) -> None:
    """Asks the leased task ``task_id`` to stop: raises its stop flag (for
    ``ttl`` seconds) on ``locks`` (default: the configured handle). The
    task's hold trips within a tick (sooner by push), and its next
    ``checkpoint()`` raises ``Interrupted(reason="stopped")``. A task that
    has not started yet sees the flag when it starts, while it is up."""
    stop_job(task_id, locks=locks, ttl=ttl)


def _run_signature(cls: type) -> tuple[Any, inspect.Signature]:
    """The task function and the signature its arguments arrive in (a
    bound task's ``self`` is not among them)."""
    run = inspect.getattr_static(cls, "run")
    if isinstance(run, staticmethod):
        fn = run.__func__
        return fn, inspect.signature(fn)
    signature = inspect.signature(run)
    params = list(signature.parameters.values())[1:]
    return run, signature.replace(parameters=params)


class LeasedTask(Task):  # type: ignore[misc]
    """A Celery task base class: each run holds the lease ``lease=`` names
    (see the module's doc). Without ``lease=`` it is a plain task."""

    #: The lease options (set by ``@app.task(base=LeasedTask, lease={...})``).
    lease: ClassVar[Optional[dict[str, Any]]] = None
    _lease_spec: ClassVar[Optional[LeaseSpec]] = None
    _lease_countdown: ClassVar[float] = 0.0
    _lease_max_retries: ClassVar[int] = _NO_LIMIT
    _lease_backend_retries: ClassVar[Optional[int]] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A class that sets lease= or defines run (the one @app.task makes
        # from a function, also under a base class that set lease=) gets
        # its own spec, checked against its own run's arguments.
        options = getattr(cls, "lease", None)
        if options is None or ("lease" not in cls.__dict__ and "run" not in cls.__dict__):
            return
        if not isinstance(options, dict):
            raise TypeError(f"LeasedTask: lease= must be a dict of options, got {options!r}")
        if "stop_key" in options:
            raise TypeError(
                "LeasedTask: lease option 'stop_key' is not honoured: each task call watches "
                "the job stop key mistri_locks.integrations.celery.stop_key(task_id)"
            )
        fn, signature = _run_signature(cls)
        spec = LeaseSpec(
            fn, options, modes=("skip", "raise", "retry"), extra=_CELERY_OPTIONS, signature=signature
        )
        countdown = options.get("countdown", spec.ttl)
        if isinstance(countdown, bool) or not isinstance(countdown, (int, float)) or not countdown >= 0:
            raise ValueError(f"LeasedTask: countdown must be seconds >= 0, got {countdown!r}")
        max_retries = options.get("max_retries")
        if max_retries is not None and (isinstance(max_retries, bool) or not isinstance(max_retries, int)):
            raise ValueError(f"LeasedTask: max_retries must be an int or None, got {max_retries!r}")
        cls._lease_spec = spec
        cls._lease_countdown = float(countdown)
        cls._lease_max_retries = _NO_LIMIT if max_retries is None else max_retries
        cls._lease_backend_retries = max_retries

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        spec = type(self)._lease_spec
        if spec is None:
            return super().__call__(*args, **kwargs)
        key, _ = spec.keys(args, kwargs)
        task_id = getattr(self.request, "id", None)
        eager = bool(getattr(self.request, "is_eager", False))
        try:
            hold = spec.start(key, stop_key(task_id) if task_id else None)
        except ConnectionError as e:
            if eager:
                raise
            limit = type(self)._lease_backend_retries
            if limit is None:
                limit = self.max_retries
            retries = getattr(self.request, "retries", 0)
            countdown = self._lease_countdown
            if limit is not None and retries >= limit:
                logger.warning(
                    "mistri_locks: %s[%s]: the lease backend is unreachable at start (%s); "
                    "no retry left (max_retries=%d): the task fails", self.name, task_id, e, limit,
                )
            else:
                logger.warning(
                    "mistri_locks: %s[%s]: the lease backend is unreachable at start (%s); "
                    "retry %d of %s in %.3g s", self.name, task_id, e, retries + 1,
                    "unlimited" if limit is None else limit, countdown,
                )
            raise self.retry(exc=e, countdown=countdown, max_retries=limit)
        if hold is None:
            if spec.on_conflict == "retry":
                if eager:
                    # Celery runs an eager retry at once, recursively,
                    # ignoring the countdown: refuse instead.
                    raise Conflict(key)
                raise self.retry(
                    countdown=self._lease_countdown, max_retries=self._lease_max_retries
                )
            if spec.on_conflict == "raise":
                raise Conflict(key)
            if callable(spec.on_conflict):
                return spec.on_conflict(*args, **kwargs)
            return None
        return run_held(hold, super().__call__, args, kwargs)


__all__ = ["LeasedTask", "stop", "stop_key"]
