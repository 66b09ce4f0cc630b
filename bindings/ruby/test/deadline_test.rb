# frozen_string_literal: true

# The hold's timing promise from Ruby: told before the lease can expire,
# whatever the server does; the safety margin is validated like any other
# duration.

require_relative "test_helper"

class DeadlineTest < Minitest::Test
  # A redis-server of this test's own: it gets frozen.
  def with_own_redis
    probe = TCPServer.new("127.0.0.1", 0)
    port = probe.addr[1]
    probe.close
    pid = spawn("redis-server", "--port", port.to_s, "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", out: File::NULL, err: File::NULL)
    deadline = Clock.now + 10
    begin
      TCPSocket.open("127.0.0.1", port).close
    rescue SystemCallError
      raise "redis-server did not start" if Clock.now > deadline

      sleep 0.02
      retry
    end
    yield pid, "redis://127.0.0.1:#{port}/0"
  ensure
    if pid
      Process.kill(:CONT, pid) rescue nil # rubocop:disable Style/RescueModifier
      Process.kill(:KILL, pid) rescue nil # rubocop:disable Style/RescueModifier
      Process.wait(pid)
    end
  end

  def test_a_frozen_server_is_noticed_before_the_lease_can_expire
    with_own_redis do |pid, url|
      adapter = MistriLocks::Redis.new(url: url, namespace: "mistri:rb:deadline")
      hold = adapter.hold("job", ttl: 1.0, heartbeat: 0.1, safety_margin: 0.3)
      refute_nil hold
      sleep 0.25 # renewing normally
      frozen_at = Clock.now
      Process.kill(:STOP, pid)
      begin
        assert hold.signal.wait(3), "never told"
        told = Clock.now - frozen_at
      ensure
        Process.kill(:CONT, pid)
      end
      # Safe deadline: last confirmed renewal (at most a heartbeat before the
      # freeze) + ttl - margin: 0.6-0.7 s; the server can't expire it before 0.9 s.
      assert_operator told, :>, 0.5
      assert_operator told, :<, 0.9
      assert hold.lost?
      assert_match(/\Alease lost:/, hold.signal.reason)
      refute hold.release, "lost before: nothing to delete"
    end
  end

  def test_bad_safety_margins_are_clear_errors
    adapter = MistriLocks::Memory.new
    [0.5, 0.9, 0, -1, Float::NAN].each do |margin|
      err = assert_raises(ArgumentError) { adapter.hold("job", ttl: 1, heartbeat: 0.1, safety_margin: margin) }
      assert_match(/safety_margin/, err.message)
    end
    assert_raises(TypeError) { adapter.hold("job", ttl: 1, heartbeat: 0.1, safety_margin: "0.1") }
    refute adapter.held?("job"), "a refused hold leaves nothing behind"
    assert_raises(ArgumentError) { MistriLocks.hold("job", ttl: 1, safety_margin: 0.6) }
  end

  def test_tiny_durations_are_clamped_or_refused
    adapter = MistriLocks::Memory.new
    assert_raises(ArgumentError) { adapter.hold("job", ttl: 0.005, heartbeat: 0.001) }
    hold = adapter.hold("job", ttl: 0.3, heartbeat: 1e-9) # counts as 1 ms
    sleep 0.1
    refute hold.lost?
    hold.release
  end

  def test_a_hold_collected_unreleased_is_deleted_in_the_background
    adapter = MistriLocks::Memory.new
    GC.start # nothing of earlier tests' holds in the way
    1.times { adapter.hold("gc:job", ttl: 5, heartbeat: 1) }
    deadline = Clock.now + 5
    until !adapter.held?("gc:job") || Clock.now > deadline
      GC.start
      sleep 0.01
    end
    refute adapter.held?("gc:job"), "the engine's I/O thread deletes a collected hold's lease"
  end
end
