#!/usr/bin/env python3
"""A throwaway MariaDB server for the test suites that are not Rust
(ffi/test.sh, the Python and Ruby suites, tests/interop/run.sh); the Rust
tests have tests/support/src/mariadb.rs, whose settings this copies.

`mariadb-install-db` into a fresh folder, then `mariadbd` on a free
127.0.0.1 port, killed and removed afterwards. Debian's mariadb-server and
mariadb-client (scripts/setup installs them) put `mariadbd` in /usr/sbin;
the programs are looked up in $MARIADB_BINDIR, on PATH, in /usr/sbin and
/usr/bin. Every program gets `--no-defaults` (no /etc/mysql, no ~/.my.cnf).

- Accounts: `root` with no password over the unix socket in the folder
  (`Server.sql`); the clients under test get a database `mistri` and a user
  `mistri` whose password must be percent-encoded in a URL, with every
  privilege on that database and none beyond it:
  mysql://mistri:pw%3Amistri%2F41@127.0.0.1:PORT/mistri
- Root: mariadbd runs as root only when told `--user=root` (it then keeps
  its uid), as CI does; as any other user it runs as that user.
- Folder: under /dev/shm (a tmpfs: mariadb-install-db takes 0.6 s there,
  3-4 s on this machine's disk) when it is writable with >= 1 GiB free,
  else the temp dir; $MARIADB_SCRATCH overrides. About 35 MB a server. A
  folder whose server is gone (its starter was killed) is removed by the
  next start. `innodb_flush_log_at_trx_commit=2`: a commit reaches the
  kernel before it returns (the data is thrown away anyway).

As a module (the server dies with the thread that started it, by
PR_SET_PDEATHSIG, if stop() never runs):

    server = throwaway_mariadb.start()   # .url, .port, .dir, .pid, .sql(sql)
    ...
    server.stop()

As a command (for shell and Ruby harnesses; the server outlives the
command):

    throwaway_mariadb.py start DIR   # prints the URL; the server runs on
    throwaway_mariadb.py stop DIR    # kills it and removes its folders

DIR must not exist yet (start creates it; it holds the port, the pid and
the name of the server's folder, which may be elsewhere, on /dev/shm).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

DB = "mistri"
USER = "mistri"
PASSWORD = "pw:mistri/41"  # ':' and '/' must be percent-encoded in a URL
PREFIX = "mistri-mariadb-py-"  # not "mistri-mariadb-PID-": the Rust harness sweeps those
START_WITHIN = 60.0
SQL_WITHIN = 20.0

# Settings mariadb-install-db and mariadbd must agree on (tests/support/src/mariadb.rs).
INNODB = [
    "--innodb-buffer-pool-size=32M",
    "--innodb-autoextend-increment=8",
    "--innodb-log-file-size=16M",
    "--innodb-data-file-path=ibdata1:4M:autoextend",
    "--innodb-flush-log-at-trx-commit=2",
    "--innodb-doublewrite=0",
]


def program(name: str) -> str:
    dirs = [os.environ["MARIADB_BINDIR"]] if os.environ.get("MARIADB_BINDIR") else []
    dirs += os.environ.get("PATH", "").split(os.pathsep) + ["/usr/sbin", "/usr/bin"]
    for d in dirs:
        path = os.path.join(d, name)
        if d and os.access(path, os.X_OK):
            return path
    raise RuntimeError(
        f"{name} not found ($MARIADB_BINDIR, PATH, /usr/sbin, /usr/bin): install the MariaDB "
        "server (scripts/setup: mariadb-server mariadb-client)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("MYSQL_PWD", "MYSQL_HOST", "MYSQL_TCP_PORT", "MYSQL_UNIX_PORT"):
        env.pop(name, None)
    return env


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def scratch_parent() -> str:
    if os.environ.get("MARIADB_SCRATCH"):
        return os.environ["MARIADB_SCRATCH"]
    parent = tempfile.gettempdir()
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize >= 1 << 30 and os.access("/dev/shm", os.W_OK | os.X_OK):
            parent = "/dev/shm"
    except OSError:
        pass
    _sweep(parent)
    return parent


def _sweep(parent: str) -> None:
    """Removes this harness's folders whose server is gone and that are
    older than a start may take (a starter killed before stop)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(PREFIX):
            continue
        path = os.path.join(parent, name)
        try:
            if time.time() - os.stat(path).st_mtime < 2 * START_WITHIN:
                continue
            with open(os.path.join(path, "mariadbd.pid")) as f:
                if _alive(int(f.read().strip() or 0)):
                    continue
        except (OSError, ValueError):
            pass
        shutil.rmtree(path, ignore_errors=True)


