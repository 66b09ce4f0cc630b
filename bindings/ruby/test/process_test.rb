# frozen_string_literal: true

# Across processes: a stop flag raised by one Ruby process trips a holder in
# another; SIGINT interrupts a blocked wait; forked children.

require_relative "test_helper"
require "json"
require "open3"

class CrossProcessTest < Minitest::Test
  def namespace = (@namespace ||= "mistri:xp:#{SecureRandom.hex(4)}")

  def test_a_flag_raised_by_another_process_trips_the_holder_within_a_tick
    holder = IO.popen(Subprocess.command("holder.rb", TestRedis.url, namespace, "xp:stop"))
    assert_equal "ready", Timeout.timeout(20) { holder.gets }&.chomp
    sleep 0.15 # a few ticks with the flag down
    out, status = Open3.capture2(*Subprocess.command("raise_flag.rb", TestRedis.url, namespace, "xp:stop"))
    assert status.success?
    raised_at = Float(out)
    result = JSON.parse(Timeout.timeout(20) { holder.gets })
    # Bounded: a holder that hangs at exit fails the test, not the suite.
    Timeout.timeout(20) { holder.close }
    assert $?.success?, "holder exited badly (or hung at exit)"
    # tick = heartbeat = 0.1 s, + 0.25 s slack
    assert_operator result["signal_at"] - raised_at, :<=, 0.1 + 0.25
    assert_operator result["duck_at"] - raised_at, :<=, 0.1 + 0.25
    assert_match(/xp:stop/, result["signal_reason"])
    assert_match(/xp:stop/, result["duck_reason"])
    assert_equal "mistri_locks delivery", result["duck_thread"]
    refute result["lost"]
    adapter = MistriLocks::Redis.new(url: TestRedis.url, namespace: namespace)
    refute adapter.held?("xp:plain"), "released on the way out"
  ensure
    if holder && !holder.closed?
      Process.kill("KILL", holder.pid) rescue nil # rubocop:disable Style/RescueModifier
      holder.close rescue nil # rubocop:disable Style/RescueModifier
    end
  end

  def test_sigint_interrupts_a_blocked_wait_promptly
    Open3.popen2(*Subprocess.command("wait_for_int.rb")) do |_in, out, wait|
      assert_equal "waiting", Timeout.timeout(20) { out.gets }&.chomp
      sleep 0.3
      sent = Clock.now
      Process.kill("INT", wait.pid)
      line = Timeout.timeout(5) { out.gets }
      assert_match(/interrupted/, line)
      assert_operator Clock.now - sent, :<, 2
      assert Timeout.timeout(5) { wait.value }.success?
    ensure
      # popen2's block end waits for the child: a child that missed the
      # signal must not hang the suite.
      Subprocess.reap(wait)
    end
  end

  def test_a_forked_child_exits_normally_without_hanging
    out, status = Open3.capture2(*Subprocess.command("fork_exit.rb", TestRedis.url, namespace))
    assert status.success?
    assert_equal "ok", out.chomp
  end
end

# fork: the child gets working adapters and never renews or releases a
# lease its parent holds. (Children leave with exit! so minitest's at_exit
# doesn't run there.)
module ForkCases
  def in_child
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      result = begin
        yield
      rescue Exception => e # rubocop:disable Lint/RescueException
        { "error" => "#{e.class}: #{e.message}" }
      end
      writer.write(Marshal.dump(result))
      writer.close
      exit!(0)
    end
    writer.close
    begin
      data = Timeout.timeout(30) { reader.read }
      _, status = Timeout.timeout(30) { Process.wait2(pid) }
    rescue Timeout::Error
      Process.kill("KILL", pid) # a hung child must not outlive the suite
      Process.wait(pid)
      flunk "the forked child hung"
    end
    assert status.success?
    Marshal.load(data)
  end

  def test_a_forked_child_has_working_adapters_and_leaves_the_parents_lease_alone
    a = backend.locks
    hold = a.hold("fork:parent", ttl: 0.5, heartbeat: 0.05)
    assert a.acquire("fork:plain", ttl: 5)
    inherited = MistriLocks::AbortSignal.new # watched before the fork
    heard = Queue.new
    inherited.on_abort { |r| heard << r }
    got = in_child do
      r = {}
      r["hold_release"] = hold.release          # the parent's hold: touches nothing
      r["plain_release"] = a.release("fork:plain") # the parent's lease: not ours
      r["renew"] = a.renew("fork:plain", ttl: 5)
      r["acquire"] = a.acquire("fork:child", ttl: 5) # reconnects (Redis)
      # a signal watched in the parent, tripped by the child's heartbeat:
      # the child's own delivery thread runs the parent-registered block
      inheriting = a.hold("fork:inherit", ttl: 1, heartbeat: 0.05, stop_key: "fork:inherit-stop",
                                           signal: inherited)
      a.set_flag("fork:inherit-stop", ttl: 5)
      r["inherited_callback"] = Timeout.timeout(2) { heard.pop }
      inheriting.release
      child_hold = a.hold("fork:child-hold", ttl: 0.3, heartbeat: 0.05, stop_key: "fork:stop")
      duck = DuckSignal.new
      ducked = a.hold("fork:child-duck", ttl: 0.3, heartbeat: 0.05, stop_key: "fork:stop", signal: duck)
      sleep 0.5
      r["child_hold_renewed"] = a.held?("fork:child-hold") # the child's own heartbeat
      a.set_flag("fork:stop", ttl: 5)
      r["child_signal"] = child_hold.signal.wait(2)
      r["child_duck"] = duck.wait(2)
      r["child_release"] = child_hold.release && ducked.release
      r
    end
    assert_nil got["error"]
    assert_equal false, got["hold_release"]
    assert_equal false, got["plain_release"]
    assert_equal false, got["renew"]
    assert_equal true, got["acquire"]
    assert_equal true, got["child_hold_renewed"]
    assert_equal true, got["child_signal"]
    assert_equal true, got["child_duck"]
    assert_equal true, got["child_release"]
    assert_match(/fork:inherit-stop/, got["inherited_callback"])
    refute inherited.aborted?, "the child's abort stays in the child"
    sleep 0.6 # beyond the parent lease's ttl: still renewed by the parent
    assert a.held?("fork:parent")
    refute hold.lost?
    assert a.held?("fork:plain")
    assert_same true, hold.release
    assert a.release("fork:plain")
  end
end

Backends.parametrize(ForkCases, "ForkTest")
