# frozen_string_literal: true

# MistriLocks::AbortSignal, interruptible waits, errors and the binding's
# surface (not backend-specific, except where Redis errors are the point).

require_relative "test_helper"

module SignalCases
  # How much the time bounds below stretch: 1 here, more under GC.stress
  # (gc_stress_test.rb), where every allocation is a full collection.
  def time_slack = 1

  def test_abort_is_one_way_and_the_first_reason_wins
    s = MistriLocks::AbortSignal.new
    refute s.aborted?
    assert_nil s.reason
    assert_same true, s.abort!("first")
    assert_same false, s.abort!("second")
    assert s.aborted?
    assert_equal "first", s.reason
    t = MistriLocks::AbortSignal.new
    t.abort!
    assert_nil t.reason
    u = MistriLocks::AbortSignal.new
    u.abort!(:shutdown)
    assert_equal "shutdown", u.reason, "reasons are strings"
  end

  def test_callbacks_run_once_on_the_aborting_thread_in_order
    s = MistriLocks::AbortSignal.new
    seen = []
    s.on_abort { |r| seen << [:a, r, Thread.current] }
    bad = s.on_abort { raise "a bad callback" }
    s.on_abort { |r| seen << [:b, r, Thread.current] }
    assert_kind_of Integer, bad
    _out, err = capture_io { s.abort!("why") }
    assert_match(/a bad callback/, err)
    assert_equal [[:a, "why", Thread.current], [:b, "why", Thread.current]], seen
    s.abort!("again")
    assert_equal 2, seen.size, "once only"
    s.on_abort { |r| seen << [:late, r] } # already aborted: runs at once
    assert_equal [:late, "why"], seen.last
  end

  def test_removed_callbacks_do_not_run
    s = MistriLocks::AbortSignal.new
    ran = false
    h = s.on_abort { ran = true }
    assert_same true, s.remove_callback(h)
    assert_same false, s.remove_callback(h)
    assert_same false, s.remove_callback(12_345)
    s.abort!
    refute ran
    assert_raises(ArgumentError) { s.on_abort }
  end

  def test_derive_hears_the_parent_never_the_reverse
    parent = MistriLocks::AbortSignal.new
    child = parent.derive
    grandchild = child.derive
    sibling = parent.derive
    heard = []
    grandchild.on_abort { |r| heard << r }
    sibling.abort!("sibling")
    refute parent.aborted?
    refute child.aborted?
    parent.abort!("parent")
    assert_equal "parent", child.reason
    assert_equal "parent", grandchild.reason
    assert_equal "sibling", sibling.reason
    assert_equal ["parent"], heard, "a child's callbacks run during the parent's abort!"
    assert parent.derive.aborted?
  end

  def test_wait_times_out_then_sees_an_abort_from_another_thread
    s = MistriLocks::AbortSignal.new
    t0 = Clock.now
    assert_same false, s.wait(0.05)
    assert_operator Clock.now - t0, :>=, 0.05
    assert_same false, s.wait(0)
    Thread.new { sleep 0.05; s.abort!("other") }
    assert_same true, s.wait(5)
    assert_same true, s.wait
    assert_same true, s.wait(0)
    assert_raises(ArgumentError) { s.wait(-1) }
    assert_raises(ArgumentError) { s.wait(Float::NAN) }
    assert_raises(TypeError) { s.wait("1") }
  end

  def test_a_wait_releases_the_gvl
    s = MistriLocks::AbortSignal.new
    count = 0
    counter = Thread.new { loop { count += 1 } }
    refute s.wait(0.3)
    counter.kill
    assert_operator count, :>, 1000, "other threads ran during the wait"
  end

  def test_thread_raise_interrupts_a_blocked_wait
    s = MistriLocks::AbortSignal.new
    waiter = Thread.new do
      s.wait
      :returned
    rescue RuntimeError => e
      e
    end
    sleep 0.2
    raised = Clock.now
    waiter.raise(RuntimeError, "wake up")
    assert waiter.join(2 * time_slack), "Thread#raise did not interrupt the wait"
    assert_operator Clock.now - raised, :<, 1 * time_slack
    assert_equal "wake up", waiter.value.message
    refute s.aborted?
  end

  def test_thread_kill_interrupts_a_blocked_wait
    s = MistriLocks::AbortSignal.new
    waiter = Thread.new { s.wait }
    sleep 0.2
    waiter.kill
    assert waiter.join(2 * time_slack), "Thread#kill did not end the wait"
  end

  def test_timeout_interrupts_a_blocked_wait
    s = MistriLocks::AbortSignal.new
    t0 = Clock.now
    assert_raises(Timeout::Error) { Timeout.timeout(0.2) { s.wait } }
    # Far below "never" (the wait has no deadline of its own).
    assert_operator Clock.now - t0, :<, 5 * time_slack
    hold = MistriLocks::Memory.new.hold("timeout", ttl: 5, heartbeat: 1)
    assert_raises(Timeout::Error) { Timeout.timeout(0.2) { hold.signal.wait(30) } }
    hold.release
  end

  def test_several_waiters_one_interrupted_the_others_keep_waiting
    s = MistriLocks::AbortSignal.new
    waiters = Array.new(3) { Thread.new { s.wait(10) } }
    waiters[0].report_on_exception = false
    sleep 0.1
    waiters[0].raise(RuntimeError, "just you")
    assert_raises(RuntimeError) { waiters[0].join(2) }
    sleep 0.1
    assert(waiters[1..].all?(&:alive?))
    s.abort!
    assert_equal [true, true], waiters[1..].map(&:value)
  end
