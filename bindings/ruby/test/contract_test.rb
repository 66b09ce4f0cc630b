# frozen_string_literal: true

# The contract cases of core/tests/contract.rs, through the Ruby surface,
# written once and run against every backend in Backends::FACTORIES.

require_relative "test_helper"

module ContractCases
  def locks = backend.locks

  # The shortest TTL the cases use, in seconds (the GC.stress run, where a
  # few calls can take longer than 0.01 s, uses a longer one).
  def short = 0.01

  def test_acquire_once_and_refuse_while_live
    a = locks
    b = backend.owner
    assert_same true, a.acquire("job", ttl: 5)
    assert_same false, a.acquire("job", ttl: 5), "same owner, live lease"
    assert_same false, b.acquire("job", ttl: 5), "other owner, live lease"
    assert_same true, a.held?("job")
    assert_same true, b.held?("job")
    assert_same false, b.renew("job", ttl: 5), "b never acquired it"
    assert_same false, b.release("job"), "b never acquired it"
    assert a.held?("job")
    assert_same true, a.renew("job", ttl: 5)
    assert_same true, a.release("job")
    assert_same false, a.held?("job")
    assert_same false, a.release("job"), "release is not repeated"
    assert b.acquire("job", ttl: 5)
  end

  def test_fractional_ttl_expires_and_can_be_retaken
    a = locks
    b = backend.owner
    assert a.acquire("short", ttl: short)
    refute b.acquire("short", ttl: short)
    sleep short * 5
    refute a.held?("short"), "a #{short} s lease is gone after #{short * 5} s"
    assert b.acquire("short", ttl: 5)
    assert a.held?("short")
  end

  def test_flags_set_read_clear_and_expire
    a = locks
    b = backend.owner
    assert_same false, a.flag?("stop")
    assert_same true, a.set_flag("stop", ttl: 5)
    assert_same true, b.flag?("stop"), "a flag needs no owner"
    assert_same true, b.clear_flag("stop")
    refute a.flag?("stop")
    b.clear_flag("stop") # lowering a lowered flag is fine
    a.set_flag("blink", ttl: short * 2)
    assert a.flag?("blink")
    sleep short * 6
    refute a.flag?("blink")
    a.set_flag("both", ttl: 5) # flags and leases live apart
    refute a.held?("both")
    assert a.acquire("both", ttl: 5)
    a.set_flag("default") # ttl: 300 by default
    assert a.flag?("default")
  end

  def test_hold_outlives_its_ttl_by_renewing
    hold = locks.hold("beating", ttl: 0.2, heartbeat: 0.05)
    sleep 0.7
    assert locks.held?("beating"), "renewed past 3.5 ttls"
    refute hold.lost?
    refute hold.signal.aborted?
    assert_same true, hold.release
  end

  def test_heartbeat_at_the_ttl_still_never_lapses
    # The seed's own tests pass ttl == heartbeat; the engine renews at ttl/3.
    hold = locks.hold("equal", ttl: 0.3, heartbeat: 0.3)
    10.times do
      sleep 0.1
      assert locks.held?("equal"), "lapsed"
    end
    refute hold.lost?
    hold.release
  end

  def test_released_lease_is_gone_and_stays_gone
    hold = locks.hold("done", ttl: 0.2, heartbeat: 0.01)
    sleep 0.05
    assert_same true, hold.release
    refute locks.held?("done")
    sleep 0.1 # many heartbeats
    refute locks.held?("done"), "a tick re-stamped a released lease"
    assert_same false, hold.release, "idempotent"
    refute hold.signal.aborted?, "release is not a loss"
    assert_equal 0, locks.active_holds
  end

  def test_the_block_form_releases_even_on_an_exception
    value = locks.hold("scoped", ttl: 5, heartbeat: 1) do |hold|
      assert_kind_of MistriLocks::Hold, hold
      assert locks.held?("scoped")
      :done
    end
    assert_equal :done, value
    refute locks.held?("scoped")
    assert_raises(RuntimeError) do
      locks.hold("scoped", ttl: 5, heartbeat: 1) { raise "boom" }
    end
    refute locks.held?("scoped")
  end

  def test_refused_hold_exists_nowhere_and_holder_keeps_its_lease
    b = backend.owner
    hold = locks.hold("one", ttl: 0.3, heartbeat: 0.05)
    fence = hold.fence
    assert_nil b.hold("one", ttl: 0.3, heartbeat: 0.05)
    ran = false
    assert_nil(b.hold("one", ttl: 0.3, heartbeat: 0.05) { ran = true })
    refute ran, "the block of a refused hold does not run"
    assert_equal 0, b.active_holds
    refute b.release("one")
    sleep 0.5
    assert locks.held?("one")
    refute hold.lost?
    assert_equal fence, hold.fence
    hold.release
    refute_nil b.hold("one", ttl: 0.3, heartbeat: 0.05)
  end

  def test_stale_owner_can_neither_renew_nor_release
    a = locks
    b = backend.owner
    assert a.acquire("stale", ttl: short * 3)
    sleep short * 8
    assert b.acquire("stale", ttl: 5)
    refute a.renew("stale", ttl: 5)
    refute a.release("stale")
    assert b.held?("stale")
  end

  def test_fencing_numbers_strictly_increase
    owners = [locks, backend.owner]
    last = 0
    6.times do |i|
      o = owners[i % 2]
      hold = o.hold("fenced", ttl: 5, heartbeat: 1)
      assert_operator hold.fence, :>, last
      last = hold.fence
      hold.release
      assert o.acquire("fenced", ttl: short)
      assert_operator o.fence("fenced"), :>, last
      last = o.fence("fenced")
      sleep short * 2 # let it expire instead of releasing
    end
  end

  def test_stop_flag_raised_elsewhere_trips_the_signal_within_a_tick
    b = backend.owner
    signal = MistriLocks::AbortSignal.new
    heard = Queue.new
    signal.on_abort { |reason| heard << [reason, Thread.current] }
    duck = DuckSignal.new
    hold = locks.hold("worker", ttl: 2, heartbeat: 0.1, stop_key: "stop:worker", signal: signal)
    ducked = locks.hold("worker2", ttl: 2, heartbeat: 0.1, stop_key: "stop:worker", signal: duck)
    assert_same signal, hold.signal
    assert_same duck, ducked.signal
    sleep 0.15
    refute signal.aborted?
    raised = Clock.now
    b.set_flag("stop:worker", ttl: 30)
    assert signal.wait(1), "no trip"
    took = Clock.now - raised
    # tick = 0.1 s; allow scheduling slack on a loaded 2-core machine
    assert_operator took, :<=, 0.1 + 0.25
    assert_includes signal.reason, "stop:worker"
    reason, thread = Timeout.timeout(2) { heard.pop }
    assert_equal signal.reason, reason
    assert_equal "mistri_locks delivery", thread.name, "delivered on a Ruby thread"
    assert duck.wait(1), "the duck-typed signal was not told"
    assert_operator duck.at - raised, :<=, 0.1 + 0.25
    assert_includes duck.reason, "stop:worker"
    assert_kind_of Thread, duck.thread
    refute hold.lost?, "a stop is not a loss"
    assert locks.held?("worker"), "still renewing until released"
    hold.release
    ducked.release
    assert_equal 1, duck.calls
    refute b.held?("worker")
  end

  def test_stop_flag_already_up_trips_at_once
    locks.set_flag("stop:early", ttl: 30)
    duck = DuckSignal.new
    hold = locks.hold("early", ttl: 2, heartbeat: 1, stop_key: "stop:early")
    ducked = locks.hold("early2", ttl: 2, heartbeat: 1, stop_key: "stop:early", signal: duck)
    assert hold.signal.wait(0.5)
    assert duck.wait(0.5)
    [hold, ducked].each(&:release)
  end

  def test_deleting_the_lease_trips_the_signal_as_lost
    hold = locks.hold("victim", ttl: 0.3, heartbeat: 0.05)
    sleep 0.06
    deleted = Clock.now
    backend.delete_lease("victim")
    assert hold.signal.wait(1), "no trip"
    assert_operator Clock.now - deleted, :<=, 0.05 + 0.25
    assert hold.lost?
    assert_includes hold.signal.reason, "lease lost"
    assert_same false, hold.release
    b = backend.owner
    assert b.acquire("victim", ttl: 5), "a lost holder deletes nothing"
    assert b.held?("victim")
  end

  def test_lease_taken_by_another_is_lost_not_restamped
    b = backend.owner
    duck = DuckSignal.new
    hold = locks.hold("taken", ttl: 0.3, heartbeat: 0.05, signal: duck)
    backend.delete_lease("taken")
    assert b.acquire("taken", ttl: 5)
    assert duck.wait(1), "the duck-typed signal was not told"
    assert_includes duck.reason, "lease lost"
    assert hold.lost?
    refute hold.release
    assert b.held?("taken")
    assert b.release("taken"), "b's token still owns it"
  end

  def test_contending_threads_never_both_hold
    inside = 0
    guard = Mutex.new
    owners = Array.new(6) { backend.owner }
    deadline = Clock.now + 20
    results = owners.map do |o|
      Thread.new do
        wins = refusals = 0
        while wins < 3 && Clock.now < deadline
          held = o.hold("contended", ttl: 5, heartbeat: 1) do
            guard.synchronize { inside += 1 }
            assert_equal 1, inside, "two holders at once"
            sleep 0.0003
            guard.synchronize { inside -= 1 }
            true
          end
          held ? wins += 1 : refusals += 1
        end
        [wins, refusals]
      end
    end.map(&:value)
    assert(results.all? { |w, _| w == 3 }, results.inspect)
  end

  def test_bad_arguments_are_clear_errors
    a = locks
    e = assert_raises(ArgumentError) { a.acquire("", ttl: 1) }
    assert_match(/key/, e.message)
    assert_raises(ArgumentError) { a.acquire("k", ttl: 0) }
    assert_raises(ArgumentError) { a.acquire("k", ttl: -1) }
    e = assert_raises(ArgumentError) { a.acquire("k", ttl: Float::NAN) }
    assert_match(/ttl/, e.message)
    assert_raises(ArgumentError) { a.acquire("k", ttl: Float::INFINITY) }
    assert_raises(ArgumentError) { a.renew("", ttl: 1) }
    assert_raises(ArgumentError) { a.release("") }
    assert_raises(ArgumentError) { a.held?("") }
    assert_raises(ArgumentError) { a.flag?("") }
    assert_raises(ArgumentError) { a.set_flag("", ttl: 1) }
    assert_raises(ArgumentError) { a.set_flag("k", ttl: 0) }
    assert_raises(ArgumentError) { a.clear_flag("") }
    assert_raises(ArgumentError) { a.acquire("k") } # ttl: is required
    [nil, 5, 1.5, Object.new, ["k"]].each do |bad|
      e = assert_raises(TypeError) { a.acquire(bad, ttl: 1) }
      assert_match(/key must be a String or Symbol/, e.message)
    end
    ["5", nil, true, :five].each do |bad|
      e = assert_raises(TypeError) { a.acquire("k", ttl: bad) }
      assert_match(/ttl must be a number/, e.message)
    end
    assert_raises(ArgumentError) { a.hold("k", ttl: 0, heartbeat: 1) }
    assert_raises(ArgumentError) { a.hold("k", ttl: 1, heartbeat: 0) }
    assert_raises(ArgumentError) { a.hold("k", ttl: 1, heartbeat: 1, stop_key: "") }
    assert_raises(ArgumentError) { a.hold("", ttl: 1, heartbeat: 1) }
    assert_raises(TypeError) { a.hold("k", ttl: 1, heartbeat: 1, stop_key: 7) }
    e = assert_raises(TypeError) { a.hold("k", ttl: 1, heartbeat: 1, signal: Object.new) }
    assert_match(/abort!/, e.message)
    refute a.held?("k"), "a refused call took nothing"
  end

  def test_symbols_name_their_keys_and_numerics_are_seconds
    assert locks.acquire(:sym, ttl: Rational(1, 2))
    assert locks.held?("sym")
    assert locks.release("sym")
    assert locks.acquire("int", ttl: 2)
    assert locks.acquire("big", ttl: 10**6)
  end

  def test_module_level_hold_uses_the_configured_adapter
    previous = MistriLocks.locks
    MistriLocks.locks = locks
    assert_same locks, MistriLocks.locks
    hold = MistriLocks.hold("configured", ttl: 5, heartbeat: 1)
    assert_equal "configured", hold.key
    assert_nil MistriLocks.hold("configured", ttl: 5, heartbeat: 1), "refused"
    assert_equal 42, (MistriLocks.hold("other", ttl: 5) { 42 })
    hold.release
  ensure
    MistriLocks.locks = previous
  end
end

Backends.parametrize(ContractCases, "ContractTest")
