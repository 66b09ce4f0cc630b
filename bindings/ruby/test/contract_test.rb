# frozen_string_literal: true

# The contract suite: the cases of tests/contract/cases.txt (shared with the
# Rust, C and Python suites; format in tests/contract/README.md) run through
# the Ruby surface against every backend in Backends::FACTORIES, then what
# only Ruby can say (block forms, duck-typed signals, type errors, Symbols,
# threads). gc_stress_test.rb runs ContractCases again under GC.stress.

require_relative "test_helper"

# Reads the cases file and runs one case's steps.
module ContractData
  FILE = File.expand_path("../../../tests/contract/cases.txt", __dir__)
  NUMBERS = { "nan" => Float::NAN, "inf" => Float::INFINITY, "-inf" => -Float::INFINITY }.freeze
  OUTCOMES = { "released" => true, "already_released" => false, "lost" => false,
               "not_held" => false }.freeze
  OPTIONS = { "ttl" => :ttl, "heartbeat" => :heartbeat, "stop" => :stop_key,
              "signal" => :signal }.freeze

  # Spaces separate, quotes group (possibly nothing), # starts a comment.
  def self.words(line)
    line.scan(/"[^"]*"|[^\s"]+(?:"[^"]*")?|#.*/).take_while { |w| !w.start_with?("#") }
        .map { |w| w.delete('"') }
  end

  # { name => [[line number, words], ...] }, in file order.
  def self.cases
    @cases ||= File.readlines(FILE).each_with_index.with_object({}) do |(line, i), cases|
      w = words(line)
      if w.first == "case"
        cases[w[1]] = []
      elsif w.any?
        cases.values.last << [i + 1, w]
      end
    end
  end

  def self.number(word) = NUMBERS.fetch(word) { Float(word) }

  # One case's world: owners, holds, signals and the fences it saw.
  class Run
    include Minitest::Assertions
    attr_accessor :assertions

    # +release_outcome+: run "hold.release" steps through
    # Hold#release_outcome, asserting the case's outcome itself (Symbol),
    # instead of Hold#release's true/false.
    def initialize(backend, time_slack: 1, release_outcome: false)
      @backend = backend
      @time_slack = time_slack
      @release_outcome = release_outcome
      @owners = {}
      @holds = {}
      @signals = {}
      @fences = Hash.new(0)
      @mark = Clock.now
      @assertions = 0
    end

    def finish = @holds.each_value(&:release)

    def owner(name) = (@owners[name] ||= name == "A" ? @backend.locks : @backend.owner)
    def signal(name) = @signals.fetch(name) { @holds.fetch(name).signal }

    def fence(key, got, want)
      last = @fences[key]
      case want
      when "none" then assert_nil got
      when "same" then assert_equal last, got
      when "greater"
        assert_operator got, :>, last
        @fences[key] = got
      end
    end

    def hold(key, words, want, &start)
      opts = words.to_h do |w|
        name, value = w.split("=", 2)
        value = ContractData.number(value) if %w[ttl heartbeat].include?(name)
        value = signal(value) if name == "signal"
        [OPTIONS.fetch(name), value]
      end
      got = start.call(key, **opts)
      if want == "none"
        assert_nil got, "got a hold, wanted none"
      elsif want
        refute_nil got, "refused, wanted a hold"
        @holds[want] = got
      end
    end

    def step(words)
      arrow = words.index("->")
      args, want = arrow ? [words[0...arrow], words[arrow + 1..]] : [words, nil]
      op, *a = args
      w = want&.first
      got = nil
      case op
      when "error"
        assert_equal "InvalidArgument", w
        e = assert_raises(ArgumentError) { step(a) }
        assert_includes e.message, want[1]
        return
      when "acquire", "renew" then got = owner(a[0]).public_send(op, a[1], ttl: ContractData.number(a[2]))
      when "release", "break_lease" then got = owner(a[0]).public_send(op, a[1])
      when "held", "flag" then got = owner(a[0]).public_send("#{op}?", a[1])
      when "set_flag"
        ttl = a[2] ? { ttl: ContractData.number(a[2]) } : {}
        owner(a[0]).set_flag(a[1], **ttl)
      when "clear_flag" then owner(a[0]).clear_flag(a[1])
      when "fence" then return fence(a[1], owner(a[0]).fence(a[1]), w)
      when "hold" then return hold(a[1], a[2..], w) { |k, **o| owner(a[0]).hold(k, **o) }
      when "hold_configured" then return hold(a[0], a[1..], w) { |k, **o| MistriLocks.hold(k, **o) }
      when "configure" then MistriLocks.locks = a[0] == "none" ? nil : owner(a[0])
      when "hold.release"
        if @release_outcome
          got = @holds.fetch(a[0]).release_outcome
          assert_equal w.to_sym, got if w
          return
        end
        got = @holds.fetch(a[0]).release
        assert_same OUTCOMES.fetch(w), got if w
        return
      when "hold.lost" then got = @holds.fetch(a[0]).lost?
      when "hold.fence" then return fence(@holds.fetch(a[0]).key, @holds.fetch(a[0]).fence, w)
      when "hold.key" then assert_equal w, @holds.fetch(a[0]).key
      when "signal" then @signals[a[0]] = MistriLocks::AbortSignal.new
      when "abort" then signal(a[0]).abort!(*a[1, 1])
      when "aborted" then got = signal(a[0]).aborted?
      when "wait" then got = signal(a[0]).wait(ContractData.number(a[1]))
      when "reason" then assert_includes signal(a[0]).reason.to_s, a[2]
      when "same_signal" then got = @holds.fetch(a[0]).signal.equal?(signal(a[1]))
      when "sleep" then sleep ContractData.number(a[0])
      when "mark" then @mark = Clock.now
      when "elapsed" then assert_operator Clock.now - @mark, :<=, ContractData.number(a[1]) * @time_slack
      else flunk "unknown step #{op}"
      end
      assert_same w == "true", got if %w[true false].include?(w)
    end
  end
