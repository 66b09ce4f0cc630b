"""Type stubs of the native module; checked against it by mypy stubtest."""

import os
import pathlib
from types import TracebackType
import asyncio
import builtins
from typing import Any, Callable, Coroutine, Final, Optional, Protocol, Union, final

from typing_extensions import Self, disjoint_base

from ._aio import HoldContext
from ._info import LeaseInfo, Listing
from ._release import ReleaseOutcome

__all__ = [
    "Locks",
    "Memory",
    "Redis",
    "Local",
    "Postgres",
    "Hold",
    "AbortSignal",
    "open",
    "postgres_url",
    "mysql_url",
    "job_stop_key",
    "_job_options",
    "configure",
    "locks",
    "hold",
    "_hold",
    "_deliver_pending",
    "_stop_dispatch",
    "_operator_handle",
    "_operator_options",
    "_OperatorOptions",
    "_stats_prometheus",
    "_OPERATOR_MAX_BODY",
    "Error",
    "ConfigError",
    "ConnectionError",
    "BackendError",
    "SystemResourceError",
    "Interrupted",
    "job_stop_key",
    "LEASE_TTL",
    "HEARTBEAT",
    "FLAG_TTL",
]

LEASE_TTL: Final[int]
HEARTBEAT: Final[int]
FLAG_TTL: Final[int]

_Seconds = Union[int, float]

class _SupportsAbort(Protocol):
    def abort(self, reason: Optional[str], /) -> Any: ...

class Error(Exception):
    """Base class of every error mistri_locks raises for operational trouble."""

class ConfigError(Error):
    """The adapter could not be set up as asked (e.g. an unparsable Redis URL)."""

class ConnectionError(Error, builtins.ConnectionError):
    """The backend could not be reached or stopped answering."""

class BackendError(Error):
    """The backend answered, but with an error."""

class SystemResourceError(Error, OSError):
    """The operating system refused something mistri_locks needs."""

class Interrupted(Error):
    """Raised by ``Hold.checkpoint()``: the work should stop here."""

    reason: str
    key: str
    detail: Optional[str]
    flag: Optional[str]
    cause: Optional[str]
    def __init__(
        self,
        reason: str,
        key: str = "",
        detail: Optional[str] = None,
        flag: Optional[str] = None,
        cause: Optional[str] = None,
    ) -> None: ...

@final
class AbortSignal:
    def __new__(cls) -> Self: ...
    def abort(self, reason: Optional[str] = None) -> bool: ...
    @property
    def aborted(self) -> bool: ...
    @property
    def reason(self) -> Optional[str]: ...
    def on_abort(self, callback: Callable[[Optional[str]], object]) -> int: ...
    def remove_callback(self, handle: int) -> bool: ...
    def wait(self, timeout: Optional[_Seconds] = None) -> bool: ...
    def derive(self) -> AbortSignal: ...
    def wait_async(self, timeout: Optional[_Seconds] = None) -> Coroutine[Any, Any, bool]: ...
    def on_abort_async(self, callback: Callable[[Optional[str]], object]) -> int: ...
    def cancel_task(self, task: Optional[asyncio.Future[Any]] = None) -> int: ...

@final
class Hold:
    def release(self) -> bool: ...
    def release_outcome(self) -> ReleaseOutcome: ...
    def release_async(self) -> Coroutine[Any, Any, bool]: ...
    def release_outcome_async(self) -> Coroutine[Any, Any, ReleaseOutcome]: ...
    def touch(self) -> None: ...
    def checkpoint(self) -> None: ...
    @property
    def key(self) -> str: ...
    @property
    def fence(self) -> int: ...
    @property
    def lost(self) -> bool: ...
    @property
    def signal(self) -> Union[AbortSignal, _SupportsAbort]: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        *_exc: Union[type[BaseException], BaseException, TracebackType, None],
    ) -> bool: ...

