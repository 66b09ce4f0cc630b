# frozen_string_literal: true

# Stages the Rust sources the extension needs into ext/mistri_locks/crates/,
# so the source gem carries them: the core crate and the Ruby crate, in a
# workspace of their own (the checkout's manifest with only these two
# members) and with the checkout's Cargo.lock pruned to them, so that
# installing the gem builds with `cargo build --locked`.
#
# mistri_locks.gemspec runs this when `gem build` loads it from a checkout,
# so the command every Ruby developer types makes the installable gem:
#
#   cd bindings/ruby && gem build mistri_locks.gemspec
#
# (package.sh is that command with an output folder.) Also a command:
# `ruby bindings/ruby/stage_crates.rb` stages and prints the folder.
#
# ext/mistri_locks/crates/ is a build product (ignored by git), replaced
# whole on every run; extconf.rb prefers the checkout's live sources to it
# when it runs inside a checkout, so a stale copy is never built from there.

require "fileutils"
require "open3"

module MistriLocksStage
  # The two crates, as paths inside the checkout (and inside crates/).
  MEMBERS = ["core", "bindings/ruby"].freeze

  module_function

  # The checkout +ruby_dir+ (bindings/ruby) belongs to, or nil when it is
  # not one (an unpacked gem, a copy of bindings/ruby on its own).
  def checkout_root(ruby_dir)
    root = File.expand_path("../..", ruby_dir)
    inside = File.file?(File.join(root, "Cargo.toml")) &&
             File.file?(File.join(root, "Cargo.lock")) &&
             File.file?(File.join(root, "core", "Cargo.toml")) &&
             File.directory?(File.join(root, "bindings", "ruby")) &&
             File.identical?(File.join(root, "bindings", "ruby"), ruby_dir)
    inside ? root : nil
  end

  # Where the staged workspace goes.
  def crates_dir(ruby_dir) = File.join(ruby_dir, "ext", "mistri_locks", "crates")

  # Whether +ruby_dir+ already carries staged crates.
  def staged?(ruby_dir) = File.file?(File.join(crates_dir(ruby_dir), "Cargo.toml"))

  # Stages the crates of checkout +root+ into +ruby_dir+'s
  # ext/mistri_locks/crates/ and returns that folder. Raises
  # MistriLocksStage::Error (with what to do) when it can't. Builds in a
  # folder beside it and renames, so an interrupted run leaves no half copy.
  def stage!(root, ruby_dir)
    dest = crates_dir(ruby_dir)
    work = "#{dest}.tmp.#{Process.pid}"
    FileUtils.rm_rf(work)
    FileUtils.mkdir_p(work)
    File.write(File.join(work, "Cargo.toml"), workspace_manifest(File.read(File.join(root, "Cargo.toml"))))
    FileUtils.cp(File.join(root, "Cargo.lock"), File.join(work, "Cargo.lock"))
    MEMBERS.each { |member| copy_crate(File.join(root, member), File.join(work, member)) }
    prune_lock(work)
    FileUtils.rm_rf(dest)
    File.rename(work, dest)
    dest
  ensure
    FileUtils.rm_rf(work) if work && File.exist?(work)
  end

  # Something in the way of staging (a checkout that changed shape, no cargo).
  class Error < StandardError; end

  # The checkout's workspace manifest (shared package fields, workspace
  # dependencies, profiles) with only MEMBERS as members.
  def workspace_manifest(text)
    members = %(members = [#{MEMBERS.map { |m| %("#{m}") }.join(", ")}])
    staged = text.sub(/^members\s*=\s*\[[^\]]*\]/m, members)
    raise Error, "the workspace Cargo.toml has no `members = [...]` list to narrow" if staged == text && !text.include?(members)

    staged
  end

  # A crate's manifest and sources. Test-only parts are left out: its
  # dev-dependencies (test helpers that are not packed) and explicit test,
  # bench and example targets (their files are not packed).
  def copy_crate(from, to)
    FileUtils.mkdir_p(to)
    File.write(File.join(to, "Cargo.toml"), without_test_parts(File.read(File.join(from, "Cargo.toml"))))
    FileUtils.cp_r(File.join(from, "src"), File.join(to, "src"))
    build_script = File.join(from, "build.rs")
    FileUtils.cp(build_script, to) if File.file?(build_script)
  end

  TEST_SECTION = /\A\[(?:\[(?:test|bench|example)\]\]|(?:target\..+\.)?dev-dependencies(?:\..+)?\])\s*\z/
  private_constant :TEST_SECTION

  def without_test_parts(manifest)
    skip = false
    manifest.each_line.reject do |line|
      skip = TEST_SECTION.match?(line.strip) if line.start_with?("[")
      skip
    end.join
  end

  # `cargo metadata` drops the lock entries the two crates don't use (every
  # kept version stays as locked). From the local cache if it can, else
  # from crates.io.
  def prune_lock(workspace)
    cargo = ENV.fetch("CARGO", "cargo")
    attempts = [["--offline"], []]
    errors = attempts.map do |extra|
      _out, err, status = Open3.capture3(cargo, "metadata", "--format-version", "1", *extra, chdir: workspace)
      return if status.success?

      err
    rescue SystemCallError => e
      raise Error, "cargo (#{cargo}) is needed to stage the Rust sources: #{e.message}"
    end
    raise Error, "`cargo metadata` failed in #{workspace}:\n#{errors.last}"
  end
end

if $PROGRAM_NAME == __FILE__
  here = __dir__
  root = MistriLocksStage.checkout_root(here) or abort "#{here} is not inside a mistri_locks checkout"
  puts MistriLocksStage.stage!(root, here)
end
