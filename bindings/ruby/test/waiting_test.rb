# frozen_string_literal: true

# Waiting acquires and holds (wait:), limit: and the hung-holder options'
# argument rules, Hold#touch, and interrupting a wait with Thread#raise,
# Timeout.timeout, Thread#kill and SIGINT (issue 14).

require_relative "test_helper"
require "open3"

module WaitingCases
  def release_later(locks, key, after)
    Thread.new do
      sleep after
      locks.release(key)
    end
  end

  def test_a_waiting_acquire_gets_the_lease_when_the_holder_releases
    holder = backend.locks
    waiter = backend.owner
    assert holder.acquire("job", ttl: 30)
    releaser = release_later(holder, "job", 0.3)
    t0 = Clock.now
    assert_same true, waiter.acquire("job", ttl: 30, wait: 20)
    took = Clock.now - t0
    releaser.join
    assert_operator took, :>=, 0.2
    assert_operator took, :<, 10
    assert waiter.release("job")
  end

  def test_a_waiting_hold_gets_the_lease_when_the_holder_releases
    first = backend.locks.hold("job", ttl: 30, heartbeat: 1)
    refute_nil first
    Thread.new { sleep 0.3; first.release } # rubocop:disable Style/Semicolon
    t0 = Clock.now
    fence = backend.owner.hold("job", ttl: 30, heartbeat: 1, wait: 20) { |h| h.fence }
    assert_operator fence, :>, first.fence
    assert_operator Clock.now - t0, :>=, 0.2
    refute backend.locks.held?("job")
  end
end

Backends.parametrize(WaitingCases, "WaitingTest", factories: Backends::FACTORIES.slice("Memory", "Redis"))

