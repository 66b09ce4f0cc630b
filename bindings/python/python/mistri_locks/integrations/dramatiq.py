"""Dramatiq actors that run while holding a lease, and a stop by message id.

    import dramatiq, mistri_locks
    from mistri_locks.integrations.dramatiq import Leased

    broker.add_middleware(Leased())          # before the actors are declared

    @dramatiq.actor(lease={"key": "report:{account_id}", "ttl": 60},
                    throws=(mistri_locks.Interrupted,))
    def nightly_report(account_id):
        lease = mistri_locks.current_lease()
        ...
        lease.checkpoint()

    mistri_locks.integrations.dramatiq.stop(message.message_id)   # from any process

``lease=`` takes the options of ``mistri_locks.leased`` (checked when the
actor is declared). The middleware starts the hold in
``before_process_message``, on the worker thread that then runs the actor,
and releases it in ``after_process_message`` (or ``after_skip_message``).
When the lease is held elsewhere: ``"skip"`` skips the message (acked, not
retried), ``"raise"`` fails it with ``LeaseConflict`` (a ``Conflict``) so that Dramatiq's own
``Retries`` middleware retries it with its backoff, a callable is called
with the message's arguments and the message is then skipped.

A backend that can't be reached when the message starts
(``mistri_locks.ConnectionError``) fails the message with ``LeaseFailed``
and a warning in the worker's log, whatever ``on_conflict`` says, so that
Dramatiq's ``Retries`` middleware retries it with its backoff (bounded by
the actor's ``max_retries``): the message is not lost.

Each message watches the job stop key ``stop_key(message_id)`` (the
core's, the same in every face, see ``mistri_locks.integrations.celery``); a ``stop_key`` option is refused
at declaration. Unlike Dramatiq's
``ConcurrentRateLimiter`` (no owner, a fixed TTL), the lease is renewed
while the actor runs and is owned: a stale worker can't release a new
holder's lease.
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any, Optional

import dramatiq
from dramatiq.logging import get_logger
from dramatiq.middleware import MiddlewareError, SkipMessage

from .._leased import Conflict, LeaseSpec, _current, stop_job
from .._native import job_stop_key
from .._native import FLAG_TTL, ConnectionError, Error, Hold, Locks

#: The stop flag a leased message watches (the core's job stop key).
stop_key = job_stop_key


def stop(message_id: str, *, locks: Optional[Locks] = None, ttl: float = FLAG_TTL) -> None:
    """Asks the leased message ``message_id`` to stop: its next
    ``checkpoint()`` raises ``Interrupted(reason="stopped")``."""
    stop_job(message_id, locks=locks, ttl=ttl)


# Dramatiq's broker logs and swallows any exception a middleware hook
# raises, except a MiddlewareError: without these, a message whose lease
# can't be had would run unleased, and bad options would pass declaration.
class LeaseConflict(Conflict, MiddlewareError):  # type: ignore[misc, unused-ignore]
    """``Conflict`` as Dramatiq lets it through: the message fails (and
    Dramatiq's ``Retries`` middleware retries it)."""


class LeaseFailed(MiddlewareError):  # type: ignore[misc, unused-ignore]
    """The lease could not be started (the backend failed, or the key
    template failed for this message's arguments); ``__cause__`` says why.
    The message fails, and is retried like any failure."""


class LeaseOptionsTypeError(MiddlewareError, TypeError):  # type: ignore[misc, unused-ignore]
    """A bad ``lease=`` option (a TypeError), raised at declaration."""


class LeaseOptionsValueError(MiddlewareError, ValueError):  # type: ignore[misc, unused-ignore]
    """A bad ``lease=`` value (a ValueError), raised at declaration."""


class Leased(dramatiq.Middleware):  # type: ignore[misc, unused-ignore]
    """Holds the lease an actor's ``lease=`` option names while each of its
    messages is processed. ``locks``: the backend for actors whose options
    name none (default: the configured handle)."""

    def __init__(self, locks: Optional[Locks] = None) -> None:
        self.locks = locks
        self._specs: dict[str, LeaseSpec] = {}
        self._held: dict[str, tuple[Hold, contextvars.Token[Optional[Hold]]]] = {}
        self._mutex = threading.Lock()
        self.logger = get_logger(__name__, type(self))  # type: ignore[no-untyped-call, unused-ignore]

    @property
    def actor_options(self) -> set[str]:
        return {"lease"}

    def before_declare_actor(self, broker: Any, actor: Any) -> None:
        options = actor.options.get("lease")
        if options is None:
            return
        if not isinstance(options, dict):
            raise LeaseOptionsTypeError(f"Leased: lease= must be a dict of options, got {options!r}")
        if "stop_key" in options:
            raise LeaseOptionsTypeError(
                f"Leased: {actor.actor_name}: lease option 'stop_key' is not honoured: each message "
                "watches the job stop key mistri_locks.integrations.dramatiq.stop_key(message_id)"
            )
        if self.locks is not None and "locks" not in options:
            options = {**options, "locks": self.locks}
        try:
            self._specs[actor.actor_name] = LeaseSpec(actor.fn, options)
        except TypeError as e:
            raise LeaseOptionsTypeError(str(e)) from None
        except ValueError as e:
            raise LeaseOptionsValueError(str(e)) from None

    def before_process_message(self, broker: Any, message: Any) -> None:
        spec = self._specs.get(message.actor_name)
        if spec is None:
            return
        try:
            key, _ = spec.keys(tuple(message.args), message.kwargs)
            hold = spec.start(key, job_stop_key(message.message_id))
        except ConnectionError as e:
            retries = message.options.get("retries", 0)
            self.logger.warning(
                "mistri_locks: %s (message %s): the lease backend is unreachable at start (%s); "
                "the message fails and Dramatiq's Retries retries it (retries so far: %d)",
                message.actor_name, message.message_id, e, retries,
            )
            raise LeaseFailed(f"lease for {message.actor_name}: {e}") from e
        except Exception as e:
            raise LeaseFailed(f"lease for {message.actor_name}: {e}") from e
        if hold is None:
            if spec.on_conflict == "raise":
                raise LeaseConflict(key)
            if callable(spec.on_conflict):
                spec.on_conflict(*message.args, **message.kwargs)
            raise SkipMessage(f"lease {key!r} is held elsewhere")
        # The worker thread that runs this hook runs the actor next.
        token = _current.set(hold)
        with self._mutex:
            self._held[message.message_id] = (hold, token)

    def _release(self, message: Any, failed: bool) -> None:
        with self._mutex:
            entry = self._held.pop(message.message_id, None)
        if entry is None:
            return
        hold, token = entry
        _current.reset(token)
        try:
            hold.release()
        except Error:
            if not failed:
                raise

    def after_process_message(
        self, broker: Any, message: Any, *, result: Any = None, exception: Optional[BaseException] = None
    ) -> None:
        self._release(message, failed=exception is not None)

    def after_skip_message(self, broker: Any, message: Any) -> None:
        self._release(message, failed=True)


__all__ = [
    "LeaseConflict",
    "LeaseFailed",
    "LeaseOptionsTypeError",
    "LeaseOptionsValueError",
    "Leased",
    "stop",
    "stop_key",
]
