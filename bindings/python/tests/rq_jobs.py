"""RQ jobs for test_rq.py: plain functions decorated with
``mistri_locks.leased``, run by a real ``rq worker`` (which forks a work
horse per job: the hold starts inside the horse)."""

from __future__ import annotations

import os
import time
from typing import Optional

import mistri_locks
from mistri_locks import current_lease, leased

mistri_locks.configure(
    mistri_locks.Redis(os.environ["MISTRI_TEST_LOCKS"], namespace=os.environ["MISTRI_TEST_NS"])
)


@leased("rq:{account_id}", ttl=1, heartbeat=0.2)
def report(account_id: int, seconds: float) -> Optional[int]:
    lease = current_lease()
    assert lease is not None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lease.checkpoint()  # Interrupted when rq:<id>:stop goes up
        time.sleep(0.01)
    return lease.fence


# test_rq.py's "backend down" job: its lease backend is a loopback port the
# test keeps closed for the first attempt (the handle connects lazily).
DOWN = mistri_locks.Redis(os.environ.get("MISTRI_TEST_DOWN", "redis://127.0.0.1:1/0"),
                          namespace=os.environ["MISTRI_TEST_NS"])


@leased("down:{name}", ttl=1, heartbeat=0.2, locks=DOWN)
def comeback(name: str) -> int:
    lease = current_lease()
    assert lease is not None
    return lease.fence