end

module ContractCases
  def locks = backend.locks
  # How much the cases' time bounds stretch (GC.stress runs: more).
  def time_slack = 1

  ContractData.cases.each do |name, steps|
    define_method("test_#{name}") do
      run = ContractData::Run.new(backend, time_slack:)
      steps.each do |line, words|
        run.step(words)
      rescue Minitest::Assertion => e
        raise e.class, "cases.txt:#{line}: #{words.join(' ')}: #{e.message}"
      end
    ensure
      self.assertions += run.assertions
      MistriLocks.locks = nil
      run.finish
    end
  end

  # ------------------------------------------- what only Ruby can say

  def test_the_block_form_releases_even_on_an_exception
    value = locks.hold("scoped", ttl: 5, heartbeat: 1) do |hold|
      assert_kind_of MistriLocks::Hold, hold
      assert locks.held?("scoped")
      assert_equal 1, locks.active_holds
      :done
    end
    assert_equal :done, value
    refute locks.held?("scoped")
    assert_equal 0, locks.active_holds
    assert_raises(RuntimeError) do
      locks.hold("scoped", ttl: 5, heartbeat: 1) { raise "boom" }
    end
    refute locks.held?("scoped")
  end

  def test_the_block_of_a_refused_hold_does_not_run
    b = backend.owner
    hold = locks.hold("one", ttl: 5, heartbeat: 1)
    ran = false
    assert_nil(b.hold("one", ttl: 5, heartbeat: 1) { ran = true })
    refute ran
    assert_equal 0, b.active_holds
    hold.release
  end

  def test_duck_typed_signals_hear_stops_and_losses_on_a_ruby_thread
    b = backend.owner
    signal = MistriLocks::AbortSignal.new
    heard = Queue.new
    signal.on_abort { |reason| heard << [reason, Thread.current] }
    duck = DuckSignal.new
    hold = locks.hold("worker", ttl: 2, heartbeat: 0.1, stop_key: "stop:worker", signal: signal)
    ducked = locks.hold("worker2", ttl: 2, heartbeat: 0.1, stop_key: "stop:worker", signal: duck)
    assert_same duck, ducked.signal
    raised = Clock.now
    b.set_flag("stop:worker", ttl: 30)
    assert signal.wait(1), "no trip"
    reason, thread = Timeout.timeout(2) { heard.pop }
    assert_equal signal.reason, reason
    assert_equal "mistri_locks delivery", thread.name, "delivered on a Ruby thread"
    assert duck.wait(1), "the duck-typed signal was not told"
    assert_operator duck.at - raised, :<=, (0.1 + 0.25) * time_slack
    assert_includes duck.reason, "stop:worker"
    assert_kind_of Thread, duck.thread
    [hold, ducked].each(&:release)
    assert_equal 1, duck.calls
    # already up: told at once
    early = DuckSignal.new
    ducked = locks.hold("early", ttl: 2, heartbeat: 1, stop_key: "stop:worker", signal: early)
    assert early.wait(0.7)
    ducked.release
    # lost
    lost = DuckSignal.new
    hold = locks.hold("taken", ttl: 0.3, heartbeat: 0.05, signal: lost)
    backend.delete_lease("taken")
    assert b.acquire("taken", ttl: 5)
    assert lost.wait(1), "the duck-typed signal was not told"
    assert_includes lost.reason, "lease lost"
    assert hold.lost?
    refute hold.release
  end

  def test_module_level_hold_takes_a_block
    MistriLocks.locks = locks
    assert_same locks, MistriLocks.locks
    assert_equal 42, (MistriLocks.hold("other", ttl: 5) { 42 })
    refute locks.held?("other")
  ensure
    MistriLocks.locks = nil
  end

  def test_non_strings_and_non_numbers_are_type_errors
    a = locks
    assert_raises(ArgumentError) { a.acquire("k") } # ttl: is required
    [nil, 5, 1.5, Object.new, ["k"]].each do |bad|
      e = assert_raises(TypeError) { a.acquire(bad, ttl: 1) }
      assert_match(/key must be a String or Symbol/, e.message)
    end
    ["5", nil, true, :five].each do |bad|
      e = assert_raises(TypeError) { a.acquire("k", ttl: bad) }
      assert_match(/ttl must be a number/, e.message)
    end
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
end

Backends.parametrize(ContractCases, "ContractTest")
