# frozen_string_literal: true

# Raises a stop flag on Redis; prints the monotonic time just before.
require "mistri_locks"

url, namespace, stop_key = ARGV
adapter = MistriLocks::Redis.new(url: url, namespace: namespace)
adapter.held?("warm-up") # connect before taking the time
at = Process.clock_gettime(Process::CLOCK_MONOTONIC)
adapter.set_flag(stop_key, ttl: 30)
puts at
