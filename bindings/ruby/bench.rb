# frozen_string_literal: true

# Benchmark (not a test): acquire+release pairs per second.
#
#   bindings/ruby/build.sh --release && taskset -c 0 ruby -I bindings/ruby/lib bindings/ruby/bench.rb
#
# - Memory: MistriLocks::Memory next to a plain-Ruby adapter written the way
#   the seed's is (a Monitor around a Hash of monotonic deadlines). The ratio
#   says how thin the binding is.
# - Redis: MistriLocks::Redis next to raw SET NX PX + a Lua compare-and-
#   delete through the redis gem (Debian: apt-get install ruby-redis), on
#   a redis-server this script starts on a free loopback port (pinned to
#   the last core).
#
# Env: BENCH_SECONDS (per measurement, default 2); BENCH_REDIS_PORT (use
# that loopback redis-server instead of starting one); BENCH_KV=1 (also
# print key=value lines, for scripts/bench).

require "etc"
require "mistri_locks"
require "monitor"
require "securerandom"
require "socket"

SECONDS_EACH = Float(ENV.fetch("BENCH_SECONDS", "2"))
KV = ENV["BENCH_KV"] == "1"

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

# Runs +pair+ (one acquire+release) in batches for +seconds+; pairs/s.
def slice_rate(seconds, pair)
  n = 0
  t0 = now
  deadline = t0 + seconds
  while now < deadline
    1000.times(&pair)
    n += 1000
  end
  n / (now - t0)
end

# Measures the candidates in interleaved slices (ROUNDS rounds, SECONDS_EACH
# per candidate in all) and keeps each one's best slice, so a burst of load
# on the machine hits both sides alike (more, shorter slices: a loaded
# machine leaves each side some quiet ones). Returns the rates in order.
ROUNDS = 15

def compare(*pairs)
  pairs.each { |pair| 2000.times(&pair) } # warm-up
  best = Array.new(pairs.size, 0.0)
  ROUNDS.times do
    pairs.each_with_index do |pair, i|
      best[i] = [best[i], slice_rate(SECONDS_EACH / ROUNDS, pair)].max
    end
  end
  best
end

# The seed's Memory adapter, as the mistri gem writes it.
class SeedMemory
  def initialize
    @monitor = Monitor.new
    @leases = {}
    @flags = {}
  end

  def acquire(key, ttl:)
    @monitor.synchronize do
      t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      deadline = @leases[key]
      return false if deadline && deadline > t

      @leases[key] = t + ttl
      true
    end
  end

  def release(key)
    @monitor.synchronize { !@leases.delete(key).nil? }
  end
end

def row(label, rate) = puts(format("  %-44s %12.0f pairs/s  %7.2f us/pair", label, rate, 1e6 / rate))

puts "mistri_locks Ruby bench (#{RUBY_DESCRIPTION})"
puts "Memory acquire+release:"
ours = MistriLocks::Memory.new
seed = SeedMemory.new
ours_rate, seed_rate = compare(
  proc {
    ours.acquire("bench", ttl: 30) or raise "not acquired"
    ours.release("bench") or raise "not released"
  },
  proc {
    seed.acquire("bench", ttl: 30) or raise "not acquired"
    seed.release("bench") or raise "not released"
  }
)
row("MistriLocks::Memory", ours_rate)
row("seed-style Ruby adapter (Monitor + Hash)", seed_rate)
puts format("  ratio: %.2fx", ours_rate / seed_rate)
puts format("rb_memory_pairs=%.0f\nrb_seed_memory_pairs=%.0f", ours_rate, seed_rate) if KV

begin
  require "redis"
rescue LoadError
  puts "Redis: skipped (the redis gem is missing: apt-get install ruby-redis)"
  exit
end

if ENV["BENCH_REDIS_PORT"]
  port = Integer(ENV["BENCH_REDIS_PORT"])
  server = nil
else
  probe = TCPServer.new("127.0.0.1", 0)
  port = probe.addr[1]
  probe.close
  # On the last core, as scripts/bench does: a client pinned with
  # `taskset -c 0` would otherwise pass its core on to the server.
  # (Etc.nprocessors counts only the cores this process may use.)
  cores = Etc.sysconf(Etc::SC_NPROCESSORS_ONLN)
  pin = cores > 1 && system("taskset -V", out: File::NULL, err: File::NULL) ? ["taskset", "-c", (cores - 1).to_s] : []
  server = spawn(*pin, "redis-server", "--port", port.to_s, "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", out: File::NULL, err: File::NULL)
end
begin
  raw = Redis.new(host: "127.0.0.1", port: port)
  begin
    raw.ping
  rescue Redis::CannotConnectError
    sleep 0.05
    retry
  end
  release_lua = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
  sha = raw.script(:load, release_lua)
  adapter = MistriLocks::Redis.new(url: "redis://127.0.0.1:#{port}/0", namespace: "bench")
  puts "Redis acquire+release (one client, loopback, redis-server #{raw.info["redis_version"]}):"
  ours_redis, raw_redis = compare(
    proc {
      adapter.acquire("bench", ttl: 30) or raise "not acquired"
      adapter.release("bench") or raise "not released"
    },
    proc {
      token = SecureRandom.hex(16)
      raw.set("bench:raw", token, nx: true, px: 30_000) or raise "not acquired"
      raw.evalsha(sha, keys: ["bench:raw"], argv: [token]) == 1 or raise "not released"
    }
  )
  row("MistriLocks::Redis", ours_redis)
  row("redis gem: SET NX PX + Lua compare-and-delete", raw_redis)
  puts format("  ratio: %.2fx", ours_redis / raw_redis)
  puts format("rb_redis_pairs=%.0f\nrb_gem_pairs=%.0f", ours_redis, raw_redis) if KV
ensure
  if server
    Process.kill("TERM", server)
    Process.wait(server)
  end
end