class WaitingTest < Minitest::Test
  def setup
    @holder = MistriLocks::Memory.new
    @waiter = @holder.new_owner
  end

  def teardown
    MistriLocks.locks = nil
  end

  def test_a_waiting_acquire_is_refused_at_the_end_of_its_wait
    assert @holder.acquire("job", ttl: 30)
    t0 = Clock.now
    assert_same false, @waiter.acquire("job", ttl: 30, wait: 0.3)
    assert_operator Clock.now - t0, :>=, 0.25
    assert_operator Clock.now - t0, :<, 5
    refute_nil @holder.fence("job"), "the holder's lease is untouched"
  end

  def test_wait_zero_and_nil_try_once
    assert_same true, @waiter.acquire("free", ttl: 30, wait: 0)
    assert @holder.acquire("job", ttl: 30)
    [0, 0.0, nil].each do |wait|
      t0 = Clock.now
      assert_same false, @waiter.acquire("job", ttl: 30, wait: wait)
      assert_operator Clock.now - t0, :<, 1
    end
  end

  def test_an_aborted_signal_ends_a_waiting_acquire_and_hold
    assert @holder.acquire("job", ttl: 30)
    stop = MistriLocks::AbortSignal.new
    Thread.new { sleep 0.2; stop.abort!("enough") } # rubocop:disable Style/Semicolon
    t0 = Clock.now
    assert_same false, @waiter.acquire("job", ttl: 30, wait: Float::INFINITY, signal: stop)
    assert_nil @waiter.hold("job", ttl: 30, wait: 60, signal: stop)
    assert_operator Clock.now - t0, :<, 5
    assert_raises(TypeError) { @waiter.acquire("job", ttl: 30, wait: 1, signal: Object.new) }
  end

  def test_the_module_form_waits_and_refuses_at_the_end_of_its_wait
    MistriLocks.locks = @holder
    first = MistriLocks.hold("job", ttl: 30)
    refute_nil first
    t0 = Clock.now
    assert_nil MistriLocks.hold("job", ttl: 30, wait: 0.3)
    assert_operator Clock.now - t0, :>=, 0.25
    Thread.new { sleep 0.2; first.release } # rubocop:disable Style/Semicolon
    second = MistriLocks.hold("job", ttl: 30, wait: Float::INFINITY)
    refute_nil second
    second.release
  end

  def test_thread_raise_interrupts_a_waiting_acquire_and_hold
    assert @holder.acquire("job", ttl: 30)
    [
      -> { @waiter.acquire("job", ttl: 30, wait: Float::INFINITY) },
      -> { @waiter.hold("job", ttl: 30, wait: 600) },
    ].each do |call|
      waiter = Thread.new do
        call.call
        :returned
      rescue RuntimeError => e
        e
      end
      sleep 0.2
      raised = Clock.now
      waiter.raise(RuntimeError, "wake up")
      assert waiter.join(5), "Thread#raise did not interrupt the wait"
      assert_operator Clock.now - raised, :<, 5
      assert_equal "wake up", waiter.value.message
    end
    # The interrupted waiters left the line: once released, the lease is free.
    @holder.release("job")
    sleep 0.2
    refute @holder.held?("job")
  end

  def test_thread_kill_interrupts_a_waiting_acquire
    assert @holder.acquire("job", ttl: 30)
    waiter = Thread.new { @waiter.acquire("job", ttl: 30, wait: Float::INFINITY) }
    sleep 0.2
    waiter.kill
    assert waiter.join(5), "Thread#kill did not end the wait"
  end

  def test_timeout_interrupts_a_waiting_acquire_and_hold
    assert @holder.acquire("job", ttl: 30)
    t0 = Clock.now
    assert_raises(Timeout::Error) { Timeout.timeout(0.2) { @waiter.acquire("job", ttl: 30, wait: 600) } }
    assert_raises(Timeout::Error) { Timeout.timeout(0.2) { @waiter.hold("job", ttl: 30, wait: Float::INFINITY) } }
    assert_operator Clock.now - t0, :<, 5
    @holder.release("job")
    sleep 0.2
    refute @holder.held?("job"), "no interrupted waiter took the lease"
  end

  def test_a_waiting_acquire_releases_the_gvl
    assert @holder.acquire("job", ttl: 30)
    count = 0
    counter = Thread.new { loop { count += 1; sleep 0.001 } } # rubocop:disable Style/Semicolon
    refute @waiter.acquire("job", ttl: 30, wait: 0.5)
    counter.kill
    assert_operator count, :>, 20, "other threads ran during the wait"
  end

  def test_touch_is_callable
    @holder.hold("job", ttl: 30, progress_timeout: 10, max_hold: 60) do |h|
      assert_nil h.touch
      10_000.times { h.touch }
      refute h.signal.aborted?
    end
    @holder.hold("plain", ttl: 30) { |h| h.touch } # a no-op without a progress timeout
  end

  def test_max_hold_ends_the_renewals_of_a_hung_holder
    h = @holder.hold("capped", ttl: 0.6, heartbeat: 0.1, max_hold: 1.2)
    refute_nil h
    sleep 0.8 # renewed past its first ttl
    refute h.signal.aborted?, h.signal.reason
    assert h.signal.wait(10)
    assert_match(/max_hold/, h.signal.reason)
    assert h.lost?
    h.release
  end

  def test_progress_timeout_stops_a_stalled_hold_and_touch_keeps_it
    h = @holder.hold("stalled", ttl: 3, heartbeat: 0.1, progress_timeout: 0.3)
    refute_nil h
    deadline = Clock.now + 0.9
    while Clock.now < deadline
      h.touch
      sleep 0.05
    end
    refute h.signal.aborted?, h.signal.reason
    assert h.signal.wait(10)
    assert_match(/stalled/, h.signal.reason)
    assert h.lost?
    assert_same true, h.release, "the lease was still there: release deletes it"
  end

  BAD = [
    [{ wait: -1 }, ArgumentError, /wait/],
    [{ wait: Float::NAN }, ArgumentError, /wait/],
    [{ wait: "1" }, TypeError, /wait/],
    [{ limit: 0 }, ArgumentError, /limit/],
    [{ limit: -1 }, ArgumentError, /limit/],
    [{ limit: 2**40 }, ArgumentError, /limit/],
    [{ limit: "3" }, TypeError, /limit/],
    [{ limit: 2.0 }, TypeError, /limit/],
  ].freeze

  BAD_HOLD = (BAD + [
    [{ max_hold: 0 }, ArgumentError, /max_hold/],
    [{ max_hold: Float::INFINITY }, ArgumentError, /max_hold/],
    [{ progress_timeout: -1 }, ArgumentError, /progress_timeout/],
    [{ progress_timeout: Float::NAN }, ArgumentError, /progress_timeout/],
    [{ progress_timeout: "2" }, TypeError, /progress_timeout/],
  ]).freeze

  def test_bad_acquire_arguments
    BAD.each do |kwargs, error, message|
      e = assert_raises(error, kwargs.inspect) { @holder.acquire("k", ttl: 5, **kwargs) }
      assert_match message, e.message
    end
    refute @holder.held?("k")
  end

  def test_bad_hold_arguments
    BAD_HOLD.each do |kwargs, error, message|
      e = assert_raises(error, kwargs.inspect) { @holder.hold("k", ttl: 5, **kwargs) }
      assert_match message, e.message
      # Nothing configured: still checked.
      e = assert_raises(error, kwargs.inspect) { MistriLocks.hold("k", ttl: 5, **kwargs) }
      assert_match message, e.message
    end
    refute @holder.held?("k")
  end

  def test_hold_keywords_are_one_list
    assert_raises(ArgumentError) { @holder.hold("k", nope: 1) }
    assert_raises(ArgumentError) { MistriLocks.hold("k", nope: 1) }
  end

  def test_sigint_interrupts_a_waiting_acquire
    script = <<~RUBY
      $LOAD_PATH.unshift #{File.expand_path("../lib", __dir__).inspect}
      require "mistri_locks"
      trap("INT", "DEFAULT") # a background shell starts its jobs with SIGINT ignored
      holder = MistriLocks::Memory.new
      waiter = holder.new_owner
      holder.acquire("job", ttl: 60)
      puts "waiting"
      $stdout.flush
      begin
        waiter.acquire("job", ttl: 60, wait: Float::INFINITY)
      rescue Interrupt
        holder.release("job")
        puts(holder.new_owner.acquire("job", ttl: 60) ? "interrupted" : "still queued")
        exit 0
      end
      puts "returned"
    RUBY
    Open3.popen2(RbConfig.ruby, "-e", script) do |_in, out, wait|
      assert_equal "waiting", Timeout.timeout(20) { out.gets }&.chomp
      sleep 0.3
      sent = Clock.now
      Process.kill("INT", wait.pid)
      line = Timeout.timeout(10) { out.gets }
      assert_equal "interrupted", line&.chomp
      assert_operator Clock.now - sent, :<, 5
      assert Timeout.timeout(5) { wait.value }.success?
    ensure
      Subprocess.reap(wait) # popen2's block end waits for the child
    end
  end
end
