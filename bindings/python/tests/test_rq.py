"""``mistri_locks.leased`` as is on RQ jobs, run by a real ``rq worker``
(forking a work horse per job) on the session's throwaway redis-server:
the job holds its lease, a busy key skips, and the stop flag interrupts
the job cooperatively (where RQ alone would kill its horse)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

from redis import Redis as RedisClient
from rq import Queue, Retry

import mistri_locks
from conftest import RedisServer, free_port

HERE = os.path.dirname(os.path.abspath(__file__))


def test_leased_rq_jobs(redis_server: RedisServer) -> None:
    namespace = f"mistri:test:{uuid.uuid4().hex}"
    locks = mistri_locks.Redis(redis_server.url, namespace=namespace)
    queue = Queue(f"q{uuid.uuid4().hex[:8]}",
                  connection=RedisClient.from_url(f"redis://127.0.0.1:{redis_server.port}/6"))
    env = dict(os.environ, MISTRI_TEST_LOCKS=redis_server.url, MISTRI_TEST_NS=namespace,
               PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = queue.enqueue("rq_jobs.report", 1, 0.3)
    stopped = queue.enqueue("rq_jobs.report", 2, 30, job_timeout=120)
    busy = queue.enqueue("rq_jobs.report", 3, 0)
    other = locks.new_owner()
    assert other.acquire("rq:3", 60)  # job 3's key is held elsewhere: it skips
    worker = subprocess.Popen(
        [sys.executable, "-m", "rq.cli", "worker", "--burst",
         "--url", f"redis://127.0.0.1:{redis_server.port}/6", queue.name],
        cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        # Job 2 runs in its horse, holding rq:2; stop it by its flag.
        deadline = time.monotonic() + 60
        while not locks.held("rq:2"):
            assert time.monotonic() < deadline and worker.poll() is None, "job 2 never held its lease"
            time.sleep(0.02)
        locks.set_flag("rq:2:stop", 30)
        out, _ = worker.communicate(timeout=120)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, out
    fence = done.return_value()
    assert isinstance(fence, int) and fence > 0
    assert stopped.get_status() == "failed"
    assert "Interrupted" in (stopped.latest_result().exc_string or ""), out
    assert busy.get_status() == "finished" and busy.return_value() is None, "skipped"
    assert other.held("rq:3") and other.release("rq:3")
    assert not locks.held("rq:1") and not locks.held("rq:2")


def test_a_backend_down_at_start_fails_the_job_and_rq_retries_it(redis_server: RedisServer) -> None:
    """Finding 6 (RQ, plain ``leased``): the lease backend refuses
    connections when the job starts. The job fails without running, with
    a warning in the worker's output, and RQ's Retry (given at enqueue)
    queues it again; it runs once a redis-server listens. Two burst
    workers of one job each, so no wait depends on the machine."""
    namespace = f"mistri:test:{uuid.uuid4().hex}"
    port = free_port()
    url = f"redis://127.0.0.1:{redis_server.port}/6"
    queue = Queue(f"q{uuid.uuid4().hex[:8]}", connection=RedisClient.from_url(url))
    env = dict(os.environ, MISTRI_TEST_LOCKS=redis_server.url, MISTRI_TEST_NS=namespace,
               MISTRI_TEST_DOWN=f"redis://127.0.0.1:{port}/0",
               PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    job = queue.enqueue("rq_jobs.comeback", "a", retry=Retry(max=3))

    def one_job() -> str:
        done = subprocess.run(
            [sys.executable, "-m", "rq.cli", "worker", "--burst", "--max-jobs", "1", "--url", url, queue.name],
            cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
        )
        assert done.returncode == 0, done.stdout
        return done.stdout

    out = one_job()
    assert "the lease backend is unreachable at start" in out, out
    job.refresh()
    assert job.get_status() == "queued" and job.retries_left == 2, (job.get_status(), out)
    back = RedisServer(port=port)
    try:
        out = one_job()
    finally:
        back.stop()
    job.refresh()
    assert job.get_status() == "finished", out
    fence = job.return_value()
    assert isinstance(fence, int) and fence > 0
