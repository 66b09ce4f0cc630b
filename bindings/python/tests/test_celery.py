"""``mistri_locks.integrations.celery`` with a real Celery worker (prefork, 4 children)
on the session's throwaway redis-server (broker, results and leases):
serial tasks of one key, ``kill -9`` of a pool child, a stop by task id
from another process and from the CLI (or Ruby, when its extension is
built), and a hard time limit. The tasks are in celery_app.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Callable, Iterator, Optional

import pytest
from celery import Celery

import mistri_locks
from mistri_locks.integrations.celery import LeasedTask, stop_key
from conftest import RedisServer, free_port, python_child

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
TTL = 1.0  # celery_app.TTL
HEARTBEAT = 0.2  # celery_app.HEARTBEAT
TICK = min(HEARTBEAT, 1.0)
# Push delivery and the witness write, as in test_processes.py.
PUSH = 0.25


class Worker:
    """``celery -A celery_app worker --pool=prefork --concurrency=4`` in its
    own process group, stopped (group and all) afterwards."""

    def __init__(self, server: RedisServer, witness: str) -> None:
        self.namespace = f"mistri:test:{uuid.uuid4().hex}"
        # Closed until test_a_backend_down_at_start... opens a redis-server on it.
        self.down_port = free_port()
        self.broker = f"redis://127.0.0.1:{server.port}/2"
        self.witness = witness
        self.log_path = os.path.join(witness, "..", "worker.log")
        env = dict(
            os.environ,
            MISTRI_TEST_BROKER=self.broker,
            MISTRI_TEST_LOCKS=server.url,
            MISTRI_TEST_NS=self.namespace,
            MISTRI_TEST_WITNESS=witness,
            MISTRI_TEST_DOWN=f"redis://127.0.0.1:{self.down_port}/0",
            PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""),
            PYTHONUNBUFFERED="1",
        )
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_app", "worker",
             "--pool=prefork", "--concurrency=4", "--loglevel=INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat",
             "-n", f"mistri-{uuid.uuid4().hex[:8]}@localhost"],
            cwd=HERE, env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        # Startup is the interpreter's and Celery's, not the protocol's:
        # the bound only keeps a broken setup from hanging the run.
        deadline = time.monotonic() + 120
        while "ready." not in self.log_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"celery worker did not start:\n{self.log_text()}")
            time.sleep(0.1)
        self.client = Celery("client", broker=self.broker, backend=self.broker,
                             set_as_current=False)
        self.locks = mistri_locks.Redis(server.url, namespace=self.namespace)

    def log_text(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def send(self, name: str, *args: Any) -> Any:
        return self.client.send_task(f"celery_app.{name}", args=args)

    def lines(self, record: str) -> list[list[str]]:
        try:
            with open(os.path.join(self.witness, record)) as f:
                return [line.split() for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def wait_for(self, record: str, word: str, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines(record):
                if line[0] == word:
                    return line
            if time.monotonic() > deadline:
                pytest.fail(f"{record}: no {word!r} within {timeout} s:\n{self.log_text()[-4000:]}")
            time.sleep(0.01)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # warm shutdown
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the pool children too
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def worker(redis_server: RedisServer) -> Iterator[Worker]:
    base = tempfile.mkdtemp(prefix="mistri-celery-")
    witness = os.path.join(base, "witness")
    os.mkdir(witness)
    w = Worker(redis_server, witness)
    try:
        yield w
    finally:
        w.stop()
        shutil.rmtree(base, ignore_errors=True)


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(0.01)


def test_ten_tasks_of_one_key_never_overlap_and_all_complete(worker: Worker) -> None:
    seconds = 3 * TTL  # each outlives its ttl three times: renewals keep it
    results = [worker.send("serial", "one", n, seconds) for n in range(10)]
    # Ten runs one after another, each followed by at most a retry's
    # countdown plus a tick to notice the release.
    bound = 10 * (seconds + TTL + HEARTBEAT) + 30
    assert sorted(r.get(timeout=bound) for r in results) == list(range(10))
    runs = []
    for n in range(10):
        lines = worker.lines(f"serial-{n}")
        starts = [line for line in lines if line[0] == "start"]
        ends = [line for line in lines if line[0] == "end"]
        assert len(starts) == 1 and len(ends) == 1, lines
        runs.append((float(starts[0][1]), float(ends[0][1]), int(starts[0][2]), int(starts[0][3])))
    runs.sort()
    for (_, end, fence, _), (start, _, next_fence, _) in zip(runs, runs[1:]):
        assert start >= end, f"overlap: a run started {end - start:.3f} s before the previous ended"
        assert next_fence > fence
    assert sum(retries for *_, retries in runs) > 0, "the busy key made tasks retry"
    assert not worker.locks.held("serial:one")


def test_kill_9_of_the_pool_child_frees_the_key_within_ttl_and_a_tick(worker: Worker) -> None:
    worker.send("victim", "kill", "kill", 60)
    pid = int(worker.wait_for("kill", "started", 30)[1])
    assert worker.locks.held("victim:kill")
    nxt = worker.send("successor", "kill", "kill-next")
    wait_until(lambda: nxt.state == "STARTED", 30, "the successor is waiting for the key")
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    acquired = float(worker.wait_for("kill-next", "acquired", TTL + 30)[1])
    took = acquired - killed
    assert 0 < took <= TTL + TICK + PUSH, f"the next task ran {took:.3f} s after the kill"
    nxt.get(timeout=30)


def stop_and_check(worker: Worker, record: str, raise_flag: Callable[[str], tuple[float, float]]) -> None:
    result = worker.send("victim", record, record, 30)
    worker.wait_for(record, "started", 30)
    time.sleep(3 * TICK)  # a few quiet ticks: nothing trips by itself
    assert worker.lines(record)[-1][0] == "started"
    before, after = raise_flag(result.id)
    line = worker.wait_for(record, "interrupted", 30)
    at, reason = float(line[1]), line[2]
    assert reason == "stopped"
    assert at >= before, "not before the flag went up"
    assert at - after <= TICK + PUSH, f"interrupted {at - after:.3f} s after the flag was up"
    wait_until(lambda: result.state == "FAILURE", 30, "the task failed with Interrupted")
    err = result.get(propagate=False)  # rebuilt from the result backend's JSON
    assert isinstance(err, mistri_locks.Interrupted), repr(err)
    assert err.reason == "stopped" and err.key == f"victim:{record}"
    assert not worker.locks.held(f"victim:{record}"), "released on the way out"


STOPPER = """
import sys, time, mistri_locks, mistri_locks.integrations.celery
mistri_locks.configure(mistri_locks.Redis(sys.argv[1], namespace=sys.argv[2]))
mistri_locks.locks().flag("warm")  # connect first: the timing covers the SET only
t = time.time()
mistri_locks.integrations.celery.stop(sys.argv[3])
print(t, time.time(), flush=True)
"""


def test_stop_by_task_id_from_another_process(worker: Worker, redis_server: RedisServer) -> None:
    def raise_flag(task_id: str) -> tuple[float, float]:
        child = python_child(STOPPER, redis_server.url, worker.namespace, task_id)
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        before, after = map(float, out.split())
        return before, after

    stop_and_check(worker, "stopped-py", raise_flag)


def ruby_extension() -> Optional[str]:
    lib = os.path.join(REPO, "bindings", "ruby", "lib")
    for root, _, files in os.walk(lib):
        if any(f.endswith(".so") for f in files) and shutil.which("ruby"):
            return lib
    return None


def cli() -> str:
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    path = os.path.join(target, "debug", "mistri-locks")
    if not os.path.exists(path):
        subprocess.run(["cargo", "build", "-q", "-p", "mistri_locks_cli"], cwd=REPO, check=True)
    return path


def test_stop_by_task_id_from_ruby_or_the_cli(worker: Worker, redis_server: RedisServer) -> None:
    """The Ruby face's own format, job:<id>:stop, raised from Ruby when its
    extension is built here, else by the operator's CLI (scripts/test runs
    the Python suite before it builds Ruby)."""
    lib = ruby_extension()

    def raise_flag(task_id: str) -> tuple[float, float]:
        key = stop_key(task_id)
        assert key == f"job:{task_id}:stop"
        if lib is not None:
            cmd = ["ruby", "-I", lib, "-e",
                   'require "mistri_locks"; l = MistriLocks::Redis.new(url: ARGV[0], namespace: ARGV[1]); '
                   'l.flag?("warm"); l.set_flag(ARGV[2], ttl: 30)',
                   redis_server.url, worker.namespace, key]
        else:
            cmd = [cli(), "--url", redis_server.url, "--namespace", worker.namespace,
                   "stop", key, "--ttl", "30"]
        before = time.time()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        after = time.time()
        assert done.returncode == 0, done.stderr
        return before, after

    stop_and_check(worker, "stopped-other", raise_flag)


def assert_freed_within_ttl_of_death(worker: Worker, pid: int, key: str, what: str) -> None:
    """Waits for the pool child ``pid`` to die, then for ``key``'s lease to
    go: within the ttl of the death (its last renewal came before it)."""

    def gone() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    wait_until(gone, 30, what)
    died = time.monotonic()
    wait_until(lambda: not worker.locks.held(key), TTL + 30, "the lease lapsed")
    freed = time.monotonic()
    assert freed - died <= TTL + PUSH, f"the lease outlived its holder by {freed - died:.3f} s"


def test_a_hard_time_limit_that_kills_the_child_frees_the_lease_within_the_ttl(
    worker: Worker,
) -> None:
    worker.send("overrun", "limit", "limit")
    pid = int(worker.wait_for("limit", "started", 30)[1])
    assert worker.locks.held("victim:limit")
    assert_freed_within_ttl_of_death(worker, pid, "victim:limit",
                                     "the pool killed the child at its time limit")


def test_revoke_with_terminate_frees_the_lease_within_the_ttl(worker: Worker) -> None:
    result = worker.send("victim", "revoked", "revoked", 60)
    pid = int(worker.wait_for("revoked", "started", 30)[1])
    assert worker.locks.held("victim:revoked")
    worker.client.control.revoke(result.id, terminate=True, signal="SIGKILL")
    assert_freed_within_ttl_of_death(worker, pid, "victim:revoked",
                                     "revoke(terminate=True) killed the child")


def test_bad_lease_options_fail_when_celery_creates_the_task() -> None:
    app = Celery("bad", set_as_current=False)

    def register(**lease: Any) -> None:
        @app.task(base=LeasedTask, lease=lease, shared=False)
        def report(account_id: int) -> None:
            pass

        assert report.name  # the proxy creates the task class here

    with pytest.raises(TypeError, match="'user'"):
        register(key="report:{user}")
    with pytest.raises(TypeError, match="unknown option"):
        register(key="report:{account_id}", tll=1)
    with pytest.raises(ValueError, match="ttl"):
        register(key="report:{account_id}", ttl=0)
    with pytest.raises(ValueError, match="countdown"):
        register(key="report:{account_id}", countdown=-1)
    with pytest.raises(ValueError, match="job id must not be empty"):  # the core's words
        mistri_locks.integrations.celery.stop_key("")
    # Finding 8: a task watches its job stop key; a stop_key of its own
    # would be ignored, so it is refused.
    with pytest.raises(TypeError, match="'stop_key' is not honoured"):
        register(key="report:{account_id}", stop_key="report:{account_id}:halt")


def test_a_leased_task_called_in_process(redis_server: RedisServer) -> None:
    """Called directly (no worker), a task holds its lease just the same;
    "skip" and "raise" on a busy key."""
    app = Celery("direct", set_as_current=False)
    mem = mistri_locks.Memory()
    seen: list[Any] = []

    @app.task(base=LeasedTask, shared=False, lease={"key": "direct:{n}", "ttl": TTL, "locks": mem})
    def direct(n: int) -> int:
        lease = mistri_locks.current_lease()
        assert lease is not None
        seen.append((lease.key, mem.held(lease.key)))
        return n

    @app.task(base=LeasedTask, shared=False,
              lease={"key": "direct:{n}", "ttl": TTL, "locks": mem, "on_conflict": "raise"})
    def strict(n: int) -> int:
        return n

    class ReportTask(LeasedTask):  # type: ignore[misc]
        # lease= on a base class: each task made from it checks its own arguments.
        lease = {"key": "direct:{n}", "ttl": TTL, "locks": mem}

    @app.task(base=ReportTask, shared=False)
    def based(n: int) -> str:
        lease = mistri_locks.current_lease()
        return "" if lease is None else lease.key

    assert based(7) == "direct:7"
    assert direct(1) == 1 and seen == [("direct:1", True)]
    assert not mem.held("direct:1")
    other = mem.new_owner()
    assert other.acquire("direct:2", 5)
    assert direct(2) is None and len(seen) == 1
    with pytest.raises(mistri_locks.Conflict):
        strict(2)


COUNTDOWN = 0.5  # celery_app.COUNTDOWN


def test_a_backend_down_at_start_retries_the_task_until_it_is_back(worker: Worker) -> None:
    """Finding 6: the lease backend refuses connections when the task
    starts. The task is retried every countdown, with a warning in the
    worker's log, and runs once a redis-server listens again; a task whose
    backend never comes back fails after its max_retries, with the
    ConnectionError. (44a85b1: FAILURE at the first attempt, acked.)"""
    result = worker.send("comeback", "a")
    lost = worker.send("never", "b")

    def warned() -> bool:
        return "lease backend is unreachable at start" in worker.log_text()

    wait_until(warned, 30, "a warning in the worker's log")
    assert "WARNING" in [line for line in worker.log_text().splitlines()
                         if "unreachable at start" in line][0]
    # The bounded task: three attempts, a countdown apart, then FAILURE.
    wait_until(lambda: lost.state == "FAILURE", 30 + 3 * COUNTDOWN, "the bounded task failed")
    err = lost.get(propagate=False)
    assert isinstance(err, mistri_locks.ConnectionError), repr(err)
    assert worker.lines("never-b") == [], "it never ran without its lease"
    assert "no retry left (max_retries=2): the task fails" in worker.log_text()
    assert result.state in ("PENDING", "RETRY", "STARTED"), result.state
    assert worker.lines("comeback-a") == []
    back = RedisServer(port=worker.down_port)
    try:
        up = time.time()
        # The next retry comes within a countdown; the bound beyond it is
        # the broker's, not the protocol's.
        retries = result.get(timeout=30 + COUNTDOWN)
        assert result.state == "SUCCESS"
        lines = worker.lines("comeback-a")
        assert len(lines) == 1, lines
        ran, fence, seen_retries = float(lines[0][1]), int(lines[0][2]), int(lines[0][3])
        assert ran >= up and fence > 0 and seen_retries == retries >= 1
    finally:
        back.stop()


def test_eager_mode_raises_conflict_instead_of_recursing() -> None:
    """Finding 7: under task_always_eager Celery runs a retry at once,
    inside the call: a busy key under on_conflict="retry" recursed until
    RecursionError (44a85b1). Now the caller gets Conflict, and a backend
    that refuses connections its ConnectionError, on the first attempt."""
    app = Celery("eager", set_as_current=False)
    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    mem = mistri_locks.Memory()
    runs: list[int] = []

    @app.task(base=LeasedTask, bind=True, shared=False,
              lease={"key": "eager:{n}", "ttl": TTL, "locks": mem, "on_conflict": "retry", "countdown": 0.1})
    def busy(self: LeasedTask, n: int) -> int:
        runs.append(self.request.retries)
        return n

    other = mem.new_owner()
    assert other.acquire("eager:1", 60)
    with pytest.raises(mistri_locks.Conflict) as info:
        busy.delay(1)
    assert info.value.key == "eager:1" and runs == []
    assert busy.delay(2).get() == 2 and runs == [0]

    closed = mistri_locks.Redis(f"redis://127.0.0.1:{free_port()}/0", namespace="eager")

    @app.task(base=LeasedTask, shared=False,
              lease={"key": "eager:{n}", "ttl": TTL, "locks": closed, "on_conflict": "retry", "countdown": 0.1})
    def unreachable(n: int) -> int:
        runs.append(n)
        return n

    with pytest.raises(mistri_locks.ConnectionError):
        unreachable.delay(3)
    assert runs == [0]
