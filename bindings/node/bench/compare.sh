#!/bin/bash
# Two builds of the addon in one run, interleaved (before, after, before,
# after, …), on one throwaway redis-server pinned to core 1, each Node
# process pinned to core 0: the same bench scripts from each package dir.
# A package dir is a copy of bindings/node (lib/, package.json, bench/,
# the built mistri_locks.*.node, node_modules or a link to it).
#
#   bench/compare.sh BEFORE_DIR AFTER_DIR [pairs] [stop] [holds] [holds200] [threads]
# Env: PORT (16399), ROUNDS (2), SECONDS_PAIRS (4), TRIALS (200), HOLDS (10000).
# holds200: 200 in flight, ttl 3 s (kept must be HOLDS: no hold lost).
# threads: the peak of the face's call threads while 2,000 one-try holds
# are taken 200 at a time, and acquire+release pairs on memory:// (the
# face's own cost per pair: no backend I/O).
set -u
before=$1 after=$2
shift 2
port=${PORT:-16399}
dir=$(mktemp -d)
taskset -c 1 redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  --daemonize yes --pidfile "$dir/pid" >/dev/null
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1; rm -rf "$dir"' EXIT
sleep 0.5
here=$(cd "$(dirname "$0")" && pwd)
for r in $(seq 1 "${ROUNDS:-2}"); do
  for side in before after; do
    d=$before
    [ "$side" = after ] && d=$after
    echo "## round $r $side"
    for step in "$@"; do
      (cd "$d" && case $step in
        pairs) taskset -c 0 node bench/pairs.mjs --port "$port" --seconds "${SECONDS_PAIRS:-4}" --rounds 8 ;;
        stop) taskset -c 0 node bench/stop_latency.mjs --port "$port" --trials "${TRIALS:-200}" ;;
        holds) taskset -c 0 node bench/holds.mjs --port "$port" --holds "${HOLDS:-10000}" ;;
        holds200)
          taskset -c 0 node bench/holds.mjs --port "$port" --holds "${HOLDS:-10000}" --inflight 200 --ttl 3 |
            sed 's/^node_\(sem\)\{0,1\}holds_/&inflight200_ttl3_/'
          ;;
        threads) taskset -c 0 node "$here/threads.mjs" --dir "$d" --port "$port" ;;
      esac)
    done
  done
done
