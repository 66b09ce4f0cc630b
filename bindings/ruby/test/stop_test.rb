# frozen_string_literal: true

# The job stop key and stop-the-holders come from the core (issue 40):
# MistriLocks::Job.stop_key is job::stop_key, Locks#stop_job is
# Locks::stop_job and Locks#stop_holders is Locks::stop_holders, on every
# backend; Hold#interruption is the core's typed Hold::interruption (no
# reason text read), and Hold#stopping? answers from it.

require_relative "test_helper"
require "mistri_locks/job"

module StopCases
  def locks = backend.locks

  def test_stop_job_raises_the_cores_job_stop_key
    assert_equal "job:abc:stop", MistriLocks._job_stop_key("abc"), "the core's format"
    assert_equal "job:abc:stop", locks.stop_job("abc", ttl: 5)
    assert backend.owner.flag?("job:abc:stop"), "another owner sees the flag"
    assert_equal "job:sym:stop", locks.stop_job(:sym)
    e = assert_raises(ArgumentError) { locks.stop_job("", ttl: 5) }
    assert_match(/job id must not be empty/, e.message)
    assert_raises(TypeError) { locks.stop_job(7) }
  end

  def test_stop_holders_raises_each_holders_stop_key_once
    assert_equal [], locks.stop_holders("report"), "nobody holds it"
    plain = locks.hold("plain", ttl: 5, heartbeat: 1)
    assert_equal [], locks.stop_holders("plain"), "a plain lease can only be broken"
    a = locks.hold("report", ttl: 5, heartbeat: 1, limit: 3, stop_key: "stop:a")
    b = backend.owner.hold("report", ttl: 5, heartbeat: 1, limit: 3, stop_key: "stop:b")
    c = locks.hold("report", ttl: 5, heartbeat: 1, limit: 3, stop_key: "stop:a")
    other = backend.owner
    assert_equal %w[stop:a stop:b], other.stop_holders("report", ttl: 5).sort
    assert other.flag?("stop:a") && other.flag?("stop:b")
    [plain, a, b, c].each(&:release)
    assert_raises(ArgumentError) { locks.stop_holders("report", ttl: -1) }
  end

  def test_interruption_is_typed_stopped_with_the_flag_then_lost_with_its_cause
    hold = locks.hold("work", ttl: 1, heartbeat: 0.1, stop_key: "stop:work")
    assert_nil hold.interruption
    assert_nil hold.stopping?
    hold.checkpoint!
    backend.owner.set_flag("stop:work", ttl: 5)
    Timeout.timeout(5) { sleep 0.05 until hold.interruption }
    assert_equal [:stopped, "stop:work"], hold.interruption
    assert_equal :stopped, hold.stopping?
    e = assert_raises(MistriLocks::Job::Interrupted) { hold.checkpoint! }
    assert_equal :stopped, e.reason
    hold.release

    lost = locks.hold("gone", ttl: 1, heartbeat: 0.1)
    backend.delete_lease("gone")
    Timeout.timeout(5) { sleep 0.05 until lost.interruption }
    assert_equal [:lost, :not_held], lost.interruption
    assert_equal :lost, lost.stopping?
    e = assert_raises(MistriLocks::Job::Interrupted) { lost.checkpoint! }
    assert_equal :lost, e.reason
  end

  def test_a_callers_own_abort_is_stopped_without_a_flag
    signal = MistriLocks::AbortSignal.new
    hold = locks.hold("mine", ttl: 5, heartbeat: 1, signal: signal)
    signal.abort!("enough")
    assert_equal [:stopped, nil], hold.interruption
    assert_equal :stopped, hold.stopping?
    hold.release
  end
end

Backends.parametrize(StopCases, "StopTest")

class JobStopKeyTest < Minitest::Test
  # The Ruby face holds no copy of the format: the stop key is the core's.
  def test_no_stop_key_format_in_the_ruby_face
    lib = File.expand_path("../lib", __dir__)
    hits = Dir["#{lib}/**/*.rb"].select { |f| File.read(f).include?("job:") }
    assert_empty hits
  end
end