end

class SignalTest < Minitest::Test
  include SignalCases
end

class SurfaceTest < Minitest::Test
  def test_constants
    assert_equal 180, MistriLocks::LEASE_TTL
    assert_equal 60, MistriLocks::HEARTBEAT
    assert_equal 300, MistriLocks::FLAG_TTL
    assert_equal "redis://127.0.0.1:6379/0", MistriLocks::Redis::DEFAULT_URL
    assert_equal "mistri:locks", MistriLocks::Redis::DEFAULT_NAMESPACE
  end

  def test_exception_classes
    assert_operator MistriLocks::Error, :<, StandardError
    %i[ConfigError ConnectionError BackendError SystemResourceError].each do |name|
      assert_operator MistriLocks.const_get(name), :<, MistriLocks::Error
    end
  end

  def test_adapters_are_adapters_and_not_allocatable
    assert_kind_of MistriLocks::Locks, MistriLocks::Memory.new
    assert_instance_of MistriLocks::Memory, MistriLocks::Memory.new.new_owner
    assert_raises(TypeError) { MistriLocks::Memory.allocate }
    assert_raises(TypeError) { MistriLocks::Hold.allocate }
    assert_raises(TypeError) { MistriLocks::Hold.new }
  end

  def test_bad_redis_urls_and_namespaces
    assert_raises(MistriLocks::ConfigError) { MistriLocks::Redis.new(url: "http://nope") }
    assert_raises(ArgumentError) { MistriLocks::Redis.new(url: TestRedis.url, namespace: "") }
    assert_raises(ArgumentError) { MistriLocks::Redis.new(url: TestRedis.url, namespace: "a{b}") }
    assert_raises(TypeError) { MistriLocks::Redis.new(url: 5) }
  end

  def test_bad_local_paths
    assert_raises(TypeError) { MistriLocks::Local.new(path: 5) }
    assert_raises(ArgumentError) { MistriLocks::Local.new(path: "") }
    Dir.mktmpdir do |dir|
      corrupt = File.join(dir, "corrupt.db")
      File.write(corrupt, "this is not an sqlite database\n" * 100)
      error = assert_raises(MistriLocks::ConfigError) { MistriLocks::Local.new(path: corrupt) }
      assert_includes error.message, "corrupt.db"
      # a parent that is a file: unusable even for root
      assert_raises(MistriLocks::ConfigError) { MistriLocks::Local.new(path: File.join(corrupt, "x.db")) }
      # a Pathname works like a String
      require "pathname"
      local = MistriLocks::Local.new(path: Pathname.new(dir) / "ok.db")
      assert local.acquire("k", ttl: 1)
    end
  end

  def test_an_unreachable_redis_is_a_connection_error
    probe = TCPServer.new("127.0.0.1", 0)
    port = probe.addr[1]
    probe.close
    adapter = MistriLocks::Redis.new(url: "redis://127.0.0.1:#{port}/0")
    e = assert_raises(MistriLocks::ConnectionError) { adapter.acquire("k", ttl: 1) }
    assert_match(/127\.0\.0\.1/, e.message)
    assert_raises(MistriLocks::ConnectionError) { adapter.hold("k", ttl: 1, heartbeat: 1) }
  end

  def test_a_redis_round_trip_releases_the_gvl
    adapter = MistriLocks::Redis.new(url: TestRedis.url, namespace: "gvl:#{SecureRandom.hex(4)}")
    assert adapter.acquire("warm", ttl: 1) # connect first
    count = 0
    counter = Thread.new { loop { count += 1 } }
    sleep 0.05
    TestRedis.command("CLIENT", "PAUSE", "1000", "ALL")
    before = count
    t0 = Clock.now
    assert adapter.acquire("paused", ttl: 5)
    took = Clock.now - t0
    ran = count - before
    counter.kill
    assert_operator took, :>=, 0.25, "the server pause should have delayed the acquire"
    assert_operator ran, :>, 1000, "other threads ran during the round trip"
  end

  def test_module_level_hold_without_an_adapter
    previous = MistriLocks.locks
    MistriLocks.locks = nil
    assert_nil MistriLocks.hold("free", ttl: 1, heartbeat: 1)
    ran = false
    assert_nil(MistriLocks.hold("free") { ran = true })
    refute ran
    assert_raises(ArgumentError) { MistriLocks.hold("") }
    assert_raises(ArgumentError) { MistriLocks.hold("k", ttl: 0) }
    assert_raises(TypeError) { MistriLocks.hold("k", signal: 5) }
    assert_raises(TypeError) { MistriLocks.locks = Object.new }
  ensure
    MistriLocks.locks = previous
  end

  def test_hold_signal_defaults_to_one_abort_signal_per_hold
    m = MistriLocks::Memory.new
    hold = m.hold("sig", ttl: 5, heartbeat: 1)
    assert_instance_of MistriLocks::AbortSignal, hold.signal
    assert_same hold.signal, hold.signal
    assert_match(/key="sig"/, hold.inspect)
    hold.signal.abort!("by hand") # the hold keeps its lease; the work loop decides
    assert m.held?("sig")
    assert hold.release
  end

  def test_a_raising_duck_signal_gets_a_warning_and_delivery_goes_on
    m = MistriLocks::Memory.new
    bad = Object.new
    def bad.abort!(_reason) = raise("duck trouble")
    good = DuckSignal.new
    m.set_flag("stop:ducks", ttl: 30)
    _out, err = capture_io do
      h1 = m.hold("d1", ttl: 5, heartbeat: 0.05, stop_key: "stop:ducks", signal: bad)
      h2 = m.hold("d2", ttl: 5, heartbeat: 0.05, stop_key: "stop:ducks", signal: good)
      assert good.wait(2)
      sleep 0.1
      [h1, h2].each(&:release)
    end
    assert_match(/duck trouble/, err)
  end
