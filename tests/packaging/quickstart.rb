# frozen_string_literal: true

# The README's Ruby quick start, against the backend at ARGV[0]: holds
# "nightly-report" watching "stop:report", has another process raise that
# flag, and works until the hold's signal trips. Prints HELD <fence>, then
# STOPPED. Run by tests/packaging/run.sh with the installed platform gem.
require "mistri_locks"
require "rbconfig"

url = ARGV.fetch(0)
MistriLocks.locks = MistriLocks.open(url)

result = MistriLocks.hold("nightly-report", ttl: 60, heartbeat: 10, stop_key: "stop:report") do |hold|
  puts "HELD #{hold.fence}"
  $stdout.flush
  # from any process, any language:
  system(RbConfig.ruby, "-e", 'require "mistri_locks"; MistriLocks.open(ARGV[0]).set_flag("stop:report", ttl: 300)', url) or
    abort "set_flag from another process failed"
  # Trips within a tick (1 s) of the flag; bounded only so that a broken
  # install ends the run instead of hanging it.
  600.times do
    break if hold.signal.aborted?

    hold.signal.wait(0.1)
  end
  abort "the stop flag did not trip the hold's signal" unless hold.signal.aborted?
  hold.signal.reason
end
abort "hold refused: another worker is on it" if result.nil?
puts "STOPPED #{result}"
abort "still held after the block" if MistriLocks.locks.held?("nightly-report")
MistriLocks.locks.clear_flag("stop:report")
