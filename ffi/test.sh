#!/usr/bin/env bash
# Tests of the C ABI (ffi/): builds libmistri_locks, checks its SONAME and
# header drift, compiles the C tests (gcc -std=c11 -Wall -Wextra -Werror
# -pedantic) against the committed header, runs them (tests/c/contract.c,
# tests/c/options.c, tests/c/waiting.c, tests/c/list_stats.c, tests/c/metrics.c, ...) on
# Memory, Local and on a
# throwaway redis-server (a free 127.0.0.1 port), contract.c also on a
# throwaway PostgreSQL (tests/support/throwaway_postgres.py), again under
# AddressSanitizer + UndefinedBehaviorSanitizer, contract.c also on a
# throwaway MariaDB (tests/support/throwaway_mariadb.py), runs the example worker
# against that server with a stop raised from another process, and checks
# `make -C ffi install PREFIX=...` + pkg-config by building the quick start
# against the installed copy.
#
# Usage: ffi/test.sh        (honours CARGO_TARGET_DIR; needs gcc, make,
#                            pkg-config, redis-server, python3, the
#                            PostgreSQL server and psql, mariadb-server)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
cd "$ROOT"

step() { printf '\n==> %s\n' "$*"; }
die() { echo "ffi/test.sh: $*" >&2; exit 1; }

