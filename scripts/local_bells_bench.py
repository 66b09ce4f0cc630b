#!/usr/bin/env python3
"""The fleet fan-out on Local (issue 21), a benchmark, not a test.

Pairs/s of one process doing acquire+release on an unrelated key while N
`mistri-locks run KEY_i --stop-key STOP_i -- sleep 600` hold leases on the
same Local file, and the CPU time the N holders spend meanwhile (read from
/proc: the fan-out cost itself, steadier than pairs/s on a shared machine).
Old (baseline) and new builds, interleaved; one JSON line per run. Every
process it starts is killed and reaped.

    # new: this checkout
    cargo build -p mistri_locks_cli && cargo build -p mistri_locks_core --example local_pairs
    # old: a checkout of the baseline (e.g. git worktree add /tmp/base ca0d256), built with
    # CARGO_TARGET_DIR=/tmp/base-target (CLI), and core/examples/local_pairs.rs compiled
    # against it as a throwaway crate named local_pairs_base in the same target dir
    BENCH_NS="0 10 100" BENCH_ROUNDS=2 BENCH_SECONDS=3 python3 scripts/local_bells_bench.py

OLD_CLI, OLD_PAIRS, NEW_CLI, NEW_PAIRS override the binaries' paths. Hosts
allow 128 inotify instances per user by default
(fs.inotify.max_user_instances): beyond that many listening processes the
rest poll, in either build."""
import os, signal, sqlite3, subprocess, sys, time, shutil, json

E = os.environ.get
VERSIONS = {
    "old": (E("OLD_CLI", "/tmp/base-target/debug/mistri-locks"),
            E("OLD_PAIRS", "/tmp/base-target/debug/local_pairs_base")),
    "new": (E("NEW_CLI", "target/debug/mistri-locks"),
            E("NEW_PAIRS", "target/debug/examples/local_pairs")),
}
NS = [int(n) for n in os.environ.get("BENCH_NS", "0 10 100").split()]
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
SECONDS = os.environ.get("BENCH_SECONDS", "3")
ROOT = "/tmp/bells-bench"

def held(db):
    try:
        con = sqlite3.connect(db, timeout=5)
        n = con.execute("SELECT COUNT(*) FROM leases WHERE key LIKE 'fan:key-%' AND holder IS NOT NULL").fetchone()[0]
        con.close()
        return n
    except sqlite3.Error:
        return -1

TICK = os.sysconf("SC_CLK_TCK")

def fleet_cpu(procs):
    """CPU seconds (user + system) used so far by the fleet's processes."""
    total = 0
    for p in procs:
        try:
            with open(f"/proc/{p.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / TICK

def one(version, n, rnd):
    cli, pairs = VERSIONS[version]
    d = f"{ROOT}/{version}-{n}-{rnd}"
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d, mode=0o700)
    db = f"{d}/locks.db"
    # Make the file first, so N processes don't all create the schema at once.
    subprocess.run([cli, "--url", db, "list"], check=True, stdout=subprocess.DEVNULL)
    procs = []
    try:
        start = time.time()
        # In batches of 20, a process that gave up respawned: many (debug)
        # processes opening the file at once can starve each other's first
        # transactions past the 5 s busy timeout (the same in both versions).
        def spawn(i):
            return subprocess.Popen(
                [cli, "--url", db, "run", f"fan:key-{i}", "--stop-key", f"fan:stop-{i}", "--", "sleep", "600"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for first in range(0, n, 20):
            procs.extend(spawn(i) for i in range(first, min(n, first + 20)))
            while held(db) < len(procs):
                for i, p in enumerate(procs):
                    if p.poll() is not None:
                        procs[i] = spawn(i)
                if time.time() - start > 400:
                    raise RuntimeError(f"only {held(db)} of {n} held")
                time.sleep(0.2)
        time.sleep(3 + 0.01 * n)  # their start-up settles (first reads, bells made)
        bells = len(os.listdir(db + "-bells")) if os.path.isdir(db + "-bells") else 0
        idle0 = fleet_cpu(procs)
        time.sleep(1)
        idle = fleet_cpu(procs) - idle0
        cpu0 = fleet_cpu(procs)
        out = subprocess.run([pairs, db, "fan:pairs", SECONDS], check=True,
                             capture_output=True, text=True).stdout
        busy = fleet_cpu(procs) - cpu0
        rate = float(out.split("pairs_per_s=")[1].split()[0])
        pairs_done = int(out.split("pairs=")[1].split()[0])
        return rate, bells, idle, busy, pairs_done
    finally:
        for p in procs:
            try:
                p.kill()
            except ProcessLookupError:
                pass
        for p in procs:
            p.wait()
        shutil.rmtree(d, ignore_errors=True)

results = []
for rnd in range(ROUNDS):
    for n in NS:
        for version in ("old", "new"):
            rate, bells, idle, busy, done = one(version, n, rnd)
            load = os.getloadavg()[0]
            print(json.dumps({"round": rnd, "n": n, "version": version, "pairs_per_s": rate,
                              "fleet_cpu_s_idle_1s": round(idle, 2),
                              "fleet_cpu_s_during_pairs": round(busy, 2),
                              "fleet_cpu_ms_per_1000_pairs": round(1e6 * busy / max(done, 1), 1),
                              "bell_files": bells, "load1": round(load, 2)}), flush=True)
            results.append((rnd, n, version, rate))
