#!/usr/bin/env bash
# Compiles the native extension with cargo and puts it where
# `require "mistri_locks"` finds it (lib/mistri_locks/mistri_locks.so), so
# `ruby -I bindings/ruby/lib -e 'require "mistri_locks"'` works.
#
#   bindings/ruby/build.sh            # debug build
#   bindings/ruby/build.sh --release  # optimised (for bench.rb)
#
# Honours CARGO_TARGET_DIR (default: the workspace's target/).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

profile=debug
cargo_flags=()
if [ "${1:-}" = "--release" ]; then
  profile=release
  cargo_flags=(--release)
fi

cargo build -p mistri_locks_rb "${cargo_flags[@]}"
target_dir="$(cargo metadata --format-version 1 --no-deps |
  ruby -rjson -e 'print JSON.parse($stdin.read).fetch("target_directory")')"

built="$target_dir/$profile/libmistri_locks_rb.so"
[ -f "$built" ] || built="$target_dir/$profile/libmistri_locks_rb.dylib"
dest="lib/mistri_locks/mistri_locks.so"
# Copy then rename: a running Ruby that has the old file mapped keeps it.
cp "$built" "$dest.tmp.$$"
mv -f "$dest.tmp.$$" "$dest"
echo "built $dest ($profile)"
