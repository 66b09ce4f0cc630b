# frozen_string_literal: true

require_relative "lib/mistri_locks/version"

# A source gem: installing it compiles the extension with cargo
# (ext/mistri_locks/extconf.rb writes a Makefile that runs
# `cargo build --release`) from the Rust sources it carries in
# ext/mistri_locks/crates/. So `gem build mistri_locks.gemspec` in a checkout
# stages them there first (stage_crates.rb; package.sh is the same command
# with an output folder); outside a checkout, with none staged, it refuses,
# as that gem would not install. Only `gem build` stages: Bundler loading
# this file for a Gemfile's path: or git: changes nothing (extconf.rb then
# builds the checkout's own sources).
if defined?(Gem::Commands::BuildCommand)
  require_relative "stage_crates"
  begin
    if (root = MistriLocksStage.checkout_root(__dir__))
      MistriLocksStage.stage!(root, __dir__)
    elsif !MistriLocksStage.staged?(__dir__)
      abort "mistri_locks: can't build an installable gem here: the Rust sources are not staged in " \
            "ext/mistri_locks/crates/ and #{File.expand_path(__dir__)} is not bindings/ruby of a mistri_locks checkout. " \
            "Build the gem in a checkout: cd bindings/ruby && gem build mistri_locks.gemspec " \
            "(or bindings/ruby/package.sh)."
    end
  rescue MistriLocksStage::Error => e
    abort "mistri_locks: staging the Rust sources for the gem failed: #{e.message}"
  end
end

Gem::Specification.new do |spec|
  spec.name = "mistri_locks"
  spec.version = MistriLocks::VERSION
  spec.summary = "Cross-process leases and stop flags (Memory, Redis) over a Rust core"
  spec.description = <<~DESC
    Leases renewed on a heartbeat, stop flags between processes, and abort
    signals, shared with the Python and C faces of mistri_locks over the same
    Redis protocol. Every adapter is a drop-in for `Mistri.locks = ...`.
  DESC
  spec.authors = ["mistri_locks contributors"]
  spec.license = "MIT"
  spec.required_ruby_version = ">= 3.0"

  spec.files = Dir.chdir(__dir__) do
    Dir["lib/**/*.rb", "ext/mistri_locks/extconf.rb", "README.md"] +
      Dir["ext/mistri_locks/crates/**/*"].select { |f| File.file?(f) }
  end
  spec.extensions = ["ext/mistri_locks/extconf.rb"]
  spec.require_paths = ["lib"]
end
