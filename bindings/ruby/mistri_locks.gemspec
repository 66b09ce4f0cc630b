# frozen_string_literal: true

require_relative "lib/mistri_locks/version"

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

  # A source gem: installing it compiles the extension with cargo
  # (ext/mistri_locks/extconf.rb writes a Makefile that runs
  # `cargo build --release`). Build it with package.sh, which packs the Rust
  # sources into ext/mistri_locks/crates/ first; from a checkout (a Gemfile's
  # path: or git:), extconf.rb finds them in the checkout instead.
  spec.files = Dir.chdir(__dir__) do
    Dir["lib/**/*.rb", "ext/mistri_locks/extconf.rb", "README.md"] +
      Dir["ext/mistri_locks/crates/**/*"].select { |f| File.file?(f) }
  end
  spec.extensions = ["ext/mistri_locks/extconf.rb"]
  spec.require_paths = ["lib"]
end
