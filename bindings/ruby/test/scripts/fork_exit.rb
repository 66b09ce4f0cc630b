# frozen_string_literal: true

# A forked child uses holds, delivery and waits, then exits normally (no
# exit!): the VM must end the threads we started without hanging.
require "mistri_locks"
require "timeout"

url, namespace = ARGV
adapter = MistriLocks::Redis.new(url: url, namespace: namespace)
duck = Object.new
def duck.abort!(_reason) = nil
parent_hold = adapter.hold("fx:parent", ttl: 5, heartbeat: 0.1, signal: duck) # delivery thread up
pid = fork do
  hold = adapter.hold("fx:child", ttl: 5, heartbeat: 0.1, stop_key: "fx:stop", signal: duck)
  s = MistriLocks::AbortSignal.new
  s.on_abort { nil }
  Thread.new { s.wait } # a waiter left blocked at exit
  adapter.set_flag("fx:stop", ttl: 5)
  hold.release
  exit 0
end
status = Timeout.timeout(20) { Process.wait2(pid)[1] }
parent_hold.release
puts status.success? ? "ok" : "child failed: #{status.inspect}"
