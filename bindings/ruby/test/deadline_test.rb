# frozen_string_literal: true

# The hold's timing promise from Ruby: told before the lease can expire,
# whatever the server does; the safety margin is validated like any other
# duration.

require_relative "test_helper"

class DeadlineTest < Minitest::Test
  # A redis-server of this test's own: it gets frozen. Started through a
  # shell that exits at once, so it is not this process's child: stopping
  # a child sends its parent a SIGCHLD, and Ruby's handler for it
  # interrupts the socket reads of every thread (EINTR on a socket with a
  # timeout, whatever SA_RESTART says). The release path retries an
  # interrupted call once; the engine's threads do not yet block signals
  # (docs/RELIABILITY.md, "What cannot be promised").
  def with_own_redis
    probe = TCPServer.new("127.0.0.1", 0)
    port = probe.addr[1]
    probe.close
    pid = Integer(IO.popen(["sh", "-c", "redis-server --port #{port} --bind 127.0.0.1 " \
                                          "--save '' --appendonly no >/dev/null 2>&1 & echo $!"], &:read).strip)
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

  # Release is bounded by the lease too: the server frozen right after a
  # confirmed renewal, release_outcome returns by the lease's end (ttl 2 s),
  # not the adapter's 5 s timeout, and says :expired.
  def test_a_release_unanswered_by_the_lease_end_is_expired
    with_own_redis do |pid, url|
      locks = MistriLocks::Redis.new(url: url, namespace: "mistri:rb:expired")
      hold = locks.hold("job", ttl: 2.0, heartbeat: 0.5)
      refute_nil hold
      before = locks.stats[:renewals_confirmed]
      deadline = Clock.now + 3
      while locks.stats[:renewals_confirmed] == before
        raise "no renewal" if Clock.now > deadline

        sleep 0.001
      end
      sleep 0.03
      Process.kill(:STOP, pid)
      begin
        start = Clock.now
        outcome = hold.release_outcome
        took = Clock.now - start
      ensure
        Process.kill(:CONT, pid)
      end
      assert_equal :expired, outcome
      assert_operator took, :>, 1.6
      assert_operator took, :<, 2.5 # the old release waited 5 s
      assert_equal :already_released, hold.release_outcome
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
