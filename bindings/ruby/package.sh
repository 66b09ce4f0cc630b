#!/usr/bin/env bash
# Builds the source gem: `gem build mistri_locks.gemspec` (which, run from a
# checkout, first packs the Rust sources the extension needs, the core crate
# and the Ruby crate in a workspace of their own with the checkout's
# Cargo.lock pruned to them, into ext/mistri_locks/crates/: stage_crates.rb),
# writing the .gem to an output folder. Installing the gem compiles the
# extension with cargo (ext/mistri_locks/extconf.rb); nothing else is needed
# but crates.io.
#
#   bindings/ruby/package.sh [output-dir]     # default: bindings/ruby/pkg
#
# Prints the path of the .gem. ext/mistri_locks/crates/ is a build product
# (ignored by git), refreshed on every run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/pkg}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

cd "$here"
version="$(ruby -r ./lib/mistri_locks/version -e 'print MistriLocks::VERSION')"
gem="$out/mistri_locks-$version.gem"
gem build mistri_locks.gemspec --silent --output "$gem" >/dev/null
echo "$gem"
