"""``mistri_locks.integrations.dramatiq.Leased`` on a real Dramatiq worker (in this
process, its own worker threads) with the session's throwaway redis-server
as broker and lease backend."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Iterator

import pytest
import dramatiq
from dramatiq.brokers.redis import RedisBroker

import mistri_locks
from mistri_locks.integrations.dramatiq import Leased, stop, stop_key
from conftest import RedisServer, free_port

TTL = 1.0
HEARTBEAT = 0.2
TICK = min(HEARTBEAT, 1.0)
PUSH = 0.25


@pytest.fixture
def setup(redis_server: RedisServer) -> Iterator[tuple[RedisBroker, mistri_locks.Redis, str, str]]:
    namespace = f"mistri:test:{uuid.uuid4().hex}"
    locks = mistri_locks.Redis(redis_server.url, namespace=namespace)
    broker = RedisBroker(url=f"redis://127.0.0.1:{redis_server.port}/5", namespace=namespace)
    broker.add_middleware(Leased(locks))
    yield broker, locks, "q" + uuid.uuid4().hex[:8], redis_server.url
    broker.close()


def run_worker(broker: RedisBroker) -> dramatiq.Worker:
    worker = dramatiq.Worker(broker, worker_threads=3, worker_timeout=100)
    worker.start()
    return worker


def test_messages_of_one_key_never_overlap_and_retry_on_conflict(setup: Any) -> None:
    broker, locks, queue, _ = setup
    runs: list[tuple[float, float, int]] = []
    mutex = threading.Lock()

    @dramatiq.actor(broker=broker, queue_name=queue, min_backoff=50, max_backoff=200, max_retries=100,
                    lease={"key": "dq:{name}", "ttl": TTL, "heartbeat": HEARTBEAT, "on_conflict": "raise"})
    def slow(name: str, n: int) -> None:
        # Recorded whatever happens (no assert in here: a failure would only
        # be retried, and hide a run without its lease).
        lease = mistri_locks.current_lease()
        start = time.time()
        time.sleep(0.6 * TTL)
        with mutex:
            runs.append((start, time.time(), -1 if lease is None or lease.key != f"dq:{name}" else lease.fence))

    for n in range(3):
        slow.send("one", n)
    worker = run_worker(broker)
    try:
        broker.join(queue, timeout=60_000)  # ms: three runs and their retries
        worker.join()
    finally:
        worker.stop()
    assert len(runs) == 3, runs
    assert all(fence > 0 for *_, fence in runs), "every run held the lease"
    runs.sort()
    for (_, end, fence), (start, _, next_fence) in zip(runs, runs[1:]):
        assert start >= end and next_fence > fence
    assert not locks.held("dq:one")


def test_skip_and_stop_by_message_id(setup: Any) -> None:
    broker, locks, queue, url = setup
    seen: dict[str, Any] = {}
    started = threading.Event()

    @dramatiq.actor(broker=broker, queue_name=queue, max_retries=0, throws=(mistri_locks.Interrupted,),
                    lease={"key": "dq:{name}", "ttl": TTL, "heartbeat": HEARTBEAT})
    def loop(name: str) -> None:
        lease = mistri_locks.current_lease()
        assert lease is not None
        started.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                lease.checkpoint()
            except mistri_locks.Interrupted as e:
                seen["interrupted"] = (time.time(), e.reason)
                raise
            time.sleep(0.01)

    @dramatiq.actor(broker=broker, queue_name=queue, max_retries=0,
                    lease={"key": "dq:{name}", "ttl": TTL, "on_conflict": "skip"})
    def other(name: str) -> None:
        seen["other ran"] = True

    worker = run_worker(broker)
    try:
        message = loop.send("busy")
        assert started.wait(30)
        other.send("busy")
        time.sleep(3 * TICK)
        assert "other ran" not in seen, "skipped: the key was held"
        assert stop_key(message.message_id) == f"job:{message.message_id}:stop"
        before = time.time()
        # Another owner, as another process would be.
        stop(message.message_id, locks=mistri_locks.Redis(url, namespace=locks.namespace))
        after = time.time()
        broker.join(queue, timeout=30_000)
        worker.join()
    finally:
        worker.stop()
    at, reason = seen["interrupted"]
    assert reason == "stopped" and before <= at <= after + TICK + PUSH
    assert not locks.held("dq:busy")


def test_bad_lease_options_fail_at_declaration(setup: Any) -> None:
    broker, _, queue, _ = setup
    with pytest.raises(TypeError, match="'user'"):
        @dramatiq.actor(broker=broker, queue_name=queue, lease={"key": "r:{user}"})
        def bad(account_id: int) -> None:
            pass
    with pytest.raises(ValueError, match="on_conflict"):
        @dramatiq.actor(broker=broker, queue_name=queue, lease={"key": "r", "on_conflict": "retry"})
        def bad2() -> None:
            pass
    # Finding 8: each message watches job:<message id>:stop; a stop_key of
    # its own would be ignored, so it is refused.
    with pytest.raises(TypeError, match="'stop_key' is not honoured"):
        @dramatiq.actor(broker=broker, queue_name=queue, lease={"key": "r", "stop_key": "r:halt"})
        def bad3() -> None:
            pass


def test_a_backend_down_at_start_fails_the_message_and_retries_it(
    setup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Finding 6: the lease backend refuses connections when the message
    starts. The message fails with LeaseFailed, with a warning in the
    worker's log, whatever on_conflict says ("skip" here: a conflict would
    ack it), and Dramatiq's Retries runs it again until a redis-server
    listens again."""
    broker, _, queue, _ = setup
    port = free_port()
    down = mistri_locks.Redis(f"redis://127.0.0.1:{port}/0", namespace=f"mistri:test:{uuid.uuid4().hex}")
    ran: list[tuple[float, int]] = []

    @dramatiq.actor(broker=broker, queue_name=queue, min_backoff=200, max_backoff=200, max_retries=1000,
                    lease={"key": "dq:down", "ttl": TTL, "heartbeat": HEARTBEAT, "locks": down,
                           "on_conflict": "skip"})
    def job() -> None:
        lease = mistri_locks.current_lease()
        ran.append((time.time(), -1 if lease is None else lease.fence))

    caplog.set_level("WARNING")
    worker = run_worker(broker)
    back = None
    try:
        job.send()
        deadline = time.monotonic() + 30
        while not any("unreachable at start" in r.getMessage() and r.levelname == "WARNING"
                      for r in caplog.records):
            assert time.monotonic() < deadline, "no warning in the worker's log"
            time.sleep(0.01)
        assert ran == []
        back = RedisServer(port=port)
        up = time.time()
        broker.join(queue, timeout=30_000)  # ms: the next retry, 0.2 s after the last
        worker.join()
    finally:
        worker.stop()
        if back is not None:
            back.stop()
    assert len(ran) == 1, ran
    at, fence = ran[0]
    assert at >= up and fence > 0
