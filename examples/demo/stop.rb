# Demo operator, Ruby side: asks whoever holds KEY to stop by raising the
# flag STOP; prints RAISED <monotonic time> (the clock Python's
# time.monotonic() reads too, so the demo can measure the stop latency).
#
# Usage: ruby stop.rb URL KEY STOP
require "mistri_locks"

url, key, stop = ARGV
locks = if url.start_with?("redis://", "rediss://")
          MistriLocks::Redis.new(url: url, namespace: "mistri:demo")
        else
          MistriLocks::Local.new(path: url)
        end
abort "#{key} is not held" unless locks.held?(key)
locks.set_flag(stop, ttl: 30)
puts format("RAISED %.6f", Process.clock_gettime(Process::CLOCK_MONOTONIC))
