# frozen_string_literal: true

# MistriLocks::Local refuses a database that another user could tamper with
# (a ConfigError naming the path and the problem), and its default path is
# the same for every process of the user whatever the environment.

require_relative "test_helper"
require "tmpdir"

class LocalSafetyTest < Minitest::Test
  def refused(path, problem)
    error = assert_raises(MistriLocks::ConfigError) { MistriLocks::Local.new(path: path) }
    assert_includes error.message, path
    assert_includes error.message, problem
  end

  def test_a_folder_of_another_user_is_refused
    skip "only root can give a folder to another user" unless Process.euid.zero?
    Dir.mktmpdir("mistri-rb-safety") do |dir|
      [0o700, 0o1777].each do |mode|
        folder = File.join(dir, "f#{mode.to_s(8)}")
        Dir.mkdir(folder)
        File.chmod(mode, folder)
        File.chown(65534, 65534, folder)
        refused(File.join(folder, "locks.db"), "belongs to uid 65534")
        refute File.exist?(File.join(folder, "locks.db"))
      end
    end
  end

  def test_a_folder_others_can_write_is_refused
    Dir.mktmpdir("mistri-rb-safety") do |dir|
      [0o770, 0o777, 0o1777].each do |mode|
        folder = File.join(dir, "f#{mode.to_s(8)}")
        Dir.mkdir(folder)
        File.chmod(mode, folder)
        refused(File.join(folder, "locks.db"), "writable by other users")
      end
    end
  end

  def test_symbolic_links_are_refused
    Dir.mktmpdir("mistri-rb-safety") do |dir|
      real = File.join(dir, "real.db")
      link = File.join(dir, "locks.db")
      File.symlink(real, link)
      refused(link, "symbolic link")
      refute File.exist?(real), "the link was followed"
      Dir.mkdir(File.join(dir, "real"))
      File.symlink(File.join(dir, "real"), File.join(dir, "linked"))
      refused(File.join(dir, "linked", "locks.db"), "symbolic link")
    end
  end

  def test_processes_with_different_environments_agree_on_the_default
    key = "mistri-rb-env-#{Process.pid}-#{SecureRandom.hex(4)}"
    holder = MistriLocks::Local.new
    assert holder.acquire(key, ttl: 30)
    begin
      script = 'print MistriLocks::Local.new.acquire(ARGV[0], ttl: 30)'
      env = { "XDG_RUNTIME_DIR" => nil, "TMPDIR" => Dir.tmpdir + "/elsewhere", "MISTRI_LOCKS_LOCAL_PATH" => nil }
      out = IO.popen(env, [RbConfig.ruby, "-I", Subprocess::LIB, "-rmistri_locks", "-e", script, key], &:read)
      assert $?.success?
      assert_equal "false", out
    ensure
      assert holder.release(key)
    end
  end
end
