"""Fixtures: a throwaway redis-server, PostgreSQL and MariaDB, and the backend
factories the contract suite is parametrized over.

Adding a backend (e.g. "local", an SQLite file) means adding one factory
class and one line in ``BACKENDS``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Callable, Iterator

import pytest

import mistri_locks

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "support"))
import throwaway_postgres  # noqa: E402  (tests/support/throwaway_postgres.py)
import throwaway_mariadb  # noqa: E402  (tests/support/throwaway_mariadb.py)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A redis-server on a free loopback port (or ``port``: one a test kept
    closed until now), no persistence, own dir."""

    def __init__(self, port: int = 0) -> None:
        self.dir = tempfile.mkdtemp(prefix="mistri-py-redis-")
        last = ""
        for _ in range(1 if port else 5):
            self.port = port or free_port()
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", self.dir],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    if self.command("PING") == "+PONG":
                        return
                except OSError:
                    time.sleep(0.02)
            last = self.proc.stderr.read().decode() if self.proc.poll() is not None else "timeout"
            self.proc.kill()
            self.proc.wait()
        raise RuntimeError(f"redis-server did not start: {last}")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self, *args: str) -> str:
        """One command in RESP; returns the first reply line."""
        payload = f"*{len(args)}\r\n" + "".join(
            f"${len(a.encode())}\r\n{a}\r\n" for a in args
        )
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(payload.encode())
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
        return reply.decode().split("\r\n")[0]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (scripts/setup installs it)")
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[throwaway_postgres.Server]:
    """A throwaway PostgreSQL for the session (initdb as the postgres user
    when root, a free loopback port), stopped and removed afterwards."""
    try:
        server = throwaway_postgres.start()
    except RuntimeError as e:
        pytest.fail(f"{e} (scripts/setup installs postgresql)")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[throwaway_mariadb.Server]:
    """A throwaway MariaDB for the session (started on first use, a free
    loopback port, user `mistri` with a password), killed and removed
    afterwards."""
    try:
        server = throwaway_mariadb.start()
    except RuntimeError as e:
        pytest.fail(f"{e} (scripts/setup installs mariadb-server)")
    yield server
    server.stop()


class MemoryBackend:
    """One in-process store; owners share it like processes share Redis."""

    name = "memory"

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.first = mistri_locks.Memory()

    def adapter(self) -> mistri_locks.Locks:
        return self.first

    def owner(self) -> mistri_locks.Locks:
        return self.first.new_owner()

    def delete_lease(self, key: str) -> None:
        assert self.first.break_lease(key)


class LocalBackend:
    """An SQLite file of its own; each owner is a separate adapter object on
    it, as separate processes would be."""

    name = "local"

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.path = request.getfixturevalue("tmp_path") / "locks.db"
        self.first = self.owner()

    def adapter(self) -> mistri_locks.Locks:
        return self.first

    def owner(self) -> mistri_locks.Locks:
        return mistri_locks.Local(self.path)

    def delete_lease(self, key: str) -> None:
        assert self.first.break_lease(key)


class RedisBackend:
    """A unique namespace on the session's redis-server; each owner is a
    separate adapter object with its own connections."""

    name = "redis"

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.server: RedisServer = request.getfixturevalue("redis_server")
        self.namespace = f"mistri:test:{uuid.uuid4().hex}"
        self.first = self.owner()

    def adapter(self) -> mistri_locks.Locks:
        return self.first

    def owner(self) -> mistri_locks.Locks:
        return mistri_locks.Redis(self.server.url, namespace=self.namespace)

    def delete_lease(self, key: str) -> None:
        assert self.server.command("DEL", f"{self.namespace}:lease:{{{key}}}") == ":1"



class PostgresBackend:
    """A unique namespace in the session's PostgreSQL database; each owner
    is a separate adapter object with its own connections."""

    name = "postgres"

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.server: throwaway_postgres.Server = request.getfixturevalue("postgres_server")
        self.namespace = f"mistri:test:{uuid.uuid4().hex}"
        self.first = self.owner()

    def adapter(self) -> mistri_locks.Locks:
        return self.first

    def owner(self) -> mistri_locks.Locks:
        return mistri_locks.Postgres(self.server.url, namespace=self.namespace)

    def delete_lease(self, key: str) -> None:
        # Behind the holder's back, as an operator would.
        assert mistri_locks.Postgres(self.server.url, namespace=self.namespace).break_lease(key)


class MysqlBackend:
    """A unique namespace in the session's MariaDB database, opened by its
    mysql:// URL; each owner is a separate adapter object with its own
    connections."""

    name = "mysql"

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.server: throwaway_mariadb.Server = request.getfixturevalue("mariadb_server")
        self.namespace = f"mistri:test:{uuid.uuid4().hex}"
        self.first = self.owner()

    def adapter(self) -> mistri_locks.Locks:
        return self.first

    def owner(self) -> mistri_locks.Locks:
        return mistri_locks.open(self.server.url, namespace=self.namespace)

    def delete_lease(self, key: str) -> None:
        # Behind the holder's back, as an operator would.
        assert mistri_locks.open(self.server.url, namespace=self.namespace).break_lease(key)


BACKENDS: dict[str, Callable[[pytest.FixtureRequest], object]] = {
    "memory": MemoryBackend,
    "redis": RedisBackend,
    "local": LocalBackend,
    "postgres": PostgresBackend,
    "mysql": MysqlBackend,
}


@pytest.fixture(params=list(BACKENDS))
def backend(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    return BACKENDS[request.param](request)


@pytest.fixture
def redis_backend(request: pytest.FixtureRequest) -> RedisBackend:
    return RedisBackend(request)


@pytest.fixture(autouse=True)
def _unconfigured() -> Iterator[None]:
    """Every test starts and ends with no process-wide adapter."""
    mistri_locks.configure(None)
    yield
    mistri_locks.configure(None)


def python_child(code: str, *args: str) -> subprocess.Popen[str]:
    """Starts `python -c code` with this interpreter and environment."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
