#!/usr/bin/env bash
# Builds the Python extension and runs its checks: mypy stubtest (the .pyi
# must match the native module), mypy --strict on the package, and pytest
# (the contract suite against Memory and a throwaway redis-server, plus
# signals, processes, fork, Ctrl-C).
#
#   bindings/python/test.sh [pytest args...]
#
# Environment: PYTHON (default python3, >= 3.9), VENV (default
# bindings/python/.venv), CARGO_TARGET_DIR (default: the workspace's).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

python="${PYTHON:-python3}"
venv="${VENV:-$here/.venv}"
# Pinned so a rerun needs no network and results don't drift.
tools=("maturin>=1.16,<1.17" "pytest>=8,<10" "mypy>=1.18,<3" "typing_extensions>=4.10")
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
exec "$venv/bin/python" -m pytest -c "$here/pyproject.toml" --rootdir "$here" "$@" "$here/tests"
