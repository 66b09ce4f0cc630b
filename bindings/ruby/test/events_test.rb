# frozen_string_literal: true

# Counters (Locks#stats) and hold events (Locks#on_event): they move when
# they should, blocks run on a Ruby thread (the delivery thread, never the
# heartbeat), a removed hook hears nothing more, bad input is a clear error.

require_relative "test_helper"

class EventsTest < Minitest::Test
  FAST = { ttl: 0.3, heartbeat: 0.02 }.freeze

  # Collects events and the threads they ran on.
  class Recorder
    attr_reader :events, :threads

    def initialize
      @events = []
      @threads = []
      @lock = Mutex.new
      @cond = ConditionVariable.new
    end

    def call(event)
      @lock.synchronize do
        @events << event
        @threads << Thread.current
        @cond.broadcast
      end
    end

    def wait(kind, timeout = 5)
      deadline = Clock.now + timeout
      @lock.synchronize do
        loop do
          found = @events.find { |e| e[:kind] == kind }
          return found if found

          left = deadline - Clock.now
          raise "no #{kind} event in #{@events.inspect}" if left <= 0

          @cond.wait(@lock, left)
        end
      end
    end

    def to_proc = method(:call).to_proc
  end

  def wait_until(timeout = 5)
    deadline = Clock.now + timeout
    until yield
      raise "timed out" if Clock.now > deadline

      sleep 0.01
    end
  end

  def test_stats_is_a_hash_of_counters
    locks = MistriLocks::Memory.new
    s = locks.stats
    %i[holds_active renewals_sent renewals_failed beats lost_not_held lost_too_late
       lost_deadline stop_flags_seen pushes_received].each { |k| assert_equal 0, s.fetch(k), k }
    assert_nil s.fetch(:beat_rtt_p50)
    h = locks.hold("renewing", **FAST)
    assert_equal 1, locks.stats[:holds_active]
    wait_until { locks.stats[:renewals_sent] >= 3 }
    s = locks.stats
    assert_kind_of Float, s[:beat_rtt_p50]
    assert_operator s[:beat_rtt_p50], :<=, s[:beat_rtt_p99]
    h.release
    s = locks.stats
    assert_equal [0, 1, 1], s.values_at(:holds_active, :holds_acquired, :holds_released)
  end

  def test_events_run_on_the_delivery_thread_in_order
    locks = MistriLocks::Memory.new
    other = locks.new_owner
    rec = Recorder.new
    other_rec = Recorder.new
    locks.on_event(&rec)
    other.on_event(&other_rec)
    h = locks.hold("job", **FAST)
    e = rec.wait(:acquired)
    assert_equal ["job", h.fence, nil, nil], e.values_at(:key, :fence, :reason, :cause)
    assert_nil other.hold("job", **FAST)
    assert_equal 0, other_rec.wait(:refused)[:fence]
    assert_equal 1, other.stats[:holds_refused]

    assert other.break_lease("job")
    e = rec.wait(:lost)
    assert_equal :not_held, e[:cause]
    assert_match(/\Alease lost:/, e[:reason])
    assert_equal 1, locks.stats[:lost_not_held]
    assert h.lost?

    s = locks.hold("worker", stop_key: "stop:worker", **FAST)
    other.set_flag("stop:worker", ttl: 5)
    e = rec.wait(:stopped)
    assert_equal "worker", e[:key]
    assert_includes e[:reason], "stop:worker"
    assert_equal 1, locks.stats[:stop_flags_seen]
    s.release
    rec.wait(:released)
    assert_equal %i[acquired lost acquired stopped released], rec.events.map { |x| x[:kind] }
    assert_equal ["mistri_locks delivery"], rec.threads.map(&:name).uniq
    refute_includes rec.threads, Thread.current
  end

  def test_a_removed_hook_hears_nothing
    locks = MistriLocks::Memory.new
    rec = Recorder.new
    handle = locks.on_event(&rec)
    refute locks.new_owner.remove_event_hook(handle), "not that owner's"
    h = locks.hold("k", **FAST)
    rec.wait(:acquired)
    assert locks.remove_event_hook(handle)
    refute locks.remove_event_hook(handle)
    h.release
    locks.hold("k2", **FAST).release
    sleep 0.2
    assert_equal [:acquired], rec.events.map { |x| x[:kind] }
  end

  def test_a_raising_block_warns_and_others_still_run
    locks = MistriLocks::Memory.new
    rec = Recorder.new
    locks.on_event { raise "hook raised" }
    locks.on_event(&rec)
    _out, err = capture_io do
      locks.hold("k", **FAST).release
      rec.wait(:released)
      sleep 0.05
    end
    assert_match(/hook raised/, err)
  end

  def test_bad_input_is_a_clear_error
    locks = MistriLocks::Memory.new
    assert_raises(ArgumentError) { locks.on_event }
    assert_raises(TypeError) { locks.remove_event_hook("nope") }
    refute locks.remove_event_hook(12_345)
  end
end