class Server:
    """A running throwaway server; `url` names its database `mistri` as the
    user `mistri`."""

    def __init__(self, base: str, port: int, pid: int, proc: subprocess.Popen[bytes] | None = None):
        self.base = base
        self.port = port
        self.pid = pid
        self._proc = proc

    @property
    def dir(self) -> str:
        """The server's folder (data, socket, log)."""
        return self.base

    @property
    def socket_path(self) -> str:
        return os.path.join(self.base, "mariadbd.sock")

    @property
    def url(self) -> str:
        password = urllib.parse.quote(PASSWORD, safe="")
        return f"mysql://{USER}:{password}@127.0.0.1:{self.port}/{DB}"

    def sql(self, sql: str, database: str | None = DB) -> str:
        """Runs `sql` (`;`-separated statements) with the mariadb client as
        root over the unix socket; returns the batch output without column
        names (tab-separated columns, one row a line). Raises on an error."""
        argv = [program("mariadb"), "--no-defaults", f"--socket={self.socket_path}",
                "--protocol=SOCKET", "--user=root", "--batch", "--skip-column-names",
                "--connect-timeout=5", "--execute", sql]
        if database:
            argv.append(f"--database={database}")
        out = subprocess.run(argv, capture_output=True, text=True, timeout=SQL_WITHIN,
                             stdin=subprocess.DEVNULL, env=_env())
        if out.returncode != 0:
            raise RuntimeError(f"mariadb client failed: {out.stderr.strip() or out.stdout.strip()}")
        return out.stdout.rstrip("\n")

    def log_tail(self) -> str:
        try:
            with open(os.path.join(self.base, "error.log"), errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Kills the server (SIGKILL: its data is thrown away) and removes
        its folder. Idempotent."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None
        elif self.pid and _alive(self.pid) and _is_our_server(self.pid, self.base):
            os.kill(self.pid, signal.SIGKILL)
            deadline = time.monotonic() + 20
            while _alive(self.pid) and _is_our_server(self.pid, self.base):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
        self.pid = 0
        shutil.rmtree(self.base, ignore_errors=True)


def _is_our_server(pid: int, base: str) -> bool:
    """Whether `pid` is still a mariadbd on this folder (not a reused pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
        with open(f"/proc/{pid}/stat") as f:
            zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False
    return not zombie and f"--datadir={base}/data".encode() in args


def _greets(port: int) -> bool:
    """Whether the port answers with a protocol-10 handshake (mariadbd opens
    its port only once it is ready to serve)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            head = b""
            while len(head) < 5:
                chunk = s.recv(5 - len(head))
                if not chunk:
                    return False
                head += chunk
            return head[4] == 10
    except OSError:
        return False


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: PR_SET_PDEATHSIG (1), SIGKILL.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


def _try_start(detached: bool) -> Server:
    base = tempfile.mkdtemp(prefix=PREFIX, dir=scratch_parent())
    os.makedirs(os.path.join(base, "tmp"))
    as_root = ["--user=root"] if os.geteuid() == 0 else []
    data = os.path.join(base, "data")
    try:
        install = subprocess.run(
            [program("mariadb-install-db"), "--no-defaults", f"--datadir={data}",
             "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve",
             *INNODB, *as_root],
            capture_output=True, text=True, timeout=START_WITHIN, cwd=base,
            stdin=subprocess.DEVNULL, env=_env(),
        )
        if install.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {install.stderr}{install.stdout}")
        port = free_port()
        argv = [program("mariadbd"), "--no-defaults", f"--datadir={data}",
                f"--socket={os.path.join(base, 'mariadbd.sock')}",
                f"--pid-file={os.path.join(base, 'mariadbd.pid')}",
                f"--log-error={os.path.join(base, 'error.log')}",
                f"--tmpdir={os.path.join(base, 'tmp')}", f"--port={port}",
                "--bind-address=127.0.0.1", "--skip-name-resolve", "--skip-log-bin",
                "--performance-schema=OFF", "--max-connections=1000",
                "--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci",
                *INNODB, *as_root]
        if detached:
            # Outlives this command: its own session, no pipe of ours held open.
            proc = subprocess.Popen(argv, cwd=base, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True, env=_env())
        else:
            proc = subprocess.Popen(argv, cwd=base, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    preexec_fn=_die_with_parent, env=_env())
        server = Server(base, port, proc.pid, proc)
        deadline = time.monotonic() + START_WITHIN
        while not _greets(port):
            if proc.poll() is not None:
                raise RuntimeError(f"mariadbd exited early ({proc.returncode}): {server.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"mariadbd did not answer within {START_WITHIN} s: "
                                   f"{server.log_tail()}")
            time.sleep(0.01)
        quoted = PASSWORD.replace("\\", "\\\\").replace("'", "\\'")
        server.sql(
            f"CREATE DATABASE {DB} CHARACTER SET utf8mb4; "
            f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{quoted}'; "
            f"GRANT ALL ON {DB}.* TO '{USER}'@'%'",
            database=None,
        )
        if detached:
            server._proc = None  # the command exits; `stop DIR` kills it by pid
        return server
    except BaseException:
        if "proc" in locals() and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(base, ignore_errors=True)
        raise


def start(detached: bool = False) -> Server:
    """A fresh server on a free port (three tries: a port taken between the
    probe and the bind fails a start)."""
    last: Exception | None = None
    for _ in range(3):
        try:
            return _try_start(detached)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            last = e
    raise RuntimeError(f"could not start a MariaDB server: {last}")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("start", "stop"):
        print(__doc__, file=sys.stderr)
        return 2
    dir = os.path.abspath(argv[2])
    if argv[1] == "start":
        os.makedirs(dir)
        try:
            server = start(detached=True)
        except RuntimeError as e:
            shutil.rmtree(dir, ignore_errors=True)
            print(f"throwaway_mariadb: {e}", file=sys.stderr)
            return 1
        with open(os.path.join(dir, "server"), "w") as f:
            f.write(f"{server.port} {server.pid} {server.base}\n")
        print(server.url, flush=True)
        return 0
    try:
        with open(os.path.join(dir, "server")) as f:
            port, pid, base = f.read().split(maxsplit=2)
        Server(base.strip(), int(port), int(pid)).stop()
    except (OSError, ValueError):
        pass
    shutil.rmtree(dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
