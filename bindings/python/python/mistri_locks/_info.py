"""The shapes of ``Locks.info(key)`` and ``Locks.list(prefix)``: plain dicts
at run time (``json.dumps`` takes them as they are), typed here for mypy.
Seconds are floats; times are Unix seconds (wall clock, for people); time
left is the backend's own clock. The native module builds them
(``bindings/python/src/info.rs``)."""

from __future__ import annotations

from typing import Optional, TypedDict


class HolderInfo(TypedDict):
    """One holder's description, as it stored it with its lease."""

    holder: str  #: its label (default ``host:pid language``)
    fence: int  #: the fencing number of its acquisition
    acquired_at: float
    renewed_at: float  #: at first, the acquire time
    ttl: float  #: of the last acquire or renewal
    heartbeat: float  #: of its hold; 0 for a plain acquire
    stop_key: Optional[str]  #: the stop key its hold watches; None: none


class LeaseInfo(TypedDict):
    """A live lease. For an exclusive lease the holder's fields are those of
    ``holders[0]`` (all None if it stored no description); for an N-holder
    lease they are None and ``holders`` lists every live slot's holder."""

    key: str
    time_left: Optional[float]  #: None: a lease with no expiry
    holder: Optional[str]
    fence: Optional[int]
    acquired_at: Optional[float]
    renewed_at: Optional[float]
    ttl: Optional[float]
    heartbeat: Optional[float]
    stop_key: Optional[str]  #: the stop key the holder's hold watches
    limit: int  #: 1, or the newest holder's limit of an N-holder lease
    holders: list[HolderInfo]  #: by fence


class FlagInfo(TypedDict):
    """A raised flag."""

    key: str
    time_left: Optional[float]  #: None: a flag with no expiry


class WaitingInfo(TypedDict):
    """The waiting lines of one key: one per waiting process and handle
    (on Memory, each waiter); only live ones count."""

    key: str
    lines: int
    oldest_wait: float  #: seconds the first line has waited


class Listing(TypedDict):
    """What ``Locks.list(prefix)`` found, each list sorted by key."""

    leases: list[LeaseInfo]
    flags: list[FlagInfo]
    waiting: list[WaitingInfo]  #: keys with waiting lines
