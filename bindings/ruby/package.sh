#!/usr/bin/env bash
# Builds the gems into an output folder and prints each .gem's path.
#
#   bindings/ruby/package.sh [output-dir]     # default: bindings/ruby/pkg
#   bindings/ruby/package.sh --platform x86_64-linux --native 3.1=path/to/ext.so [--native 3.2=...] [output-dir]
#
# The source gem (the first form): `gem build mistri_locks.gemspec` (which,
# run from a checkout, first packs the Rust sources the extension needs, the
# core crate and the Ruby crate in a workspace of their own with the
# checkout's Cargo.lock pruned to them, into ext/mistri_locks/crates/:
# stage_crates.rb). Installing it compiles the extension with cargo
# (ext/mistri_locks/extconf.rb); nothing else is needed but crates.io.
# ext/mistri_locks/crates/ is a build product (ignored by git), refreshed on
# every run.
#
# The platform gem (--platform): the same Ruby files and signatures, with
# each compiled extension given by --native MINOR=PATH (built for that Ruby
# minor) at lib/mistri_locks/MINOR/mistri_locks.so, and no Rust sources:
# installing it compiles nothing. It is assembled in a temporary copy, so
# the checkout's lib/ never holds a prebuilt extension that would shadow
# build.sh's. scripts/package builds both.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
platform=""
natives=()
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --platform) platform="$2"; shift 2 ;;
    --native) natives+=("$2"); shift 2 ;;
    -*) echo "package.sh: unknown option $1" >&2; exit 2 ;;
    *) out="$1"; shift ;;
  esac
done
out="${out:-$here/pkg}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

cd "$here"
version="$(ruby -r ./lib/mistri_locks/version -e 'print MistriLocks::VERSION')"
if [ -z "$platform" ]; then
  gem="$out/mistri_locks-$version.gem"
  gem build mistri_locks.gemspec --silent --output "$gem" >/dev/null
  echo "$gem"
  exit 0
fi

[ ${#natives[@]} -gt 0 ] || { echo "package.sh: --platform needs at least one --native MINOR=PATH" >&2; exit 2; }
work="$(mktemp -d "${TMPDIR:-/tmp}/mistri-gem.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp -R lib mistri_locks.gemspec README.md "$work/"
[ -d sig ] && cp -R sig "$work/"
# A stray build.sh product (lib/mistri_locks/mistri_locks.so) is not packed.
find "$work/lib" -name '*.so' -delete
rubies=""
for native in "${natives[@]}"; do
  minor="${native%%=*}" so="${native#*=}"
  [[ "$minor" =~ ^[0-9]+\.[0-9]+$ ]] || { echo "package.sh: --native wants MINOR=PATH (MINOR like 3.1), got $native" >&2; exit 2; }
  [ -f "$so" ] || { echo "package.sh: no extension at $so" >&2; exit 2; }
  mkdir -p "$work/lib/mistri_locks/$minor"
  cp "$so" "$work/lib/mistri_locks/$minor/mistri_locks.so"
  rubies="${rubies:+$rubies,}$minor"
done
gem="$out/mistri_locks-$version-$platform.gem"
(cd "$work" && MISTRI_LOCKS_GEM_PLATFORM="$platform" MISTRI_LOCKS_GEM_RUBIES="$rubies" \
  gem build mistri_locks.gemspec --silent --output "$gem" >/dev/null)
echo "$gem"
