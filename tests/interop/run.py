"""The interop matrix: on one throwaway redis-server, then on one throwaway
PostgreSQL (tests/support/throwaway_postgres.py), then on one throwaway
MariaDB (tests/support/throwaway_mariadb.py), every language holds a
lease with a stop key while every language (itself included) sees it held
and raises the stop flag; the holder's signal must trip within a tick, the
lease must then be free, and fencing numbers must rise across all rounds.
While each language holds, every language (and Rust, through the
`mistri-locks status --json` command) reads who holds it: the holder's own
identity (`host:pid language`) and its fence.

Run by run.sh, which builds the agents first (Node's is tests/interop/agent.mjs
over the addon in bindings/node: a stop from any language aborts its lease.signal)."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

AGENTS = {}  # language -> argv prefix
CLI = []  # the mistri-locks command (the Rust face)
TICK = 0.2  # the agents' heartbeat (tick = min(heartbeat, 1 s))
SLACK = 0.5  # scheduling slack on a loaded machine


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(workdir):
    for _ in range(5):
        port = free_port()
        proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", workdir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline and proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(64).startswith(b"+PONG"):
                        return proc, f"redis://127.0.0.1:{port}/0"
            except OSError:
                time.sleep(0.02)
        proc.kill()
    sys.exit("interop: could not start redis-server")


def wait_for_line(path, prefix, limit):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with open(path) as f:
            for line in f:
                # Only whole lines: an agent's print may land in pieces.
                if line.startswith(prefix) and line.endswith("\n"):
                    return line.strip(), time.monotonic()
        time.sleep(0.005)
    return None, time.monotonic()


def round_trip(holder, stopper, url, ns, key, workdir):
    out = os.path.join(workdir, f"{url.split(':', 1)[0]}-{holder}-{stopper}.out")
    with open(out, "w") as f:
        proc = subprocess.Popen(AGENTS[holder] + ["hold", url, ns, key], stdout=f)
    try:
        held, _ = wait_for_line(out, "HELD", 20)
        if held is None:
            return False, f"{holder} never held ({open(out).read()!r})", None
        fence = int(held.split()[1])
        if holder == stopper:
            problem = check_info(holder, proc.pid, fence, url, ns, key)
            if problem:
                return False, problem, fence
        stop = subprocess.run(AGENTS[stopper] + ["stop", url, ns, key],
                              capture_output=True, text=True, timeout=20)
        raised = time.monotonic()
        if stop.returncode != 0 or "HELD? true" not in stop.stdout.replace("True", "true"):
            return False, f"{stopper} did not see the lease held: {stop.stdout!r}", fence
        stopped, at = wait_for_line(out, "STOPPED", 5)
        if stopped is None:
            return False, f"{holder} was not stopped ({open(out).read()!r})", fence
        took = at - raised
        if took > TICK + SLACK:
            return False, f"{holder} stopped {took:.3f} s after the flag", fence
        if proc.wait(timeout=10) != 0:
            return False, f"{holder} exited {proc.returncode}", fence
        if ("stop:" + key) not in stopped:
            return False, f"reason does not name the stop key: {stopped!r}", fence
        third = [l for l in AGENTS if l not in (holder, stopper)] or [holder]
        check = subprocess.run(AGENTS[third[0]] + ["check", url, ns, key],
                               capture_output=True, text=True, timeout=20)
        if "held=false" not in check.stdout:
            return False, f"lease still held after release: {check.stdout!r}", fence
        return True, f"stopped in {took:.3f} s, fence {fence}", fence
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def check_info(holder, pid, fence, url, ns, key):
    """Every face reads the holder's identity and fence; returns a problem or None."""
    want = f"{socket.gethostname()}:{pid} {holder}"
    for reader in AGENTS:
        got = subprocess.run(AGENTS[reader] + ["info", url, ns, key],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        if got != f"INFO {fence} {want}":
            return f"{reader} read {got!r}, want 'INFO {fence} {want}'"
    status = subprocess.run(CLI + ["--url", url, "--namespace", ns, "status", "--json", key],
                            capture_output=True, text=True, timeout=20)
    try:
        lease = json.loads(status.stdout)["leases"][0]
    except (ValueError, KeyError, IndexError):
        return f"mistri-locks status --json printed {status.stdout!r} {status.stderr!r}"
    if lease.get("holder") != want or lease.get("fence") != fence:
        return f"mistri-locks status read {lease!r}, want holder {want!r}, fence {fence}"
    return None


def matrix(backend, url, workdir):
    """Every holder x every stopper on one backend; (passed, failed)."""
    ns, key = f"mistri:interop:{os.getpid()}", "job"
    passed = failed = 0
    last_fence = 0
    for holder in AGENTS:
        for stopper in AGENTS:
            ok, detail, fence = round_trip(holder, stopper, url, ns, key, workdir)
            if ok and fence <= last_fence:
                ok, detail = False, f"fence {fence} after {last_fence}"
            last_fence = max(last_fence, fence or 0)
            print(f"{'ok  ' if ok else 'FAIL'} {backend:<8} hold: {holder:<6} stop: {stopper:<6} {detail}")
            passed += ok
            failed += not ok
    return passed, failed


def main():
    root = sys.argv[1]
    AGENTS["c"] = [sys.argv[2]]
    AGENTS["python"] = [sys.argv[3], os.path.join(root, "tests/interop/agent.py")]
    AGENTS["ruby"] = ["ruby", "-I", os.path.join(root, "bindings/ruby/lib"),
                      os.path.join(root, "tests/interop/agent.rb")]
    AGENTS["node"] = ["node", os.path.join(root, "tests/interop/agent.mjs")]
    CLI.append(sys.argv[4])
    sys.path.insert(0, os.path.join(root, "tests/support"))
    import throwaway_postgres
    import throwaway_mariadb

    with tempfile.TemporaryDirectory(prefix="mistri-interop-") as workdir:
        redis, url = start_redis(workdir)
        try:
            passed, failed = matrix("redis", url, workdir)
        finally:
            redis.kill()
            redis.wait()
        try:
            postgres = throwaway_postgres.start()
        except RuntimeError as e:
            sys.exit(f"interop: {e}")
        try:
            p, f = matrix("postgres", postgres.url, workdir)
            passed, failed = passed + p, failed + f
        finally:
            postgres.stop()
        try:
            mariadb = throwaway_mariadb.start()
        except RuntimeError as e:
            sys.exit(f"interop: {e}")
        try:
            p, f = matrix("mysql", mariadb.url, workdir)
            passed, failed = passed + p, failed + f
        finally:
            mariadb.stop()
    print(f"interop: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
