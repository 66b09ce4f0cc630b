"""The hold's timing promise from Python: told before the lease can expire,
whatever the server does; the safety margin is validated like any other
duration."""

from __future__ import annotations

import os
import signal
import time

import pytest

import mistri_locks
from conftest import RedisServer


def test_a_frozen_server_is_noticed_before_the_lease_can_expire() -> None:
    server = RedisServer()
    try:
        adapter = mistri_locks.Redis(url=server.url, namespace="mistri:py:deadline")
        hold = adapter.hold("job", ttl=1.0, heartbeat=0.1, safety_margin=0.3)
        assert hold is not None
        time.sleep(0.25)  # renewing normally
        frozen_at = time.monotonic()
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            assert hold.signal.wait(3), "never told"
            told = time.monotonic() - frozen_at
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        # Safe deadline: the last confirmed renewal (sent at most a heartbeat
        # before the freeze) + ttl - margin, i.e. 0.6-0.7 s after the freeze;
        # the lease itself can expire on the server no earlier than 0.9 s.
        assert 0.5 < told < 0.9, told
        assert hold.lost
        assert hold.signal.reason.startswith("lease lost:"), hold.signal.reason
        assert hold.release() is False  # lost before: nothing to delete
    finally:
        server.stop()


@pytest.mark.parametrize(
    "margin, error",
    [(0.5, ValueError), (0.9, ValueError), (0.0, ValueError), (-1.0, ValueError),
     (float("nan"), ValueError), ("0.1", TypeError)],
)
def test_bad_safety_margins_are_clear_errors(margin: object, error: type) -> None:
    adapter = mistri_locks.Memory()
    with pytest.raises(error, match="safety_margin"):
        adapter.hold("job", ttl=1.0, heartbeat=0.1, safety_margin=margin)  # type: ignore[arg-type]
    assert not adapter.held("job"), "a refused hold leaves nothing behind"


def test_tiny_durations_are_clamped_or_refused() -> None:
    adapter = mistri_locks.Memory()
    with pytest.raises(ValueError, match="ttl"):
        adapter.hold("job", ttl=0.005, heartbeat=0.001)
    hold = adapter.hold("job", ttl=0.3, heartbeat=1e-9)  # counts as 1 ms
    assert hold is not None
    time.sleep(0.1)
    assert not hold.lost
    hold.release()
