"""``ReleaseOutcome``: what ``Hold.release_outcome()`` did (the core's
``ReleaseOutcome``; the C face's ``mistri_release_outcome``)."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING


class ReleaseOutcome(str, enum.Enum):
    """What a release did. A ``str`` enum: each member equals its value
    (``ReleaseOutcome.RELEASED == "released"``), so it logs and serializes
    as that word. ``Hold.release()`` is ``release_outcome() is RELEASED``."""

    #: The lease was ours and this call deleted it.
    RELEASED = "released"
    #: The hold was renewing, but the lease had already gone (expired or
    #: taken) by the time of the delete; nothing was deleted.
    NOT_HELD = "not_held"
    #: The hold had been lost before (its signal says why); nothing was
    #: deleted.
    LOST = "lost"
    #: An earlier release (or leaving the ``with`` block) already ran.
    ALREADY_RELEASED = "already_released"
    #: A forked child's copy of a parent's hold: the parent's lease was left
    #: alone.
    OTHER_PROCESS = "other_process"
    #: No answer to the delete came before the lease's end (the answer to
    #: its last confirmed renewal + ttl, the latest instant it can be alive
    #: on the server) and no renewal of it was unanswered: it has lapsed by
    #: expiry. Nothing is left to retry.
    EXPIRED = "expired"

    def __str__(self) -> str:
        return str.__str__(self)  # the value

    if TYPE_CHECKING:
        # What `ReleaseOutcome("lost")` takes: Enum's lookup by value, not
        # str's constructor (so that stubtest reads the signature right).
        def __new__(cls, value: str) -> ReleaseOutcome: ...
