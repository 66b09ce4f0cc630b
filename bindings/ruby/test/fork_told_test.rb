# frozen_string_literal: true

# A forked child's copy of a hold is told (issue 28 §4): on first use in the
# child it is lost? and its signal is aborted? with a reason naming the fork,
# also when the child only looks at the signal it passed; the parent's hold
# is unaffected. Also: a hold's stop key is in its holder description
# (info and list), on every backend.

require_relative "test_helper"
require_relative "process_test" # ForkCases#in_child

module ForkToldCases
  include ForkCases

  def locks = backend.locks

  def names_the_fork?(reason)
    reason.is_a?(String) && reason.include?("forked") && reason.include?(Process.pid.to_s)
  end

  def test_a_forked_childs_copy_of_a_hold_reports_lost
    asked = MistriLocks::AbortSignal.new
    watched = MistriLocks::AbortSignal.new
    bystander = MistriLocks::AbortSignal.new
    hold = locks.hold("told", ttl: 1.5, heartbeat: 0.1, stop_key: "stop", signal: asked)
    other = locks.hold("told-2", ttl: 1.5, heartbeat: 0.1, signal: watched)
    got = in_child do
      {
        "lost" => hold.lost?,
        "aborted" => hold.signal.aborted?,
        "reason" => names_the_fork?(hold.signal.reason),
        # a work loop that only checks its signal
        "watched" => watched.wait(5),
        "watched_reason" => names_the_fork?(watched.reason),
        "bystander" => bystander.aborted?,
        "release" => hold.release
      }
    end
    assert_nil got["error"]
    assert_equal({ "lost" => true, "aborted" => true, "reason" => true, "watched" => true,
                   "watched_reason" => true, "bystander" => false, "release" => false }, got)
    sleep 2.0 # past the ttl (1.5 s, not shorter: a loaded machine): the parent still renews
    refute hold.lost?, asked.reason
    refute asked.aborted?
    refute other.lost?, watched.reason
    refute watched.aborted?
    assert locks.held?("told")
    assert_same true, hold.release
    assert_same true, other.release
  end

  def test_a_holds_stop_key_is_in_its_description
    hold = locks.hold("described", ttl: 5, heartbeat: 1, stop_key: "stop:job 7")
    info = locks.info("described")
    assert_equal "stop:job 7", info[:stop_key]
    assert_equal "stop:job 7", info[:holders][0][:stop_key]
    refute_includes info[:holder].to_s, "\x1f"
    assert_equal ["stop:job 7"], locks.list("describ")[:leases].map { |l| l[:stop_key] }
    assert_same true, hold.release
    assert locks.acquire("described", ttl: 5)
    assert_nil locks.info("described")[:stop_key]
    assert locks.release("described")
  end
end

Backends.parametrize(ForkToldCases, "ForkToldTest")
