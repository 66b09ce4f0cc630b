# frozen_string_literal: true

# Hold#release_outcome: the release that says what happened (the core's
# ReleaseOutcome as a Symbol), while Hold#release keeps the seed's
# true/false. The shared contract cases run once more with their outcomes
# asserted exactly; then each outcome on its own, on every backend.

require_relative "test_helper"
require_relative "contract_test"
require_relative "process_test" # ForkCases#in_child

module ReleaseOutcomeContractCases
  ContractData.cases.each do |name, steps|
    next unless steps.any? { |_, words| words.first == "hold.release" }

    define_method("test_#{name}") do
      run = ContractData::Run.new(backend, release_outcome: true)
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
end

Backends.parametrize(ReleaseOutcomeContractCases, "ReleaseOutcomeContractTest")

module ReleaseOutcomeCases
  include ForkCases

  def locks = backend.locks

  def test_released_then_already_released
    hold = locks.hold("job", ttl: 5, heartbeat: 1)
    assert_equal :released, hold.release_outcome
    refute locks.held?("job")
    assert_equal :already_released, hold.release_outcome
    assert_same false, hold.release, "release stays true/false"
    assert_equal :already_released, hold.release_outcome
  end

  def test_release_is_release_outcome_is_released
    hold = locks.hold("job", ttl: 5, heartbeat: 1)
    assert_same true, hold.release
    assert_equal :already_released, hold.release_outcome
  end

  def test_not_held_when_the_lease_went_behind_the_holds_back
    # Renewals every ttl/3 (about 3.3 s): none comes between the delete and
    # the release, so the hold is still renewing when it finds the lease gone.
    hold = locks.hold("job", ttl: 10, heartbeat: 10)
    backend.delete_lease("job")
    refute hold.lost?
    assert_equal :not_held, hold.release_outcome
    refute hold.signal.aborted?, "a release is not a loss"
  end

  def test_lost_when_the_hold_was_lost_before
    hold = locks.hold("job", ttl: 1, heartbeat: 0.05)
    backend.delete_lease("job")
    assert hold.signal.wait(2), "the hold did not notice the loss"
    assert hold.lost?
    assert_equal :lost, hold.release_outcome
    assert_equal :already_released, hold.release_outcome
  end

  def test_other_process_for_a_forked_childs_copy
    hold = locks.hold("job", ttl: 5, heartbeat: 0.1)
    got = in_child { { "outcome" => hold.release_outcome, "again" => hold.release } }
    assert_nil got["error"]
    assert_equal :other_process, got["outcome"]
    assert_same false, got["again"]
    assert locks.held?("job"), "the child left the parent's lease alone"
    assert_equal :released, hold.release_outcome
  end

  def test_every_outcome_is_listed
    assert_equal %i[released not_held lost already_released other_process expired], MistriLocks::Hold::RELEASE_OUTCOMES
  end

  def test_release_outcome_in_the_block_form_and_after_it
    kept = nil
    locks.hold("job", ttl: 5, heartbeat: 1) { |h| kept = h }
    assert_equal :already_released, kept.release_outcome
    assert_raises(ArgumentError) { kept.release_outcome(true) }
  end

  def test_a_stopped_hold_still_releases_its_lease
    duck = DuckSignal.new
    hold = locks.hold("job", ttl: 5, heartbeat: 0.05, stop_key: "stop:job", signal: duck)
    backend.owner.set_flag("stop:job", ttl: 30)
    assert duck.wait(2), "the stop was not delivered"
    assert locks.held?("job"), "a stop asks; the lease stays until released"
    assert_equal :released, hold.release_outcome
    assert_equal 1, duck.calls
  end
end

Backends.parametrize(ReleaseOutcomeCases, "ReleaseOutcomeTest")
