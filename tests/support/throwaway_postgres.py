#!/usr/bin/env python3
"""A throwaway PostgreSQL server for the test suites that are not Rust
(ffi/test.sh, the Python and Ruby suites, tests/interop/run.sh); the Rust
tests have tests/support/src/postgres.rs.

initdb into a fresh folder, pg_ctl on a free 127.0.0.1 port (trust
authentication, no fsync: the data is thrown away), stopped and removed
afterwards. The server binaries are where `pg_config --bindir` says
(Debian keeps them off PATH). initdb and postgres refuse to run as root:
as root, they run as the `postgres` user, in a folder it owns.

As a module:

    server = throwaway_postgres.start()   # .url, .port, .dir, .psql(sql)
    ...
    server.stop()

As a command (for shell and Ruby harnesses):

    throwaway_postgres.py start DIR   # prints the URL; the server runs on
    throwaway_postgres.py stop DIR    # stops it and removes DIR

DIR must not exist yet (start creates it) and should live under /tmp (as
root, the postgres user must be able to reach it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

DB = "mistri"


def bindir() -> str:
    try:
        out = subprocess.run(["pg_config", "--bindir"], check=True, capture_output=True, text=True)
        path = out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        path = "/usr/lib/postgresql/15/bin"
    if not os.path.exists(os.path.join(path, "initdb")):
        raise RuntimeError(
            f"no initdb in {path}: install the PostgreSQL server (scripts/setup: postgresql)"
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


class Server:
    """A running throwaway server; `url` names its database `mistri`."""

    def __init__(self, dir: str, port: int) -> None:
        self.dir = dir
        self.port = port

    @property
    def data(self) -> str:
        return os.path.join(self.dir, "data")

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{DB}"

    def psql(self, sql: str) -> str:
        """Runs `sql` with psql as the superuser; returns the unaligned output."""
        out = subprocess.run(
            ["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
             "-p", str(self.port), "-U", "postgres", "-d", DB, "-c", sql],
            check=True, capture_output=True, text=True, timeout=30,
        )
        return out.stdout.strip()

    def stop(self) -> None:
        subprocess.run(
            _as_server_user([os.path.join(bindir(), "pg_ctl"), "-D", self.data, "-m", "immediate",
                             "-w", "-t", "20", "stop"]),
            capture_output=True, timeout=60,
        )
        shutil.rmtree(self.dir, ignore_errors=True)


def start(dir: str | None = None) -> Server:
    """initdb + pg_ctl start in `dir` (made fresh; default: a new temp folder)."""
    if dir is None:
        dir = tempfile.mkdtemp(prefix="mistri-pg-", dir="/tmp")
    else:
        os.makedirs(dir)
    bin = bindir()
    data = os.path.join(dir, "data")
    if os.geteuid() == 0:
        shutil.chown(dir, "postgres", "postgres")
    os.chmod(dir, 0o755)
    init = subprocess.run(
        _as_server_user([os.path.join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres",
                         "--no-sync", "-E", "UTF8", "--locale=C"]),
        capture_output=True, text=True,
    )
    if init.returncode != 0:
        raise RuntimeError(f"initdb failed: {init.stderr.strip() or init.stdout.strip()}")
    last = ""
    for _ in range(5):
        port = free_port()
        opts = (f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={dir} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c max_connections=200")
        run = subprocess.run(
            _as_server_user([os.path.join(bin, "pg_ctl"), "-D", data, "-o", opts, "-w", "-t", "30",
                             "-l", os.path.join(dir, "server.log"), "start"]),
            capture_output=True, text=True,
        )
        if run.returncode == 0:
            server = Server(dir, port)
            deadline = time.monotonic() + 20
            while True:
                try:
                    subprocess.run(
                        ["psql", "-X", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                         "-d", "postgres", "-c", f"CREATE DATABASE {DB}"],
                        check=True, capture_output=True, timeout=30,
                    )
                    return server
                except subprocess.CalledProcessError as e:
                    if time.monotonic() > deadline:
                        server.stop()
                        raise RuntimeError(f"createdb failed: {e.stderr!r}") from e
                    time.sleep(0.1)
        try:
            with open(os.path.join(dir, "server.log")) as log:
                last = log.read()[-2000:]
        except OSError:
            last = run.stderr
    shutil.rmtree(dir, ignore_errors=True)
    raise RuntimeError(f"could not start postgres: {last}")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("start", "stop"):
        print(__doc__, file=sys.stderr)
        return 2
    dir = os.path.abspath(argv[2])
    if argv[1] == "start":
        server = start(dir)
        with open(os.path.join(dir, "port"), "w") as f:
            f.write(str(server.port))
        print(server.url, flush=True)
        return 0
    try:
        with open(os.path.join(dir, "port")) as f:
            port = int(f.read())
    except OSError:
        shutil.rmtree(dir, ignore_errors=True)
        return 0
    Server(dir, port).stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
