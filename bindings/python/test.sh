#!/usr/bin/env bash
# Builds the Python extension and runs its checks: no import cycle among
# the crate's modules (scripts/check_cycles.py), mypy stubtest (the .pyi
# must match the native module), mypy --strict on the package, and pytest
# (the contract suite against Memory, Local, a throwaway redis-server and a
# throwaway PostgreSQL, plus
# signals, processes, fork, Ctrl-C, asyncio), then installs the sdist into a
# fresh virtualenv (compiling it) and imports it from outside the checkout.
#
#   bindings/python/test.sh [pytest args...]
#
# Environment: PYTHON (default python3, >= 3.9), VENV (default
# bindings/python/.venv), CARGO_TARGET_DIR (default: the workspace's),
# SOURCE_BUILD=0 (skip the sdist check).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

python="${PYTHON:-python3}"
venv="${VENV:-$here/.venv}"
# Pinned so a rerun needs no network and results don't drift.
# psycopg: tests/test_postgres.py writes through fence_check as an app would.
tools=("maturin>=1.16,<1.17" "pytest>=8,<10" "mypy>=1.18,<3" "typing_extensions>=4.10"
       "psycopg[binary]>=3.1,<4"
       # PyMySQL: tests/test_mysql.py writes through mistri_fence_check as an app would.
       "PyMySQL>=1.1,<2"
       # The task faces (mistri_locks.integrations.celery, .django, .dramatiq) run against the
       # real frameworks; celery_once is the benchmark's peer (bench_celery.py).
       "celery[redis]>=5.4,<6" "django>=4.2,<6" "dramatiq[redis]>=1.17,<2" "rq>=1.16,<3"
       "celery_once>=3,<4"
       # mistri_locks.metrics.Collector's tests (the package stays optional for users).
       "prometheus-client>=0.20,<1")
stamp="$venv/.mistri-tools"
want="$("$python" -c 'import sys; print(sys.version)') ${tools[*]}"

if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q "${tools[@]}"
    printf '%s' "$want" >"$stamp"
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps \
    | "$venv/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')}"

echo "== import cycles: the modules of src/"
"$venv/bin/python" "$here/../../scripts/check_cycles.py" "$here/src"

echo "== build: maturin develop (debug) into $venv"
VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" "$venv/bin/maturin" develop -q

# Run the checks from outside the source tree so that `mistri_locks` is the
# installed package (editable: it points at python/ plus the built .so).
cd "$here/tests"

echo "== stubtest: python/mistri_locks/_native.pyi against the native module"
"$venv/bin/python" -m mypy.stubtest mistri_locks

echo "== mypy --strict: the package"
"$venv/bin/python" -m mypy --strict --no-error-summary -p mistri_locks

echo "== pytest"
"$venv/bin/python" -m pytest -c "$here/pyproject.toml" --rootdir "$here" "$@" "$here/tests"

# The sdist, as a user installs it: `maturin sdist` (which packs the core
# crate), then `pip install` of it into a fresh virtualenv (a release build
# by the maturin that pip fetches for the build), then import it from
# outside the checkout. Compiled dependencies are shared across runs (and
# with the Ruby source-gem check) through one CARGO_TARGET_DIR; the core
# and Python crates are cleaned from it first, so they compile every time.
# SOURCE_BUILD=0 leaves this out while iterating.
if [[ "${SOURCE_BUILD:-1}" != 0 ]]; then
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    "$venv/bin/maturin" sdist -o "$work" --manifest-path "$here/Cargo.toml" 2>"$work/sdist.log" ||
        { cat "$work/sdist.log"; exit 1; }
    sdist="$(ls "$work"/*.tar.gz)"
    [[ "$(tar tzf "$sdist")" == *"/core/src/lib.rs"* ]] || { echo "the sdist lacks the core crate"; exit 1; }
    echo "== sdist: pip install $(basename "$sdist") into a fresh venv (release build)"
    "$python" -m venv "$work/venv"
    # Same sources keep cargo's artifacts fresh: drop ours so they compile.
    cargo clean -q --release --target-dir "$CARGO_TARGET_DIR/source-builds" \
        -p mistri_locks_core -p mistri_locks_py
    started=$SECONDS
    (cd "$work" && CARGO_TARGET_DIR="$CARGO_TARGET_DIR/source-builds" \
        "$work/venv/bin/python" -m pip install -q --no-cache-dir "$sdist" >"$work/install.log" 2>&1) ||
        { cat "$work/install.log"; exit 1; }
    echo "   built and installed in $((SECONDS - started)) s"
    (cd "$work" && env -u PYTHONPATH "$work/venv/bin/python" -c '
import asyncio, os, sys
import mistri_locks, mistri_locks._native as native
venv = os.path.realpath(sys.prefix)
assert os.path.realpath(native.__file__).startswith(venv), native.__file__
a = mistri_locks.Memory()
assert a.acquire("src", 5) is True and a.new_owner().acquire("src", 5) is False
async def main() -> int:
    async with a.hold_async("job", ttl=2, heartbeat=0.1) as h:
        assert h is not None
        return h.fence
assert asyncio.run(main()) > 0 and not a.held("job")
print("   import mistri_locks from the installed sdist: ok (" + native.__file__ + ")")
')
fi
