# frozen_string_literal: true

# Holds two leases on Redis with one stop key: one with a
# MistriLocks::AbortSignal, one with a duck-typed signal. Prints "ready",
# then, once both tripped, one JSON line: when and how.
require "mistri_locks"
require "json"

url, namespace, stop_key = ARGV
clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
duck = Object.new
duck.instance_variable_set(:@queue, Queue.new)
def duck.abort!(reason) = @queue << [reason, Process.clock_gettime(Process::CLOCK_MONOTONIC), Thread.current.name]
def duck.queue = @queue

adapter = MistriLocks::Redis.new(url: url, namespace: namespace)
plain = adapter.hold("xp:plain", ttl: 5, heartbeat: 0.1, stop_key: stop_key)
ducked = adapter.hold("xp:duck", ttl: 5, heartbeat: 0.1, stop_key: stop_key, signal: duck)
abort "refused" unless plain && ducked
puts "ready"
$stdout.flush
abort "no trip" unless plain.signal.wait(20)
signal_at = clock.call
duck_reason, duck_at, duck_thread = duck.queue.pop
puts JSON.generate(signal_at: signal_at, signal_reason: plain.signal.reason,
                   duck_at: duck_at, duck_reason: duck_reason, duck_thread: duck_thread,
                   lost: plain.lost? || ducked.lost?)
plain.release
ducked.release
# Normal exit with the delivery thread alive: must not hang.
