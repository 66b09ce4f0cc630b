"""N-holder leases (``limit=``) through the Python face (issue 14)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import mistri_locks


@pytest.mark.parametrize("make", ["memory", "redis"])
def test_up_to_limit_owners_hold_at_once(make: str, request: Any) -> None:
    if make == "memory":
        first: mistri_locks.Locks = mistri_locks.Memory()
    else:
        first = request.getfixturevalue("redis_backend").adapter()
    owners = [first] + [first.new_owner() for _ in range(3)]  # type: ignore[attr-defined]
    assert [o.acquire("pool", 30, limit=3) for o in owners] == [True, True, True, False]
    assert owners[0].release("pool")
    assert owners[3].acquire("pool", 30, limit=3)
    fences = [o.fence("pool") for o in owners[1:]]
    assert len(set(fences)) == 3, fences
    info = first.info("pool")
    assert info is not None
    assert info["limit"] == 3
    assert info["holder"] is None, "an N-holder lease lists its holders instead"
    assert sorted(h["fence"] for h in info["holders"]) == sorted(fences)
    assert all(h["holder"] == first.label for h in info["holders"])
    # An exclusive lease lists its one holder too.
    assert first.acquire("solo", 30)
    solo = first.info("solo")
    assert solo is not None and solo["limit"] == 1
    assert [h["fence"] for h in solo["holders"]] == [solo["fence"]]


def test_holds_share_a_limited_lease_and_a_waiter_gets_a_freed_slot() -> None:
    locks = mistri_locks.Memory()
    holds = [locks.new_owner().hold("pool", ttl=30, heartbeat=1, limit=2) for _ in range(2)]
    assert all(h is not None for h in holds)
    assert locks.hold("pool", ttl=30, limit=2) is None
    assert holds[0] is not None and holds[1] is not None
    assert holds[0].fence != holds[1].fence
    threading.Timer(0.3, holds[0].release).start()
    started = time.monotonic()
    with locks.hold("pool", ttl=30, limit=2, wait=20) as third:
        assert third is not None
        assert 0.2 <= time.monotonic() - started < 10
    holds[1].release()
