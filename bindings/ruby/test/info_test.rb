# frozen_string_literal: true

# Holder inspection from Ruby: the default identity names Ruby, and #info
# carries the lease's fence.
require_relative "test_helper"

class InfoTest < Minitest::Test
  def test_info_names_ruby_and_the_fence
    Dir.mktmpdir do |dir|
      locks = MistriLocks::Local.new(path: File.join(dir, "locks.db"))
      assert_nil locks.info("job")
      hold = locks.hold("job", ttl: 5, heartbeat: 0.5)
      info = locks.info("job")
      assert_equal "#{Socket.gethostname}:#{Process.pid} ruby", info[:holder]
      assert_equal hold.fence, info[:fence]
      assert_equal 5.0, info[:ttl]
      assert_equal 0.5, info[:heartbeat]
      assert_operator info[:time_left], :<=, 5
      assert_operator info[:renewed_at], :>=, info[:acquired_at]
      hold.release
      assert_nil locks.info("job")
    end
  end

  def test_info_on_memory
    locks = MistriLocks::Memory.new
    assert locks.acquire("k", ttl: 2)
    assert_equal locks.fence("k"), locks.info("k")[:fence]
  end

  def test_labels_per_handle_and_per_hold
    Dir.mktmpdir do |dir|
      locks = MistriLocks::Local.new(path: File.join(dir, "locks.db"), label: "nightly worker")
      assert_equal "nightly worker", locks.label
      assert locks.acquire("plain", ttl: 5)
      assert_equal "nightly worker", locks.info("plain")[:holder]
      locks.hold("job", ttl: 5, heartbeat: 0.5, label: "report 7") do
        assert_equal "report 7", locks.info("job")[:holder]
      end
      locks.label = nil
      assert_equal "#{Socket.gethostname}:#{Process.pid} ruby", locks.label
    end
    assert_equal "mem", MistriLocks::Memory.new(label: "mem").label
    assert_equal "sym", MistriLocks::Memory.new(label: :sym).label
  end

  def test_bad_labels_are_clear_errors
    locks = MistriLocks::Memory.new
    assert_raises(ArgumentError) { MistriLocks::Memory.new(label: "") }
    assert_raises(ArgumentError) { locks.label = "" }
    assert_raises(TypeError) { locks.label = 7 }
    assert_raises(ArgumentError) { locks.hold("job", ttl: 1, heartbeat: 0.1, label: "") }
    refute locks.held?("job")
  end
end
