# Interop agent, Ruby side. Usage:
#   agent.rb hold  URL NS KEY   hold KEY with stop flag stop:KEY until stopped
#   agent.rb stop  URL NS KEY   check KEY is held, raise stop:KEY
#   agent.rb check URL NS KEY   print whether KEY is held; lower stop:KEY
#   agent.rb info  URL NS KEY   print "INFO <fence> <holder label>" (or "INFO none")
require "mistri_locks"

$stdout.sync = true
cmd, url, ns, key = ARGV
locks = if url.start_with?("postgres://", "postgresql://")
          MistriLocks::Postgres.new(url: url, namespace: ns)
        elsif url.start_with?("mysql://", "mariadb://")
          MistriLocks.open(url, namespace: ns)
        else
          MistriLocks::Redis.new(url: url, namespace: ns)
        end
stop = "stop:#{key}"
case cmd
when "hold"
  hold = locks.hold(key, ttl: 5, heartbeat: 0.2, stop_key: stop)
  if hold.nil?
    puts "REFUSED"
    exit 3
  end
  puts "HELD #{hold.fence}"
  tripped = hold.signal.wait(10)
  puts "#{tripped ? 'STOPPED' : 'TIMEOUT'} #{hold.signal.reason}"
  hold.release
  puts "RELEASED"
  exit(tripped ? 0 : 4)
when "stop"
  held = locks.held?(key)
  puts "HELD? #{held}"
  locks.set_flag(stop, ttl: 30)
  exit(held ? 0 : 5)
when "check"
  puts "held=#{locks.held?(key)}"
  locks.clear_flag(stop)
  exit 0
when "info"
  info = locks.info(key)
  puts(info.nil? ? "INFO none" : "INFO #{info[:fence]} #{info[:holder]}")
  exit 0
end
exit 2
