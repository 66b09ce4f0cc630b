#!/usr/bin/env bash
# The operator's page in a real browser: Debian's chromium (/usr/bin/chromium)
# driven by npm playwright-core (installed here into tests/web/node_modules,
# pinned by package-lock.json; no browser download), against
# `mistri-locks serve --allow-actions` on a throwaway redis-server (a free
# 127.0.0.1 port) and on a Local file. The Redis run saves a screenshot of
# the page (20 leases, waiters, a flag, a stuck holder) to
# $TARGET_DIR/operating-page.png, or to SCREENSHOT=PATH (the one in the docs:
# SCREENSHOT=docs/operating-page.png); the Local run also pages and filters
# 10,000 leases. Both runs watch a waiting C process (tests/web/c_waiter.c,
# built here against the build tree's libmistri_locks) show as a waiter and
# then as the holder. See tests/web/browser.mjs for the cases.
#
#   bash tests/web/run.sh          (honours CARGO_TARGET_DIR)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"

[ -x /usr/bin/chromium ] || { echo "tests/web/run.sh: no /usr/bin/chromium (scripts/setup installs it)" >&2; exit 1; }
if [ ! -d "$HERE/node_modules/playwright-core" ]; then
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error)
fi

cargo build -q -p mistri_locks_cli
cargo build -q -p mistri_locks_core --example operator_bench
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
BIN="$TARGET_DIR/debug/mistri-locks"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mistri-web-test.XXXXXX")
REDIS_PID=""
cleanup() {
  [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null || true
  [ -n "$REDIS_PID" ] && wait "$REDIS_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$WORK" --logfile "$WORK/redis.log" &
REDIS_PID=$!
for _ in $(seq 200); do
  redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && break
  kill -0 "$REDIS_PID" 2>/dev/null || { cat "$WORK/redis.log"; exit 1; }
  sleep 0.05
done

"$TARGET_DIR/debug/examples/operator_bench" 10000 --fill "$WORK/big.db"

# The waiting C process (tests/web/c_waiter.c), against the build tree's
# library under its SONAME.
cargo build -q -p mistri_locks_ffi
mkdir -p "$WORK/lib"
ln -sf "$TARGET_DIR/debug/libmistri_locks.so" "$WORK/lib/libmistri_locks.so.0"
ln -sf "$TARGET_DIR/debug/libmistri_locks.so" "$WORK/lib/libmistri_locks.so"
gcc -std=c11 -Wall -Wextra -Werror -pedantic -I"$ROOT/include" "$HERE/c_waiter.c" \
  -L"$WORK/lib" -lmistri_locks -Wl,-rpath,"$WORK/lib" -lpthread -lm -o "$WORK/c_waiter"

# The Python holder (tests/web/py_holder.py) needs the built extension: the
# virtualenv bindings/python/test.sh leaves (scripts/test runs it first), or
# one built here as scripts/demo builds it.
VENV="$ROOT/bindings/python/.venv"
if ! "$VENV/bin/python" -c 'import mistri_locks' 2>/dev/null; then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/python" -c 'import maturin' 2>/dev/null ||
    "$VENV/bin/python" -m pip install -q "maturin>=1.16,<1.17"
  (cd "$ROOT/bindings/python" && VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" \
    CARGO_TARGET_DIR="$TARGET_DIR" "$VENV/bin/maturin" develop -q)
fi

node "$HERE/browser.mjs" "$BIN" "redis://127.0.0.1:$PORT/0" redis --c-waiter "$WORK/c_waiter" \
  --python "$VENV/bin/python" --screenshot "${SCREENSHOT:-$TARGET_DIR/operating-page.png}"
node "$HERE/browser.mjs" "$BIN" "$WORK/local.db" local --c-waiter "$WORK/c_waiter" \
  --python "$VENV/bin/python" --big "$WORK/big.db"
