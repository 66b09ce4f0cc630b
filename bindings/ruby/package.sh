#!/usr/bin/env bash
# Builds the source gem: packs the Rust sources the extension needs (the
# core crate and the Ruby crate, in a workspace of their own with the
# checkout's Cargo.lock pruned to them) into ext/mistri_locks/crates/, then
# runs `gem build`. Installing the gem compiles the extension with cargo
# (ext/mistri_locks/extconf.rb); nothing else is needed but crates.io.
#
#   bindings/ruby/package.sh [output-dir]     # default: bindings/ruby/pkg
#
# Prints the path of the .gem. ext/mistri_locks/crates/ is a build product
# (ignored by git), refreshed on every run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$here/pkg}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

crates="$here/ext/mistri_locks/crates"
rm -rf "$crates"
mkdir -p "$crates/core" "$crates/bindings/ruby"

# The workspace: the checkout's manifest (shared package fields and
# dependencies) with only the two crates as members.
sed -E 's/^members = .*/members = ["core", "bindings\/ruby"]/' "$root/Cargo.toml" >"$crates/Cargo.toml"
grep -q '^members = \["core", "bindings/ruby"\]' "$crates/Cargo.toml"
cp "$root/Cargo.lock" "$crates/Cargo.lock"
# The core without its dev-dependencies (test helpers that are not packed).
awk '/^\[/{skip = ($0 == "[dev-dependencies]")} !skip' "$root/core/Cargo.toml" >"$crates/core/Cargo.toml"
cp -R "$root/core/src" "$crates/core/src"
cp "$here/Cargo.toml" "$crates/bindings/ruby/Cargo.toml"
cp -R "$here/src" "$crates/bindings/ruby/src"
# Prune the lock file to these crates (keeps every version as locked), so
# that the install builds with --locked.
(cd "$crates" && { cargo metadata --format-version 1 --offline >/dev/null 2>&1 ||
  cargo metadata --format-version 1 >/dev/null; })

cd "$here"
version="$(ruby -r ./lib/mistri_locks/version -e 'print MistriLocks::VERSION')"
gem="$out/mistri_locks-$version.gem"
gem build mistri_locks.gemspec --silent --output "$gem" >/dev/null
echo "$gem"
