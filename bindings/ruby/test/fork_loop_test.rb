# frozen_string_literal: true

# Forking in a tight loop while a busy heartbeat runs: no child may hang on a
# lock that another thread of the parent held at the moment of the fork (the
# engine's state, the connection pools, the Memory store, SQLite's own lock
# bookkeeping, the delivery queue).

require_relative "test_helper"
require "tmpdir"

class ForkLoopTest < Minitest::Test
  def fork_loop(adapter, holds:, heartbeat:)
    delivered = Queue.new
    kept = (0...holds).map do |i|
      signal = MistriLocks::AbortSignal.new
      signal.on_abort { |reason| delivered << reason }
      adapter.hold("busy-#{i}", ttl: 1, heartbeat: heartbeat,
                                stop_key: (i % 10).zero? ? "stop-#{i}" : nil, signal: signal)
    end
    ok = hung = failed = 0
    100.times do |j|
      adapter.set_flag("stop-#{(j / 10) * 10}", ttl: 5) if (j % 10).zero?
      pid = fork do
        Process.setrlimit(:CPU, 5) rescue nil # a runaway child ends by itself
        got = adapter.hold("child-#{j}", ttl: 1, heartbeat: 0.1)
        exit!(got ? 0 : 1)
      end
      deadline = Clock.now + 3
      loop do
        done, status = Process.waitpid2(pid, Process::WNOHANG)
        if done
          status.success? ? ok += 1 : failed += 1
          break
        end
        if Clock.now > deadline
          Process.kill(:KILL, pid)
          Process.wait(pid)
          hung += 1
          break
        end
        sleep 0.001
      end
    end
    assert_equal [0, 0], [hung, failed], "#{ok} ok, #{hung} hung, #{failed} failed"
    assert kept.none? { |h| h&.lost? }
  ensure
    kept&.each { |h| h&.release }
  end

  def test_fork_loop_memory
    fork_loop(MistriLocks::Memory.new, holds: 2000, heartbeat: 0.001)
  end

  def test_fork_loop_local
    Dir.mktmpdir("mistri-rb-fork-") do |dir|
      fork_loop(MistriLocks::Local.new(path: File.join(dir, "locks.db")), holds: 200, heartbeat: 0.01)
    end
  end
end
