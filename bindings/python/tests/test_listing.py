"""Locks.list(prefix) and Locks.active_holds(): what the core, the CLI
(`mistri-locks list`), C and Ruby offer, on every backend."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

import mistri_locks


def test_list_shows_live_leases_and_flags_under_a_prefix(backend) -> None:
    locks = backend.adapter()
    other = backend.owner()
    assert locks.list() == {"leases": [], "flags": [], "waiting": []}
    assert locks.acquire("job:b", ttl=30)
    hold = other.hold("job:a", ttl=30, heartbeat=5, label="worker 7")
    assert hold is not None
    slots = [locks.hold("job:c", ttl=30, heartbeat=5, limit=3) for _ in range(2)]
    assert all(s is not None for s in slots)
    assert locks.acquire("other", ttl=30)
    locks.set_flag("job:stop", ttl=60)
    locks.set_flag("stop:other", ttl=60)

    listing = locks.list("job:")
    assert [lease["key"] for lease in listing["leases"]] == ["job:a", "job:b", "job:c"]
    assert listing["flags"][0]["key"] == "job:stop" and len(listing["flags"]) == 1
    flag = listing["flags"][0]
    assert flag["time_left"] is not None and 0 < flag["time_left"] <= 60

    by_key = {lease["key"]: lease for lease in listing["leases"]}
    # Each lease is described as info() describes it (time left apart).
    for key, lease in by_key.items():
        info = locks.info(key)
        assert info is not None
        # (Redis derives renewed_at from the time left: it moves by the
        # milliseconds between the two reads.)
        moving = ("time_left", "renewed_at", "holders")
        assert {k: v for k, v in lease.items() if k not in moving} == {
            k: v for k, v in info.items() if k not in moving
        }
        assert [h["fence"] for h in lease["holders"]] == [h["fence"] for h in info["holders"]]
        if lease["renewed_at"] is not None and info["renewed_at"] is not None:
            assert abs(lease["renewed_at"] - info["renewed_at"]) < 1
        assert lease["time_left"] is not None and 0 < lease["time_left"] <= 30
    assert by_key["job:a"]["holder"] == "worker 7"
    assert by_key["job:a"]["fence"] == hold.fence and by_key["job:a"]["heartbeat"] == 5
    assert by_key["job:b"]["holder"] == f"{socket.gethostname()}:{os.getpid()} python"
    assert by_key["job:b"]["fence"] == locks.fence("job:b") and by_key["job:b"]["limit"] == 1
    assert by_key["job:c"]["limit"] == 3 and by_key["job:c"]["holder"] is None
    assert [h["fence"] for h in by_key["job:c"]["holders"]] == sorted(
        s.fence for s in slots if s is not None
    )
    json.dumps(listing)  # plain data

    everything = locks.list()
    assert [lease["key"] for lease in everything["leases"]] == ["job:a", "job:b", "job:c", "other"]
    assert [f["key"] for f in everything["flags"]] == ["job:stop", "stop:other"]
    assert locks.list(prefix="nothing-here") == {"leases": [], "flags": [], "waiting": []}

    # Released, cleared and expired entries are not listed.
    hold.release()
    locks.clear_flag("job:stop")
    assert [lease["key"] for lease in locks.list("job:")["leases"]] == ["job:b", "job:c"]
    assert locks.list("job:")["flags"] == []
    for s in slots:
        assert s is not None and s.release()
    assert locks.acquire("job:brief", ttl=0.2)
    time.sleep(0.4)
    assert [lease["key"] for lease in locks.list("job:")["leases"]] == ["job:b"]


def test_list_refuses_a_non_string_prefix() -> None:
    locks = mistri_locks.Memory()
    with pytest.raises(TypeError):
        locks.list(7)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        locks.list(prefix=None)  # type: ignore[arg-type]




def test_active_holds_counts_the_holds_this_handle_renews(backend) -> None:
    locks = backend.adapter()
    other = backend.owner()
    assert locks.active_holds() == 0
    first = locks.hold("one", ttl=30, heartbeat=5)
    second = locks.hold("two", ttl=30, heartbeat=5)
    assert first is not None and second is not None
    assert locks.active_holds() == 2
    # Another owner's holds are its own; a refused hold counts nowhere.
    assert other.hold("one", ttl=30, heartbeat=5) is None
    assert other.active_holds() == 0
    # A plain acquire is not a hold.
    assert locks.acquire("plain", ttl=30)
    assert locks.active_holds() == 2
    assert first.release()
    assert locks.active_holds() == 1
    with locks.hold("three", ttl=30, heartbeat=5) as third:
        assert third is not None
        assert locks.active_holds() == 2
    assert locks.active_holds() == 1
    second.release()
    assert locks.active_holds() == 0


def test_a_lost_hold_is_no_longer_counted() -> None:
    locks = mistri_locks.Memory()
    hold = locks.hold("k", ttl=2, heartbeat=0.05)
    assert hold is not None and locks.active_holds() == 1
    assert locks.break_lease("k")
    assert hold.signal.wait(5), "the loss was not noticed"
    deadline = time.monotonic() + 5
    while locks.active_holds() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert hold.lost and locks.active_holds() == 0


def test_list_shows_a_waiting_line_until_it_has_the_lease(backend) -> None:
    import threading

    locks = backend.adapter()
    waiter = backend.owner()
    assert locks.acquire("wait:job", ttl=30)
    started = time.monotonic()
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(waiter.acquire("wait:job", ttl=30, wait=60)))
    t.start()
    end = time.monotonic() + 20
    while True:
        waiting = locks.list("wait:")["waiting"]
        if waiting:
            break
        assert time.monotonic() < end, "the waiter never showed"
        time.sleep(0.02)
    [line] = waiting
    assert line["key"] == "wait:job" and line["lines"] == 1
    assert 0 <= line["oldest_wait"] <= time.monotonic() - started + 0.002
    assert locks.release("wait:job")
    t.join(timeout=60)
    assert got == [True]
    assert locks.list("wait:")["waiting"] == []
    assert waiter.release("wait:job")
