#!/usr/bin/env bash
# Release build of mistri_locks into its own venv, the contenders installed
# next to it, then bench.py. Not part of the tests.
#
#   bindings/python/bench.sh [bench.py args...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${VENV:-$here/.venv-bench}"
[[ -x "$venv/bin/python" ]] || "${PYTHON:-python3}" -m venv "$venv"
if ! "$venv/bin/python" -c 'import maturin, redis, redis_lock' 2>/dev/null; then
    "$venv/bin/python" -m pip install -q "maturin>=1.16,<1.17" "redis>=5" "python-redis-lock>=4"
fi
cd "$here"
VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" "$venv/bin/maturin" develop -q --release
cd "$here/tests"  # import the installed package, not the source dir
exec "$venv/bin/python" "$here/bench.py" "$@"
