"""The Celery app test_celery.py runs a real prefork worker of.

Configured from the environment the test sets: ``MISTRI_TEST_BROKER`` (a
redis URL, also the result backend), ``MISTRI_TEST_LOCKS`` and
``MISTRI_TEST_NS`` (the lease backend and namespace), ``MISTRI_TEST_WITNESS``
(a directory each task writes what it did to, one file per task run).
"""

from __future__ import annotations

import os
import time

from celery import Celery

import mistri_locks
from mistri_locks import Interrupted, current_lease
from mistri_locks.integrations.celery import LeasedTask

TTL = 1.0
HEARTBEAT = 0.2

app = Celery(
    "celery_app",
    broker=os.environ["MISTRI_TEST_BROKER"],
    backend=os.environ["MISTRI_TEST_BROKER"],
)
app.conf.update(
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    task_track_started=True,
    result_expires=600,
)

# Made before the prefork fork: each pool child reconnects on its own, and
# its holds start inside its task calls.
mistri_locks.configure(
    mistri_locks.Redis(os.environ["MISTRI_TEST_LOCKS"], namespace=os.environ["MISTRI_TEST_NS"])
)

WITNESS = os.environ["MISTRI_TEST_WITNESS"]


def witness(name: str, line: str) -> None:
    with open(os.path.join(WITNESS, name), "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def work(seconds: float, record: str) -> None:
    """Works for ``seconds`` in small steps, checking the lease between them."""
    lease = current_lease()
    assert lease is not None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            lease.checkpoint()
        except Interrupted as e:
            witness(record, f"interrupted {time.time()!r} {e.reason}")
            raise
        time.sleep(0.01)


@app.task(base=LeasedTask, bind=True, lease={
    "key": "serial:{name}", "ttl": TTL, "heartbeat": HEARTBEAT,
    "on_conflict": "retry", "countdown": HEARTBEAT,
})
def serial(self: LeasedTask, name: str, n: int, seconds: float) -> int:
    """Ten of these on one key must run one after another."""
    lease = current_lease()
    assert lease is not None
    record = f"serial-{n}"
    witness(record, f"start {time.time()!r} {lease.fence} {self.request.retries}")
    work(seconds, record)
    witness(record, f"end {time.time()!r}")
    return n


@app.task(base=LeasedTask, lease={"key": "victim:{name}", "ttl": TTL, "heartbeat": HEARTBEAT})
def victim(name: str, record: str, seconds: float) -> None:
    """Writes its pid, then works (to be killed, stopped or timed out)."""
    witness(record, f"started {os.getpid()} {time.time()!r}")
    work(seconds, record)
    witness(record, f"finished {time.time()!r}")


@app.task(base=LeasedTask, lease={
    "key": "victim:{name}", "ttl": TTL, "heartbeat": HEARTBEAT, "wait": 30,
})
def successor(name: str, record: str) -> None:
    """Waits for the key, then says when it got it."""
    witness(record, f"acquired {time.time()!r}")


@app.task(base=LeasedTask, time_limit=1.5, lease={
    "key": "victim:{name}", "ttl": TTL, "heartbeat": HEARTBEAT,
})
def overrun(name: str, record: str) -> None:
    """Runs past its hard time limit: the pool kills its process."""
    witness(record, f"started {os.getpid()} {time.time()!r}")
    while True:
        time.sleep(0.05)


# The lease backend of the "backend down" tasks: a loopback port the test
# keeps closed when they start, then (for ``comeback``) opens a
# redis-server on. The handle connects lazily, and again after a refusal.
DOWN = mistri_locks.Redis(os.environ["MISTRI_TEST_DOWN"], namespace=os.environ["MISTRI_TEST_NS"])
COUNTDOWN = 0.5


@app.task(base=LeasedTask, bind=True, lease={
    "key": "down:{name}", "ttl": TTL, "heartbeat": HEARTBEAT, "locks": DOWN,
    "countdown": COUNTDOWN, "max_retries": 1000,
})
def comeback(self: LeasedTask, name: str) -> int:
    """Runs once its backend is back: records its fence and retries."""
    lease = current_lease()
    assert lease is not None
    witness(f"comeback-{name}", f"ran {time.time()!r} {lease.fence} {self.request.retries}")
    return self.request.retries


@app.task(base=LeasedTask, lease={
    "key": "down:{name}", "ttl": TTL, "heartbeat": HEARTBEAT, "locks": DOWN,
    "countdown": COUNTDOWN, "max_retries": 2, "on_conflict": "skip",
})
def never(name: str) -> None:
    """Its backend never comes back: it fails after 1 + 2 attempts."""
    witness(f"never-{name}", f"ran {time.time()!r}")