end

# Not under GC.stress: thousands of threads.
class LostInterruptTest < Minitest::Test
  class Knock < StandardError; end

  # A Thread#raise landing just as a thread enters AbortSignal#wait (no
  # timeout) must interrupt it: the wait's wake token is read before the GVL
  # is released, so an unblock call in between is never lost.
  def test_a_raise_landing_as_a_waiter_enters_wait_is_never_lost
    s = MistriLocks::AbortSignal.new
    1000.times do |i|
      waiter = Thread.new do
        s.wait
      rescue Knock
        :knocked
      end
      waiter.report_on_exception = false
      i.even? ? Thread.pass : sleep(rand * 0.0003)
      waiter.raise(Knock)
      ended = begin
        waiter.join(2)
      rescue Knock # landed before the rescue was entered
        true
      end
      next if ended

      s.abort!("unstick")
      flunk "iteration #{i}: Thread#raise was lost, the wait kept blocking"
    end
    refute s.aborted?
  end

  def test_a_raise_landing_as_the_main_thread_enters_wait_is_never_lost
    s = MistriLocks::AbortSignal.new
    main = Thread.current
    1000.times do |i|
      t0 = Clock.now
      knocker = nil
      assert_raises(Knock) do
        knocker = Thread.new { i.even? ? Thread.pass : sleep(rand * 0.0003); main.raise(Knock) }
        s.wait(3)
      end
      knocker.join
      assert_operator Clock.now - t0, :<, 1.5, "iteration #{i}: the raise waited for the timeout"
    end
  end
end

class TimeoutRuleTest < Minitest::Test
  # The core's one rule: nil, Float::INFINITY or more than 1e9 s wait
  # forever; 0 just looks; NaN or negative is an ArgumentError.
  def test_one_timeout_rule
    [nil, Float::INFINITY, 1e10, 10**400].each do |forever|
      s = MistriLocks::AbortSignal.new
      Thread.new { sleep 0.02; s.abort! }
      assert_same true, s.wait(forever)
    end
    s = MistriLocks::AbortSignal.new
    [Float::NAN, -0.5, -Float::INFINITY].each do |bad|
      assert_raises(ArgumentError) { s.wait(bad) }
    end
  end
end

class VocabularyTest < Minitest::Test
  def test_one_vocabulary_and_the_old_names_are_gone
    m = MistriLocks::Memory.new
    assert_kind_of MistriLocks::Locks, m
    refute MistriLocks.const_defined?(:Adapter, false)
    refute MistriLocks.const_defined?(:SystemError, false)
    refute_respond_to m, :sharing_adapter
    [m.new_owner].each do |owner|
      assert_instance_of MistriLocks::Memory, owner
      assert owner.acquire("vocab", ttl: 5)
      refute m.acquire("vocab", ttl: 5), "another owner, same store"
      owner.release("vocab")
    end
  end

  def test_configured_slot_is_the_cores
    m = MistriLocks::Memory.new
    MistriLocks.locks = m
    assert_same m, MistriLocks.locks
    MistriLocks.hold("slot", ttl: 5) { assert m.held?("slot") }
    MistriLocks.locks = nil
    assert_nil MistriLocks.hold("slot", ttl: 5)
    assert_raises(ArgumentError) { MistriLocks.hold("", ttl: 5) }
    error = assert_raises(TypeError) { MistriLocks.locks = "redis://x" }
    assert_includes error.message, "Local"
  ensure
    MistriLocks.locks = nil
  end
end
