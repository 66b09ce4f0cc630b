# frozen_string_literal: true

# Drop-in check: a stand-in for the mistri gem's Mistri::Locks, written the
# way the seed is (a heartbeat Thread per hold that sleeps, renews, checks a
# stop flag and calls signal.abort!), calling ONLY the seven duck methods on
# Mistri.locks. Each of our adapters is plugged in as Mistri.locks.

require_relative "test_helper"

module Mistri
  class << self
    attr_accessor :locks
  end

  # The seed's signal: a Mutex, a flag, a reason, callbacks.
  class AbortSignal
    attr_reader :reason

    def initialize
      @mutex = Mutex.new
      @aborted = false
      @reason = nil
      @callbacks = []
    end

    def abort!(reason = nil)
      callbacks = @mutex.synchronize do
        return false if @aborted

        @aborted = true
        @reason = reason
        @callbacks.dup
      end
      callbacks.each { |c| c.call(reason) }
      true
    end

    def aborted? = @mutex.synchronize { @aborted }

    def on_abort(&block) = @mutex.synchronize { @callbacks << block }
  end

  module Locks
    LEASE_TTL = 180
    HEARTBEAT = 60

    # Seed-style hold: renew on the heartbeat from a Ruby thread, poll the
    # stop flag on the same thread, abort the signal on stop or loss.
    class Hold
      attr_reader :key, :signal

      def initialize(locks, key, ttl:, heartbeat:, stop_key:, signal:)
        @locks = locks
        @key = key
        @ttl = ttl
        @heartbeat = heartbeat
        @stop_key = stop_key
        @signal = signal
        @stopping = false
        @lost = false
        @thread = Thread.new { beat }
      end

      def lost? = @lost

      def release
        @stopping = true
        @thread.join
        @lost ? false : @locks.release(@key)
      end

      private

      def beat
        tick = [@heartbeat, 1].min
        next_renewal = now + @heartbeat
        until @stopping
          sleep tick
          break if @stopping

          if now >= next_renewal
            unless @locks.renew(@key, ttl: @ttl)
              @lost = true
              @signal.abort!("lease lost: #{@key}")
              break
            end
            next_renewal = now + @heartbeat
          end
          @signal.abort!("stop requested: #{@stop_key}") if @stop_key && @locks.flag?(@stop_key)
        end
      end

      def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def self.hold(key, ttl: LEASE_TTL, heartbeat: HEARTBEAT, stop_key: nil, signal: nil)
      locks = Mistri.locks
      return nil unless locks
      return nil unless locks.acquire(key, ttl: ttl)

      Hold.new(locks, key, ttl: ttl, heartbeat: heartbeat, stop_key: stop_key,
                           signal: signal || AbortSignal.new)
    end
  end
end

module MistriCompatCases
  def setup
    @previous = Mistri.locks
    Mistri.locks = backend.locks
  end

  def teardown
    Mistri.locks = @previous
  end

  def test_the_seed_hold_renews_past_its_ttl_and_releases
    hold = Mistri::Locks.hold("seed:job", ttl: 0.3, heartbeat: 0.05)
    refute_nil hold
    sleep 0.6
    assert Mistri.locks.held?("seed:job")
    refute hold.lost?
    assert_same true, hold.release
    refute Mistri.locks.held?("seed:job")
  end

  def test_the_seed_hold_is_refused_while_another_process_holds
    other = backend.owner
    assert other.acquire("seed:busy", ttl: 5)
    assert_nil Mistri::Locks.hold("seed:busy", ttl: 5, heartbeat: 1)
    assert other.held?("seed:busy"), "a refused caller touched nothing"
  end

  def test_a_stop_flag_from_elsewhere_aborts_the_seed_signal
    hold = Mistri::Locks.hold("seed:worker", ttl: 2, heartbeat: 0.05, stop_key: "seed:stop")
    heard = Queue.new
    hold.signal.on_abort { |r| heard << r }
    backend.owner.set_flag("seed:stop") # the seed's default ttl: 300
    assert_match(/seed:stop/, Timeout.timeout(2) { heard.pop })
    assert hold.signal.aborted?
    hold.release
    Mistri.locks.clear_flag("seed:stop")
    refute Mistri.locks.flag?("seed:stop")
  end

  def test_a_deleted_lease_makes_the_seed_hold_lost
    hold = Mistri::Locks.hold("seed:victim", ttl: 0.3, heartbeat: 0.05)
    backend.delete_lease("seed:victim")
    deadline = Clock.now + 2
    sleep 0.01 until hold.lost? || Clock.now > deadline
    assert hold.lost?
    assert_match(/lease lost/, hold.signal.reason)
    assert_same false, hold.release
  end

  def test_the_duck_methods_return_exact_booleans
    l = Mistri.locks
    assert_same true, l.acquire("seed:b", ttl: 0.5)
    assert_same false, l.acquire("seed:b", ttl: 0.5)
    assert_same true, l.renew("seed:b", ttl: 0.5)
    assert_same true, l.held?("seed:b")
    assert_same true, l.release("seed:b")
    assert_same false, l.renew("seed:b", ttl: 0.5)
    assert_same false, l.held?("seed:b")
    assert_same false, l.flag?("seed:f")
    l.set_flag("seed:f", ttl: 0.5)
    assert_same true, l.flag?("seed:f")
    l.clear_flag("seed:f")
    assert_same false, l.flag?("seed:f")
  end

  def test_our_hold_takes_the_seeds_signal
    previous = MistriLocks.locks
    MistriLocks.locks = backend.locks
    signal = Mistri::AbortSignal.new
    heard = Queue.new
    signal.on_abort { |r| heard << [r, Thread.current.name] }
    MistriLocks.hold("seed:ours", ttl: 2, heartbeat: 0.05, stop_key: "seed:ours:stop",
                                  signal: signal) do |hold|
      assert_same signal, hold.signal
      backend.owner.set_flag("seed:ours:stop", ttl: 10)
      reason, thread = Timeout.timeout(2) { heard.pop }
      assert_match(/seed:ours:stop/, reason)
      assert_equal "mistri_locks delivery", thread, "called from a Ruby thread"
    end
    assert signal.aborted?
    refute backend.locks.held?("seed:ours")
  ensure
    MistriLocks.locks = previous
  end
end

Backends.parametrize(MistriCompatCases, "MistriCompatTest")
