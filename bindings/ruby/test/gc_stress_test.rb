# frozen_string_literal: true

# The binding surface once more under GC.stress (a full GC at every
# allocation): Memory contract cases, the signal cases and the waiting
# cases. A Ruby object the
# extension failed to keep reachable (a callback block, a duck-typed signal,
# a hold's signal) would be collected here and its use would crash or
# misbehave. Redis and subprocess cases are left to the normal run (the same
# Ruby code paths, much slower under stress).

require_relative "test_helper"
require_relative "contract_test"
require_relative "signal_test"
require_relative "waiting_test"

module UnderGCStress
  def setup
    super
    GC.stress = true
  end

  def teardown
    GC.stress = false
    super
  end
end

Backends.parametrize(ContractCases, "ContractGCStressTest",
                     factories: Backends::FACTORIES.slice("Memory")) do
  include UnderGCStress
  # A full GC at every allocation makes every step slow: the time bounds
  # of the cases (what they measure is checked by the normal run) stretch.
  def time_slack = 4
  # The contended case makes thousands of objects per hold; under stress it
  # measures the collector, not the binding.
  undef_method :test_contending_threads_never_both_hold
  # Its 0.3 s lease must outlive the next step, which under stress (a full
  # GC at every allocation) may take longer than that on a loaded machine
  # (seen 1 run in 3, before and after issue 21): it would measure the
  # collector. The normal run keeps the case.
  undef_method :test_fractional_ttl_expires_and_can_be_retaken
end

class SignalGCStressTest < Minitest::Test
  include SignalCases
  include UnderGCStress
  # Counting iterations of another thread under stress is meaningless.
  undef_method :test_a_wait_releases_the_gvl
  # A full GC at every allocation, in a heap holding the whole suite, on a
  # loaded machine: Thread#raise seen to land 1.2 s after it was sent and a
  # 0.2 s Timeout 7 s after it began. What the bounds prove (the wait is
  # interrupted, it has no deadline of its own) holds with a wider bound.
  def time_slack = 10
end

# Waiting acquires and holds: the wait's wake-up and unblock function, and
# the hold made at its end.
Backends.parametrize(WaitingCases, "WaitingGCStressTest",
                     factories: Backends::FACTORIES.slice("Memory")) do
  include UnderGCStress
end