@disjoint_base
class Locks:
    def acquire(
        self,
        key: str,
        ttl: _Seconds,
        wait: Optional[_Seconds] = None,
        limit: int = ...,
        signal: Optional[AbortSignal] = None,
    ) -> bool: ...
    def renew(self, key: str, ttl: _Seconds) -> bool: ...
    def release(self, key: str) -> bool: ...
    def held(self, key: str) -> bool: ...
    def info(self, key: str) -> Optional[LeaseInfo]: ...
    def list(self, prefix: str = "") -> Listing: ...
    def active_holds(self) -> int: ...
    def set_flag(self, key: str, ttl: _Seconds = ...) -> None: ...
    def stop_holders(self, key: str, ttl: _Seconds = ...) -> builtins.list[str]: ...
    def stop_job(self, job_id: str, ttl: _Seconds = ...) -> str: ...
    def flag(self, key: str) -> bool: ...
    def clear_flag(self, key: str) -> None: ...
    def fence(self, key: str) -> Optional[int]: ...
    def break_lease(self, key: str) -> bool: ...
    def hold(
        self,
        key: str,
        ttl: _Seconds = ...,
        heartbeat: _Seconds = ...,
        stop_key: Optional[str] = None,
        signal: Union[AbortSignal, _SupportsAbort, None] = None,
        safety_margin: Optional[_Seconds] = None,
        label: Optional[str] = None,
        wait: Optional[_Seconds] = None,
        limit: int = ...,
        max_hold: Optional[_Seconds] = None,
        progress_timeout: Optional[_Seconds] = None,
    ) -> Optional[Hold]: ...
    def acquire_async(
        self,
        key: str,
        ttl: _Seconds,
        wait: Optional[_Seconds] = None,
        limit: Optional[int] = None,
        signal: Optional[AbortSignal] = None,
    ) -> Coroutine[Any, Any, bool]: ...
    def renew_async(self, key: str, ttl: _Seconds) -> Coroutine[Any, Any, bool]: ...
    def release_async(self, key: str) -> Coroutine[Any, Any, bool]: ...
    def held_async(self, key: str) -> Coroutine[Any, Any, bool]: ...
    def set_flag_async(self, key: str, ttl: Optional[_Seconds] = None) -> Coroutine[Any, Any, None]: ...
    def flag_async(self, key: str) -> Coroutine[Any, Any, bool]: ...
    def clear_flag_async(self, key: str) -> Coroutine[Any, Any, None]: ...
    def hold_async(
        self,
        key: str,
        ttl: _Seconds = ...,
        heartbeat: _Seconds = ...,
        stop_key: Optional[str] = None,
        signal: Union[AbortSignal, _SupportsAbort, None] = None,
        safety_margin: Optional[_Seconds] = None,
        label: Optional[str] = None,
        wait: Optional[_Seconds] = None,
        limit: int = ...,
        max_hold: Optional[_Seconds] = None,
        progress_timeout: Optional[_Seconds] = None,
    ) -> HoldContext: ...
    @property
    def label(self) -> str: ...
    @label.setter
    def label(self, label: Optional[str]) -> None: ...
    def stats(self) -> dict[str, Union[int, float, None]]: ...
    def on_event(self, callback: Callable[[dict[str, Any]], object]) -> int: ...
    def remove_event_hook(self, handle: int) -> bool: ...

@final
class Memory(Locks):
    def __new__(cls, label: Optional[str] = None) -> Self: ...
    def new_owner(self) -> Memory: ...

@final
class Redis(Locks):
    def __new__(cls, url: str = ..., namespace: str = ..., label: Optional[str] = None) -> Self: ...
    def new_owner(self) -> Redis: ...
    @property
    def namespace(self) -> str: ...

@final
class Local(Locks):
    def __new__(
        cls, path: Union[str, os.PathLike[str], None] = None, label: Optional[str] = None
    ) -> Self: ...
    def new_owner(self) -> Local: ...
    @property
    def path(self) -> pathlib.Path: ...

@final
class Postgres(Locks):
    def __new__(
        cls,
        url: str,
        *,
        schema: Optional[str] = None,
        namespace: str = ...,
        label: Optional[str] = None,
    ) -> Self: ...
    @staticmethod
    def schema_sql(schema: str = "mistri_locks") -> str: ...
    def new_owner(self) -> Postgres: ...
    @property
    def namespace(self) -> str: ...

def open(
    url: str,
    *,
    namespace: str = ...,
    label: Optional[str] = None,
    schema: Optional[str] = None,
) -> Locks: ...
def postgres_url(**parts: object) -> str: ...
def mysql_url(**parts: object) -> str: ...
def configure(locks: Optional[Locks]) -> None: ...
def locks() -> Optional[Locks]: ...
def job_stop_key(job_id: str) -> str: ...
def _job_options(**options: object) -> dict[str, Any]: ...
def hold(
    key: str,
    ttl: _Seconds = ...,
    heartbeat: _Seconds = ...,
    stop_key: Optional[str] = None,
    signal: Union[AbortSignal, _SupportsAbort, None] = None,
    safety_margin: Optional[_Seconds] = None,
    label: Optional[str] = None,
    wait: Optional[_Seconds] = None,
    limit: int = ...,
    max_hold: Optional[_Seconds] = None,
    progress_timeout: Optional[_Seconds] = None,
) -> Optional[Hold]: ...
def _hold(
    key: str,
    ttl: _Seconds = ...,
    heartbeat: _Seconds = ...,
    stop_key: Optional[str] = None,
    signal: Union[AbortSignal, _SupportsAbort, None] = None,
    safety_margin: Optional[_Seconds] = None,
    label: Optional[str] = None,
    wait: Optional[_Seconds] = None,
    limit: int = ...,
    max_hold: Optional[_Seconds] = None,
    progress_timeout: Optional[_Seconds] = None,
    *,
    _locks: Optional[Locks] = None,
    _cancel: Optional[AbortSignal] = None,
) -> Optional[Hold]: ...
def _deliver_pending(timeout: Optional[_Seconds] = None) -> bool: ...
def _stop_dispatch() -> None: ...
@final
class _OperatorOptions:
    @property
    def allow_actions(self) -> bool: ...

def _operator_handle(
    locks: Locks,
    request: dict[str, Any],
    options: _OperatorOptions,
) -> tuple[int, list[tuple[str, str]], bytes]: ...
def _operator_options(options: dict[str, Any]) -> _OperatorOptions: ...
def _stats_prometheus(locks: Locks) -> str: ...

_OPERATOR_MAX_BODY: int
