"""``leased``: run a function (sync or ``async def``) while holding a lease,
``current_lease()``, and the two exceptions of the task faces,
``Conflict`` and ``Interrupted``.

The decorator is thin sugar over ``hold``: each call formats the key from
its bound arguments, starts a ``Hold`` (which renews the lease on the
heartbeat and watches the stop flag), runs the function with the hold as
``current_lease()``, and releases the lease when the function returns or
raises (an ``async def`` also when its task is cancelled). The Celery,
Django and Dramatiq faces (``mistri_locks.integrations.celery`` ...) reuse ``LeaseSpec``
so that their ``lease=`` option takes exactly these options.

Why a contextvar: a thread started inside the function, or an asyncio task
spawned from it, sees the hold of the call that started it (asyncio copies
the context into a task; ``contextvars.copy_context().run`` carries it into
a thread), while two calls running side by side never see each other's.

A backend that can't be reached when a call starts raises its
``ConnectionError`` (the function does not run), with a warning on the
``mistri_locks`` logger: a job queue that retries failed jobs runs it again
(RQ: enqueue with ``retry=Retry(max=…, interval=…)``).

Errors: bad options raise at decoration time (``TypeError`` for an unknown
option or a template naming a missing argument, ``ValueError`` for a bad
value); a template that cannot be formatted for one call's arguments fails
that call only (``ValueError``).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import string
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Mapping,
    Optional,
    TypeVar,
    Union,
    cast,
)

from ._native import (
    FLAG_TTL,
    HEARTBEAT,
    LEASE_TTL,
    ConfigError,
    ConnectionError,
    Error,
    Hold,
    Interrupted,
    Locks,
    _job_options,
    job_stop_key,
)
from ._native import locks as _configured_locks

if TYPE_CHECKING:
    from ._aio import HoldContext

F = TypeVar("F", bound=Callable[..., Any])

logger = logging.getLogger("mistri_locks")

#: ``on_conflict`` values every face accepts (the Celery face adds "retry").
CONFLICT_MODES = ("skip", "raise")

#: What ``locks=`` takes: a ``Locks``, a zero-argument callable returning one
#: (resolved at each call: lets a framework pick its backend lazily), or
#: None (the handle set with ``mistri_locks.configure``).
LocksSource = Union[Locks, Callable[[], Locks], None]


class Conflict(Error):
    """The lease was held elsewhere (``on_conflict="raise"``).

    ``key`` is the formatted key."""

    def __init__(self, key: str) -> None:
        # args are the constructor's, so that Celery's result backends
        # (pickle or JSON) rebuild the same exception.
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return f"lease {self.key!r} is held elsewhere"


_current: contextvars.ContextVar[Optional[Hold]] = contextvars.ContextVar(
    "mistri_locks.current_lease", default=None
)


def current_lease() -> Optional[Hold]:
    """The ``Hold`` of the innermost ``leased`` call (or ``LeasedTask``) in
    this context, or None outside one."""
    return _current.get()


def stop_job(job_id: str, *, locks: Optional[Locks] = None, ttl: float = FLAG_TTL) -> None:
    """Raises the stop flag of job ``job_id`` (``job_stop_key(job_id)``) for
    ``ttl`` seconds on ``locks`` (default: the configured handle)."""
    handle = locks if locks is not None else _configured_locks()
    if handle is None:
        raise ConfigError("stop: no backend: call mistri_locks.configure(...) or pass locks=")
    handle.stop_job(job_id, ttl)


def _template_fields(template: str, what: str) -> list[str]:
    """The argument names a key template uses (``{a}``, ``{a.b}``, ``{a[0]}``)."""
    names = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise ValueError(f"leased: {what} template {template!r} is malformed: {e}") from None
    for _, field, _, _ in parsed:
        if field is None:
            continue
        head = field.split(".", 1)[0].split("[", 1)[0]
        if head == "" or head.isdigit():
            raise ValueError(
                f"leased: {what} template {template!r} must name arguments ({{account_id}}), "
                "not positions ({} or {0})"
            )
        names.append(head)
    return names


class LeaseSpec:
    """The validated options of one ``leased`` function or leased task.

    ``fn`` is the function whose arguments the templates are formatted from
    (``signature`` overrides its signature: the Celery face drops ``self``
    of a bound task). ``modes`` are the accepted ``on_conflict`` strings."""

    OPTIONS = frozenset(
        {"key", "ttl", "heartbeat", "limit", "wait", "on_conflict", "locks", "stop_key"}
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        options: Mapping[str, Any],
        *,
        modes: tuple[str, ...] = CONFLICT_MODES,
        extra: frozenset[str] = frozenset(),
        signature: Optional[inspect.Signature] = None,
    ) -> None:
        unknown = sorted(set(options) - self.OPTIONS - extra)
        if unknown:
            known = ", ".join(sorted(self.OPTIONS | extra))
            raise TypeError(f"leased: unknown option(s) {', '.join(unknown)} (known: {known})")
        if "key" not in options:
            raise TypeError("leased: the key template is required")
        key = options["key"]
        if not isinstance(key, str) or not key:
            raise ValueError(f"leased: key must be a non-empty string template, got {key!r}")
        self.key = key
        # The numbers: checked, with their defaults (the heartbeat
        # min(HEARTBEAT, ttl / 3)), by the core's JobOptions, in its words.
        given = {n: options[n] for n in ("ttl", "heartbeat", "limit", "wait") if n in options}
        if given.get("wait", 0) is None:
            del given["wait"]  # None: do not wait
        try:
            checked = _job_options(**given)
        except (TypeError, ValueError) as e:
            raise type(e)(f"leased: {e}") from None
        self.ttl: float = checked["ttl"]
        self.heartbeat: float = checked["heartbeat"]
        self.limit: int = checked["limit"]
        self.wait: float = checked["wait"]
        on_conflict = options.get("on_conflict", "skip")
        if not callable(on_conflict) and on_conflict not in modes:
            raise ValueError(
                f"leased: on_conflict must be one of {', '.join(map(repr, modes))} or a callable, "
                f"got {on_conflict!r}"
            )
        self.on_conflict: Union[str, Callable[..., Any]] = on_conflict
        locks = options.get("locks")
        if locks is not None and not isinstance(locks, Locks) and not callable(locks):
            raise TypeError(f"leased: locks must be a Locks, a callable returning one, or None, got {locks!r}")
        self.locks: LocksSource = locks
        stop_key = options.get("stop_key", "{key}:stop")
        if stop_key is not None and (not isinstance(stop_key, str) or not stop_key):
            raise ValueError(f"leased: stop_key must be a non-empty template or None, got {stop_key!r}")
        self.stop_key: Optional[str] = stop_key

        self.signature = signature if signature is not None else inspect.signature(fn)
        params = self.signature.parameters
        self._var_keyword = next(
            (p.name for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD), None
        )
        names = set(params) - {self._var_keyword}
        for what, template in (("key", key), ("stop_key", stop_key)):
            if template is None:
                continue
            for name in _template_fields(template, what):
                if what == "stop_key" and name == "key":
                    continue  # {key}: the formatted lease key
                if name not in names and self._var_keyword is None:
                    raise TypeError(
                        f"leased: {what} template {template!r} names {name!r}, which "
                        f"{getattr(fn, '__qualname__', fn)!r} has no argument for "
                        f"(its arguments: {', '.join(names) or 'none'})"
                    )

    def arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by name, defaults applied (a ``**kwargs``
        parameter's entries are flattened in)."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        if self._var_keyword is not None:
            values.update(values.pop(self._var_keyword, {}))
        return values

    def keys(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, Optional[str]]:
        """The lease key and stop key of one call. A template that fails for
        these arguments raises ValueError (this call only)."""
        values = self.arguments(args, kwargs)
        try:
            key = self.key.format(**values)
            stop = None if self.stop_key is None else self.stop_key.format(**{**values, "key": key})
        except (KeyError, AttributeError, IndexError, TypeError, ValueError) as e:
            raise ValueError(f"leased: key template {self.key!r} failed for this call: {e!r}") from e
        if not key:
            raise ValueError(f"leased: key template {self.key!r} gave an empty key for this call")
        return key, stop

    def resolve_locks(self) -> Locks:
        """The handle to hold on; ConfigError when there is none."""
        source = self.locks
        handle = source() if callable(source) and not isinstance(source, Locks) else source
        if handle is None:
            handle = _configured_locks()
        if handle is None:
            raise ConfigError(
                "leased: no backend: call mistri_locks.configure(...) or pass locks="
            )
        return handle

    def _hold_args(self, stop_key: Optional[str]) -> dict[str, Any]:
        return {
            "ttl": self.ttl,
            "heartbeat": self.heartbeat,
            "stop_key": stop_key,
            "limit": self.limit,
            "wait": self.wait if self.wait > 0 else None,
        }

    def start(self, key: str, stop_key: Optional[str]) -> Optional[Hold]:
        """The hold for one call, or None when the lease is held elsewhere."""
        return self.resolve_locks().hold(key, **self._hold_args(stop_key))

    def warn_unreachable(self, fn: Callable[..., Any], key: str, error: BaseException) -> None:
        """The warning of a call whose backend could not be reached at start."""
        logger.warning(
            "mistri_locks: %s: the lease backend is unreachable at start (%s); the call fails "
            "without running (lease %r); a job queue that retries runs it again",
            getattr(fn, "__qualname__", fn), error, key,
        )

    def start_async(self, key: str, stop_key: Optional[str]) -> HoldContext:
        return self.resolve_locks().hold_async(key, **self._hold_args(stop_key))


def _release_after(hold: Hold, failed: bool) -> None:
    """Releases; a release error is raised unless the function already
    failed (its own exception is the one the caller must see)."""
    try:
        hold.release()
    except Error:
        if not failed:
            raise


def run_held(hold: Hold, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """Runs ``fn`` with ``hold`` as ``current_lease()``, then releases it."""
    token = _current.set(hold)
    try:
        result = fn(*args, **kwargs)
    except BaseException:
        _current.reset(token)
        _release_after(hold, failed=True)
        raise
    _current.reset(token)
    _release_after(hold, failed=False)
    return result


def leased(
    key: str,
    *,
    ttl: float = LEASE_TTL,
    heartbeat: Optional[float] = None,
    limit: int = 1,
    wait: float = 0,
    on_conflict: Union[str, Callable[..., Any]] = "skip",
    locks: LocksSource = None,
    stop_key: Optional[str] = "{key}:stop",
) -> Callable[[F], F]:
    """Runs each call of the decorated function while holding a lease.

    ``key`` (and ``stop_key``) are ``str.format`` templates filled from the
    call's arguments by name (``"report:{account_id}"``); ``stop_key`` may
    also use ``{key}``, the formatted lease key (default ``"{key}:stop"``:
    ``mistri-locks stop report:42:stop`` stops the call holding
    ``report:42``). ``ttl``/``heartbeat``/``limit``/``wait`` are those of
    ``hold`` (``heartbeat`` defaults to min(HEARTBEAT, ttl/3)); ``wait=0``
    tries once.

    When the lease is held elsewhere, ``on_conflict`` decides: ``"skip"``
    returns None without running the function, ``"raise"`` raises
    ``Conflict``, a callable is called with the function's arguments and
    its result returned instead (awaited if the function is async and the
    result awaitable).

    Inside the function, ``current_lease()`` is the ``Hold``; call
    ``current_lease().checkpoint()`` between units of work to stop when
    asked (``Interrupted``). The lease is released when the function
    returns or raises, and for ``async def`` also when its task is
    cancelled. ``locks``: a ``Locks``, a callable returning one, or None
    (the configured handle).
    """
    options: dict[str, Any] = {
        "key": key,
        "ttl": ttl,
        "limit": limit,
        "wait": wait,
        "on_conflict": on_conflict,
        "locks": locks,
        "stop_key": stop_key,
    }
    if heartbeat is not None:
        options["heartbeat"] = heartbeat

    def decorate(fn: F) -> F:
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise TypeError(
                "leased: a generator's body runs after the call returns, outside the lease; "
                "decorate the function that consumes it"
            )
        spec = LeaseSpec(fn, options)
        if inspect.iscoroutinefunction(fn):
            return cast(F, _async_wrapper(fn, spec))
        return cast(F, _sync_wrapper(fn, spec))

    return decorate


def _conflict(spec: LeaseSpec, key: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    if spec.on_conflict == "raise":
        raise Conflict(key)
    if callable(spec.on_conflict):
        return spec.on_conflict(*args, **kwargs)
    return None


def _sync_wrapper(fn: Callable[..., Any], spec: LeaseSpec) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        key, stop_key = spec.keys(args, kwargs)
        try:
            hold = spec.start(key, stop_key)
        except ConnectionError as e:
            spec.warn_unreachable(fn, key, e)
            raise
        if hold is None:
            return _conflict(spec, key, args, kwargs)
        return run_held(hold, fn, args, kwargs)

    call.lease_spec = spec  # type: ignore[attr-defined]
    return call


def _async_wrapper(fn: Callable[..., Awaitable[Any]], spec: LeaseSpec) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> Any:
        key, stop_key = spec.keys(args, kwargs)
        # hold_async's context releases on return, raise and cancellation,
        # off the loop (see _aio.py).
        async with spec.start_async(key, stop_key) as hold:
            if hold is None:
                result = _conflict(spec, key, args, kwargs)
                return await result if inspect.isawaitable(result) else result
            token = _current.set(hold)
            try:
                return await fn(*args, **kwargs)
            finally:
                _current.reset(token)

    call.lease_spec = spec  # type: ignore[attr-defined]
    return call


__all__ = ["Conflict", "Interrupted", "LeaseSpec", "current_lease", "leased"]
