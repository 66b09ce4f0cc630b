#!/usr/bin/env bash
# The Ruby face's test entry point: builds the extension (debug), checks
# that `gem build` accepts the gemspec, then runs the whole minitest suite
# in one process (contract cases against Memory and a throwaway
# redis-server on a free loopback port, Mistri drop-in, signals and
# interrupts, cross-process, fork, and a GC.stress pass) and prints
# minitest's summary. Exits non-zero on any failure.
#
# Needs: cargo, ruby + ruby-dev (3.0+, minitest is bundled), libclang-dev,
# redis-server. Honours CARGO_TARGET_DIR. Extra minitest arguments pass
# through, e.g. `test.sh -n /Fork/`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

./build.sh

gem_dir="$(mktemp -d)"
trap 'rm -rf "$gem_dir"' EXIT
gem build mistri_locks.gemspec --silent --output "$gem_dir/mistri_locks.gem"
echo "gem build: ok"

ruby -I lib -I test -e '
  Dir["test/*_test.rb"].sort.each { |f| require File.expand_path(f) }
' -- "$@"