TARGET_DIR=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mistri-ffi-test.XXXXXX")
REDIS_PID=""
WORKER_PID=""
PG_DIR=""
MYSQL_DIR=""
cleanup() {
  [ -n "$PG_DIR" ] && python3 "$ROOT/tests/support/throwaway_postgres.py" stop "$PG_DIR" || true
  [ -n "$MYSQL_DIR" ] && python3 "$ROOT/tests/support/throwaway_mariadb.py" stop "$MYSQL_DIR" || true
  [ -n "$WORKER_PID" ] && kill "$WORKER_PID" 2>/dev/null || true
  [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null || true
  [ -n "$REDIS_PID" ] && wait "$REDIS_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

CFLAGS=(-std=c11 -Wall -Wextra -Werror -pedantic -g -I"$ROOT/include")
SANITIZE=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)

step "cargo build -p mistri_locks_ffi"
cargo build -p mistri_locks_ffi
LIB="$TARGET_DIR/debug/libmistri_locks.so"
[ -f "$LIB" ] || die "no $LIB"

step "SONAME"
soname=$(readelf -d "$LIB" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
echo "SONAME: $soname"
[ "$soname" = "libmistri_locks.so.0" ] || die "SONAME is '$soname', wanted libmistri_locks.so.0"

step "cargo test -p mistri_locks_ffi (unit tests, header drift)"
cargo test -p mistri_locks_ffi

# Programs record the SONAME, so give the build tree's library that name.
mkdir -p "$WORK/lib"
ln -sf "$LIB" "$WORK/lib/libmistri_locks.so.0"
ln -sf "$LIB" "$WORK/lib/libmistri_locks.so"
LINK=(-L"$WORK/lib" -lmistri_locks -Wl,-rpath,"$WORK/lib" -lpthread -lm)

step "compile the C tests and the example (gcc ${CFLAGS[*]:0:5})"
gcc "${CFLAGS[@]}" tests/c/contract.c "${LINK[@]}" -o "$WORK/contract"
gcc "${CFLAGS[@]}" "${SANITIZE[@]}" tests/c/contract.c "${LINK[@]}" -o "$WORK/contract-asan"
gcc "${CFLAGS[@]}" tests/c/options.c "${LINK[@]}" -o "$WORK/options"
gcc "${CFLAGS[@]}" "${SANITIZE[@]}" tests/c/options.c "${LINK[@]}" -o "$WORK/options-asan"
gcc "${CFLAGS[@]}" tests/c/info.c "${LINK[@]}" -o "$WORK/info"
gcc "${CFLAGS[@]}" "${SANITIZE[@]}" tests/c/scale_out.c "${LINK[@]}" -o "$WORK/scale-out-asan"
gcc "${CFLAGS[@]}" "${SANITIZE[@]}" tests/c/info.c "${LINK[@]}" -o "$WORK/info-asan"
gcc "${CFLAGS[@]}" tests/c/waiting.c "${LINK[@]}" -o "$WORK/waiting"
gcc "${CFLAGS[@]}" "${SANITIZE[@]}" tests/c/waiting.c "${LINK[@]}" -o "$WORK/waiting-asan"
gcc "${CFLAGS[@]}" tests/c/events.c "${LINK[@]}" -o "$WORK/events"
gcc "${CFLAGS[@]}" tests/c/list_stats.c "${LINK[@]}" -o "$WORK/list-stats"
gcc "${CFLAGS[@]}" "${SANITIZE[@]}" tests/c/list_stats.c "${LINK[@]}" -o "$WORK/list-stats-asan"
gcc "${CFLAGS[@]}" "${SANITIZE[@]}" tests/c/events.c "${LINK[@]}" -o "$WORK/events-asan"
gcc "${CFLAGS[@]}" "${SANITIZE[@]}" tests/c/metrics.c "${LINK[@]}" -o "$WORK/metrics-asan"
gcc "${CFLAGS[@]}" "${SANITIZE[@]}" tests/c/url_options.c "${LINK[@]}" -o "$WORK/url-options-asan"
gcc "${CFLAGS[@]}" examples/c/worker.c "${LINK[@]}" -o "$WORK/worker"
gcc "${CFLAGS[@]}" tests/c/quickstart.c "${LINK[@]}" -o "$WORK/quickstart"
# The quick start in ffi/README.md compiles as shown.
python3 - "$HERE/README.md" >"$WORK/readme.c" <<'PY'
import re, sys
blocks = re.findall(r"```c\n(.*?)```", open(sys.argv[1]).read(), re.S)
assert blocks, "no C block in ffi/README.md"
print(blocks[0])
PY
gcc "${CFLAGS[@]}" "$WORK/readme.c" "${LINK[@]}" -o "$WORK/readme"
# A lease borrowed from a listing is const: handing it to
# mistri_lease_info_free (which only takes what mistri_locks_info made) is
# a compile error under the flags above, not a double free at run time.
cat >"$WORK/free-borrowed.c" <<'C'
#include "mistri_locks.h"
void f(const mistri_listing *listing);
void f(const mistri_listing *listing) {
    const mistri_lease_info *info = NULL;
    if (mistri_listing_lease(listing, 0, &info) == MISTRI_OK)
        mistri_lease_info_free(info);
}
C
if gcc "${CFLAGS[@]}" -c "$WORK/free-borrowed.c" -o "$WORK/free-borrowed.o" 2>/dev/null; then
  die "freeing a listed lease compiled: it must not"
fi
echo "freeing a listed lease does not compile"
# The header is also valid C++ (extern "C", no C-only constructs).
if command -v g++ >/dev/null; then
  echo '#include "mistri_locks.h"' |
    g++ -std=c++11 -Wall -Wextra -Werror -pedantic -I"$ROOT/include" -x c++ -fsyntax-only -
  echo "header compiles as C++11"
else
  echo "NOTE: g++ not found, the C++ check of the header did not run (apt-get install g++)"
fi
"$WORK/quickstart"

step "C tests of URL options (an unknown one is MISTRI_INVALID_ARGUMENT at open), under ASan + UBSan"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  timeout 60 "$WORK/url-options-asan"

step "start a throwaway redis-server on a free 127.0.0.1 port"
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
redis_ping() {
  python3 - "$1" <<'PY'
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
    s.sendall(b"PING\r\n")
    sys.exit(0 if s.recv(64).startswith(b"+PONG") else 1)
except OSError:
    sys.exit(1)
PY
}
for attempt in 1 2 3 4 5; do
  PORT=$(free_port)
  redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$WORK" --logfile "$WORK/redis.log" &
  REDIS_PID=$!
  for _ in $(seq 100); do
    redis_ping "$PORT" && break
    kill -0 "$REDIS_PID" 2>/dev/null || break
    sleep 0.05
  done
  if redis_ping "$PORT"; then break; fi
  kill "$REDIS_PID" 2>/dev/null || true
  wait "$REDIS_PID" 2>/dev/null || true
  REDIS_PID=""
done
[ -n "$REDIS_PID" ] || die "could not start redis-server (apt-get install redis-server)"
URL="redis://127.0.0.1:$PORT/0"
# list_stats freezes it for a moment (a release bounded by the lease's end).
export MISTRI_TEST_REDIS_PID="$REDIS_PID"
echo "redis-server pid $REDIS_PID at $URL"

step "start a throwaway PostgreSQL on a free 127.0.0.1 port"
PG_DIR=$(mktemp -u /tmp/mistri-ffi-pg.XXXXXX)
PG_URL=$(python3 "$ROOT/tests/support/throwaway_postgres.py" start "$PG_DIR") ||
  die "could not start PostgreSQL (scripts/setup installs postgresql)"
echo "postgres at $PG_URL"

step "start a throwaway MariaDB on a free 127.0.0.1 port"
MYSQL_DIR=$(mktemp -u /tmp/mistri-ffi-mariadb.XXXXXX)
MYSQL_URL=$(python3 "$ROOT/tests/support/throwaway_mariadb.py" start "$MYSQL_DIR") ||
  die "could not start MariaDB (scripts/setup installs mariadb-server)"
echo "mariadb at $MYSQL_URL"

export MISTRI_TEST_LOCAL_DIR="$WORK/local"
mkdir -p "$MISTRI_TEST_LOCAL_DIR"

step "C tests (Memory, Redis, Local, Postgres, MySQL on MariaDB, two processes)"
timeout 600 "$WORK/contract" "$URL" "$PG_URL" "$MYSQL_URL"

step "C tests of the hold options builder, the deprecated struct and wait timeouts"
timeout 300 "$WORK/options" "$URL"

step "C tests of holder inspection (info, labels)"
timeout 300 "$WORK/info" "$URL"
timeout 60 "$WORK/scale-out-asan"

step "C tests of counters and hold events (stats, on_event)"
timeout 300 "$WORK/events"

step "C tests of list, stats, active_holds and the configured handle (Memory, Local, Redis)"
timeout 300 "$WORK/list-stats" "$URL"

step "C tests of waiting acquires and holds, N-holder limits and the hung-holder guard"
timeout 300 "$WORK/waiting" "$URL"

step "C tests of the Prometheus text (mistri_locks_stats_prometheus, promtool), under ASan + UBSan"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  timeout 120 "$WORK/metrics-asan"

step "C tests under AddressSanitizer + UndefinedBehaviorSanitizer"
# Leak detection is on: every allocation of the Rust library goes through
# the malloc that ASan intercepts, so a leaked handle or string shows up.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  timeout 900 "$WORK/contract-asan" "$URL" "$PG_URL" "$MYSQL_URL"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  timeout 300 "$WORK/options-asan" "$URL"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  timeout 300 "$WORK/info-asan" "$URL"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  timeout 300 "$WORK/events-asan"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  timeout 300 "$WORK/waiting-asan" "$URL"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  timeout 300 "$WORK/list-stats-asan" "$URL"

step "example: examples/c/worker.c holds a lease until stopped from another process"
export MISTRI_NAMESPACE="mistri:ffi-example:$$"
"$WORK/worker" "$URL" example-worker >"$WORK/worker.out" 2>&1 &
WORKER_PID=$!
for _ in $(seq 200); do
  grep -q "holding example-worker" "$WORK/worker.out" && break
  kill -0 "$WORKER_PID" 2>/dev/null || break
  sleep 0.05
done
grep -q "holding example-worker" "$WORK/worker.out" || { cat "$WORK/worker.out"; die "worker did not start"; }
set +e
"$WORK/worker" "$URL" example-worker >"$WORK/second.out" 2>&1
second=$?
set -e
cat "$WORK/second.out"
[ "$second" = 3 ] || die "a second worker exited $second, wanted 3 (refused)"
"$WORK/worker" "$URL" --stop example-worker
for _ in $(seq 100); do
  kill -0 "$WORKER_PID" 2>/dev/null || break
  sleep 0.05
done
set +e
wait "$WORKER_PID"
worker_rc=$?
set -e
WORKER_PID=""
cat "$WORK/worker.out"
[ "$worker_rc" = 0 ] || die "worker exited $worker_rc, wanted 0"
grep -q 'stopping after .* stop flag "stop:example-worker" raised' "$WORK/worker.out" ||
  die "worker did not report the stop"
grep -q "released the lease" "$WORK/worker.out" || die "worker did not release"
unset MISTRI_NAMESPACE

step "make -C ffi install PREFIX=<tmp>, then build the quick start with pkg-config"
PREFIX="$WORK/prefix"
make -s -C "$HERE" install PREFIX="$PREFIX"
ls -l "$PREFIX/lib" "$PREFIX/include"
[ "$(readlink "$PREFIX/lib/libmistri_locks.so")" = libmistri_locks.so.0 ] || die "bad .so link"
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
echo "pkg-config: $(pkg-config --cflags --libs mistri_locks)"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror -pedantic tests/c/quickstart.c \
  $(pkg-config --cflags --libs mistri_locks) -o "$WORK/quickstart-installed"
# Read ldd's output whole: `ldd | grep -q` can fail under pipefail when
# grep exits early and ldd gets SIGPIPE.
LOADED=$(LD_LIBRARY_PATH="$PREFIX/lib" ldd "$WORK/quickstart-installed")
grep mistri <<<"$LOADED"
grep -q "libmistri_locks.so.0 => $PREFIX/lib/libmistri_locks.so.0" <<<"$LOADED" ||
  die "the installed program does not load the installed libmistri_locks.so.0"
LD_LIBRARY_PATH="$PREFIX/lib" "$WORK/quickstart-installed"
# Static: the archive plus Libs.private.
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror -pedantic tests/c/quickstart.c \
  $(pkg-config --cflags mistri_locks) "$PREFIX/lib/libmistri_locks.a" \
  $(pkg-config --static --libs mistri_locks | sed 's/-lmistri_locks//') -o "$WORK/quickstart-static"
if ldd "$WORK/quickstart-static" | grep -q mistri; then die "static build links the .so"; fi
"$WORK/quickstart-static"

printf '\nffi/test.sh: all C ABI checks passed\n'
