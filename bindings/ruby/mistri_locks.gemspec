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
#
# A platform gem (package.sh --platform, which scripts/package runs) sets
# MISTRI_LOCKS_GEM_PLATFORM (e.g. x86_64-linux) and MISTRI_LOCKS_GEM_RUBIES
# (the Ruby minors it carries, e.g. "3.1"): it carries the compiled
# extension in lib/mistri_locks/<minor>/ (the layout rake-compiler-dock and
# rb-sys use; lib/mistri_locks.rb loads the one for the running Ruby), no
# Rust sources and nothing to compile, and is limited to those minors, so
# RubyGems picks the source gem on any other Ruby.
platform = ENV.fetch("MISTRI_LOCKS_GEM_PLATFORM", "")
rubies = ENV.fetch("MISTRI_LOCKS_GEM_RUBIES", "").split(",").map(&:strip).reject(&:empty?)
abort "mistri_locks: MISTRI_LOCKS_GEM_PLATFORM needs MISTRI_LOCKS_GEM_RUBIES (e.g. 3.1)" if !platform.empty? && rubies.empty?
if platform.empty? && defined?(Gem::Commands::BuildCommand)
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

  if platform.empty?
    spec.files = Dir.chdir(__dir__) do
      Dir["lib/**/*.rb", "sig/**/*.rbs", "ext/mistri_locks/extconf.rb", "README.md"] +
        Dir["ext/mistri_locks/crates/**/*"].select { |f| File.file?(f) }
    end
    spec.extensions = ["ext/mistri_locks/extconf.rb"]
  else
    spec.platform = Gem::Platform.new(platform)
    dlext = RbConfig::CONFIG["DLEXT"]
    natives = rubies.map { |minor| "lib/mistri_locks/#{minor}/mistri_locks.#{dlext}" }
    missing = natives.reject { |f| File.file?(File.join(__dir__, f)) }
    abort "mistri_locks: the platform gem lacks #{missing.join(', ')}" unless missing.empty?
    spec.files = Dir.chdir(__dir__) { Dir["lib/**/*.rb", "sig/**/*.rbs", "README.md"] } + natives
    major, minor = rubies.map { |m| Gem::Version.new(m) }.max.segments
    spec.required_ruby_version = [">= #{rubies.min_by { |m| Gem::Version.new(m) }}", "< #{major}.#{minor + 1}.dev"]
  end
  spec.require_paths = ["lib"]
end
