#!/usr/bin/env bash
# The cross-language matrix on one throwaway redis-server, then on one
# throwaway PostgreSQL, then on one throwaway MariaDB: C, Python, Ruby and Node
# each hold a lease that each of them stops with a flag, and every face (Rust
# through the mistri-locks command) reads who holds it (tests/interop/run.py).
# Needs the faces built: scripts/test runs it after the Python, Ruby and
# Node suites (bindings/python/.venv, bindings/ruby/lib/mistri_locks/*.so,
# bindings/node/mistri_locks.*.node).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
PY="${MISTRI_PYTHON:-$ROOT/bindings/python/.venv/bin/python}"
[ -x "$PY" ] || { echo "interop: no $PY (run bindings/python/test.sh first)" >&2; exit 1; }
[ -f bindings/ruby/lib/mistri_locks/mistri_locks.so ] || bindings/ruby/build.sh
ls bindings/node/mistri_locks.*.node >/dev/null 2>&1 || { [ -d bindings/node/node_modules ] &&
  (cd bindings/node && npm run build --silent); } ||
  { echo "interop: no Node addon (cd bindings/node && npm ci && npm run build)" >&2; exit 1; }

cargo build -q -p mistri_locks_ffi -p mistri_locks_cli
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mistri-interop-c.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
ln -sf "$TARGET_DIR/debug/libmistri_locks.so" "$WORK/libmistri_locks.so.0"
ln -sf "$TARGET_DIR/debug/libmistri_locks.so" "$WORK/libmistri_locks.so"
gcc -std=c11 -Wall -Wextra -Werror -pedantic -I include tests/interop/agent.c \
  -L"$WORK" -lmistri_locks -Wl,-rpath,"$WORK" -o "$WORK/agent"

python3 tests/interop/run.py "$ROOT" "$WORK/agent" "$PY" "$TARGET_DIR/debug/mistri-locks"
