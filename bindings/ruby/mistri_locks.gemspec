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

  spec.files = Dir.chdir(__dir__) do
    Dir["lib/**/*.rb", "src/**/*.rs", "Cargo.toml", "build.sh", "Rakefile", "README.md"]
  end
  spec.require_paths = ["lib"]

  # A built extension (build.sh) makes this a platform gem carrying it.
  # Building from source needs the mistri_locks workspace (the core crate)
  # and cargo: run build.sh there.
  native = "lib/mistri_locks/mistri_locks.so"
  if File.exist?(File.join(__dir__, native))
    spec.files << native
    spec.platform = Gem::Platform.local
  end
end
