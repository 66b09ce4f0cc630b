#!/usr/bin/env bash
# Instructions per acquire+release pair, counted by callgrind (exact, and
# not moved by the load on the machine the way rates are): each Python
# contender of bench.py against one throwaway redis-server, as the
# difference of a run with N pairs and one with none (both after the same
# warm-up). For mistri_locks also where they go: the core's
# Locks::acquire + Locks::release (the same calls the Rust example makes),
# the face (pyo3 entry, argument conversion, GIL release), and the rest
# (the interpreter running the loop; valgrind counts each byte of a
# `rep stos` memset as an instruction, so the core's figure is inflated
# by redis-rs zeroing its read buffer). Not part of the tests.
#
#   bindings/python/pair_cost.sh [N] [--before OLD_native.so]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
n="${1:-2000}"
shift || true
venv="${VENV:-$here/.venv-bench}"
[[ -x "$venv/bin/python" ]] || "${PYTHON:-python3}" -m venv "$venv"
if ! "$venv/bin/python" -c 'import maturin, redis, redis_lock' 2>/dev/null; then
    "$venv/bin/python" -m pip install -q "maturin>=1.16,<1.17" "redis>=5" "python-redis-lock>=4"
fi
(cd "$here" && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" "$venv/bin/maturin" develop -q --release) >&2

work="$(mktemp -d "${TMPDIR:-/tmp}/mistri-paircost.XXXXXX")"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
last=$(($(nproc) - 1))
taskset -c "$last" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$work" >/dev/null &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done

contenders=(mistri redis-py prl raw)
[[ "${1:-}" == --before ]] && contenders=(mistri before redis-py prl raw)
cd "$here/tests"  # the installed package, not the source dir
for who in "${contenders[@]}"; do
    for k in 0 "$n"; do
        taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$work/cg.$who.$k" \
            "$venv/bin/python" "$here/bench.py" --port "$port" --pairs "$k" --only "$who" "$@" \
            2>"$work/log.$who.$k" || { cat "$work/log.$who.$k" >&2; exit 1; }
    done
done
"$venv/bin/python" - "$work" "$n" "${contenders[@]}" <<'PY'
import re, subprocess, sys
work, n, who = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def total(path):
    for line in open(path):
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {path}")

def inclusive(path, calls):
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        # Any object: only one build's functions run in a given process.
        m = re.match(r"\s*([\d,]+) \(.*?\)\s+\?\?\?:(.*) \[", line)
        if m:
            found.setdefault(m.group(2).strip(), int(m.group(1).replace(",", "")) / calls)
    return found

print(f"instructions per acquire+release pair (callgrind, {n} pairs; Python {sys.version.split()[0]})")
for w in who:
    per = (total(f"{work}/cg.{w}.{n}") - total(f"{work}/cg.{w}.0")) / n
    line = f"  {w:9s} {per:9,.0f}"
    if w in ("mistri", "before"):
        f = inclusive(f"{work}/cg.{w}.{n}", 200 + n)
        core = f.get("mistri_locks::locks::Locks::acquire", 0) + f.get("mistri_locks::locks::Locks::release", 0)
        entry = f.get("pyo3::impl_::trampoline::trampoline", 0)
        line += (f"   core {core:,.0f} (Locks::acquire+release), face {entry - core:,.0f} "
                 f"(pyo3 entry to return, minus the core), interpreter {per - entry:,.0f}")
    print(line)
PY
