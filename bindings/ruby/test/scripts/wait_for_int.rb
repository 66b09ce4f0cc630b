# frozen_string_literal: true

# Blocks in a wait that nothing will end; SIGINT must interrupt it.
require "mistri_locks"

# Ruby's own SIGINT handler (raise Interrupt): a shell that starts jobs in the
# background (cron, nohup, a CI agent) starts them with SIGINT ignored, and
# Ruby keeps an inherited SIG_IGN unless told otherwise.
trap("INT", "DEFAULT")

hold = MistriLocks::Memory.new.hold("int", ttl: 5, heartbeat: 1)
puts "waiting"
$stdout.flush
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
begin
  hold.signal.wait
  puts "returned"
  exit 1
rescue Interrupt
  puts "interrupted after #{Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0}"
  exit 0
end
