#!/usr/bin/env bash
# The Ruby face's test entry point: builds the extension (debug), runs the
# whole minitest suite
# in one process (contract cases against Memory, Local, a throwaway
# redis-server and a throwaway PostgreSQL on free loopback ports, Mistri drop-in, signals and
# interrupts, cross-process, fork, RailsCache on Debian's ActiveSupport, jobs
# on Debian's ActiveJob and a real sidekiq, and a GC.stress pass), then builds the source gem with the standard command
# (`gem build mistri_locks.gemspec`), installs it into a temporary GEM_HOME
# (compiling it) and requires it from outside the checkout. Exits non-zero
# on any failure.
#
# Needs: cargo, ruby + ruby-dev (3.0+, minitest is bundled), libclang-dev,
# redis-server, ruby-activesupport and ruby-redis, the PostgreSQL server
# and psql, mariadb-server, ruby-activerecord, ruby-pg, ruby-sqlite3, ruby-mysql2, ruby-activejob and
# ruby-sidekiq. Honours CARGO_TARGET_DIR
# and SOURCE_BUILD=0 (skip the source gem). Extra minitest arguments pass
# through, e.g. `test.sh -n /Fork/`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

./build.sh

# RailsCache runs in a process of its own: ActiveSupport's heap would make
# every GC of the GC.stress pass (and so its timings) several times slower.
ruby -I lib -I test -e '
  Dir["test/*_test.rb"].sort.each do |f|
    require File.expand_path(f) unless f.end_with?("/rails_cache_test.rb", "/active_record_test.rb", "/job_test.rb",
                                                   "/sidekiq_test.rb")
  end
' -- "$@"
ruby -I lib -I test test/rails_cache_test.rb "$@"
# ActiveRecord (Postgres.from_active_record, RailsCache on Solid Cache,
# fence_check from a transaction): its own process, for the same reason.
ruby -I lib -I test test/active_record_test.rb "$@"
# Jobs: MistriLocks::Job on ActiveJob and the Sidekiq middleware, with real
# `sidekiq` processes; their own processes, for the same reason. They stop
# and break leases with the CLI, and stop from Python (the venv of
# bindings/python/test.sh, else the C ABI through ctypes): build both.
cargo build -q -p mistri_locks_cli -p mistri_locks_ffi
ruby -I lib -I test test/job_test.rb "$@"
ruby -I lib -I test test/sidekiq_test.rb "$@"

# The source gem, as a user makes and installs it: the command every Ruby
# developer types, `gem build mistri_locks.gemspec` in bindings/ruby (the
# gemspec stages the Rust sources: stage_crates.rb); `gem install --local`
# into a fresh GEM_HOME runs extconf.rb and compiles the extension
# (release); then `require` it from outside the checkout, with nothing of
# the checkout on the load path. First, a copy of bindings/ruby outside a
# checkout with nothing staged must refuse to build, saying what to do.
# Compiled dependencies are shared across runs (and with the Python sdist
# check) through one CARGO_TARGET_DIR; the core and Ruby crates are
# cleaned from it first, so they compile every time.
# SOURCE_BUILD=0 leaves this out while iterating.
if [ "${SOURCE_BUILD:-1}" != 0 ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  echo "== gem build outside a checkout, nothing staged: refuses"
  mkdir "$work/alone"
  cp -R lib ext mistri_locks.gemspec stage_crates.rb README.md "$work/alone/"
  rm -rf "$work/alone/ext/mistri_locks/crates" "$work/alone/lib/mistri_locks/mistri_locks.so"
  if (cd "$work/alone" && gem build mistri_locks.gemspec >"$work/alone.log" 2>&1); then
    cat "$work/alone.log"; echo "gem build made a gem that can't install"; exit 1
  fi
  grep -q "gem build mistri_locks.gemspec" "$work/alone.log" ||
    { cat "$work/alone.log"; echo "the refusal does not say what to do"; exit 1; }
  echo "   refused: $(grep -o "can't build an installable gem here" "$work/alone.log")"

  version="$(ruby -r ./lib/mistri_locks/version -e 'print MistriLocks::VERSION')"
  echo "== gem build mistri_locks.gemspec (in bindings/ruby)"
  rm -f "mistri_locks-$version.gem"
  gem build mistri_locks.gemspec >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
  gem="$work/mistri_locks-$version.gem"
  mv "mistri_locks-$version.gem" "$gem"
  tar -xOf "$gem" metadata.gz | gunzip | grep -q "ext/mistri_locks/crates/core/src/lib.rs" ||
    { echo "the gem carries no Rust sources"; exit 1; }
  target_dir="$(cargo metadata --format-version 1 --no-deps |
    ruby -rjson -e 'print JSON.parse($stdin.read).fetch("target_directory")')"
  echo "== source gem: gem install --local $(basename "$gem") (cargo build --release)"
  # Same sources keep cargo's artifacts fresh: drop ours so they compile.
  cargo clean -q --release --target-dir "${CARGO_TARGET_DIR:-$target_dir}/source-builds" \
    -p mistri_locks_core -p mistri_locks_rb
  started=$SECONDS
  (cd "$work" && env -u RUBYLIB -u RUBYOPT GEM_HOME="$work/gems" GEM_PATH="$work/gems" \
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$target_dir}/source-builds" \
    gem install --local --no-document "$gem" >"$work/install.log" 2>&1) ||
    { cat "$work/install.log"; exit 1; }
  echo "   built and installed in $((SECONDS - started)) s"
  (cd "$work" && env -u RUBYLIB -u RUBYOPT GEM_HOME="$work/gems" GEM_PATH="$work/gems" ruby -e '
    require "mistri_locks"
    so = $LOADED_FEATURES.grep(%r{/mistri_locks\.so\z})
    raise "loaded #{so.inspect}, not the installed gem" unless so.size == 1 && so[0].start_with?(ENV["GEM_HOME"])
    raise "wrong gem" unless Gem.loaded_specs["mistri_locks"].full_gem_path.start_with?(ENV["GEM_HOME"])
    a = MistriLocks::Memory.new
    b = a.new_owner
    raise "acquire" unless a.acquire("src", ttl: 5) == true && b.acquire("src", ttl: 5) == false
    MistriLocks.locks = a
    fence = MistriLocks.hold("job", ttl: 2, heartbeat: 0.1) { |h| h.fence }
    raise "hold" unless fence.is_a?(Integer) && !a.held?("job")
    MistriLocks.configure(b)
    h = MistriLocks.hold("job", ttl: 2, heartbeat: 0.1)
    raise "list" unless a.list("s")[:leases].map { |l| l[:key] } == ["src"]
    raise "release_outcome" unless h.release_outcome == :released && h.release == false
    puts "   require \"mistri_locks\" from the installed gem: ok (#{so[0]})"
  ')
fi
