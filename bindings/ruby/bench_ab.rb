# frozen_string_literal: true

# A/B of two builds of the Ruby face (not a test): runs bench.rb with each
# build's lib folder in turn, ROUNDS rounds, against one redis-server pinned
# to the last core, every client pinned to core 0. Each run's figures are
# ratios to the baselines measured in that same process (bench.rb), so load
# that drifts between runs moves both sides of a ratio alike; the A/B
# interleaves the builds so drift hits both builds alike too.
#
#   # "before": a copy of lib/ with the .so built from the old commit
#   ruby bindings/ruby/bench_ab.rb /work/tgt-before/lib bindings/ruby/lib [rounds]
#
# Env: BENCH_SECONDS per measurement (bench.rb's, default 2 here).

require "etc"
require "socket"

abort "usage: bench_ab.rb BEFORE_LIB AFTER_LIB [ROUNDS]" unless (2..3).cover?(ARGV.size)
libs = { "before" => ARGV[0], "after" => ARGV[1] }
rounds = Integer(ARGV[2] || "5")
bench = File.expand_path("bench.rb", __dir__)
cores = Etc.sysconf(Etc::SC_NPROCESSORS_ONLN)
taskset = cores > 1 && system("taskset -V", out: File::NULL, err: File::NULL)
client_pin = taskset ? %w[taskset -c 0] : []
server_pin = taskset ? ["taskset", "-c", (cores - 1).to_s] : []

probe = TCPServer.new("127.0.0.1", 0)
port = probe.addr[1]
probe.close
server = spawn(*server_pin, "redis-server", "--port", port.to_s, "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", out: File::NULL, err: File::NULL)
begin
  begin
    TCPSocket.new("127.0.0.1", port).close
  rescue Errno::ECONNREFUSED
    sleep 0.05
    retry
  end
  env = { "BENCH_KV" => "1", "BENCH_REDIS_PORT" => port.to_s,
          "BENCH_SECONDS" => ENV.fetch("BENCH_SECONDS", "2") }
  ratios = Hash.new { |h, k| h[k] = Hash.new { |hh, kk| hh[kk] = [] } }
  rounds.times do |round|
    order = round.even? ? libs.keys : libs.keys.reverse
    order.each do |build|
      out = IO.popen(env, [*client_pin, "ruby", "-I", libs[build], bench], &:read)
      raise "bench.rb failed for #{build}" unless $?.success?

      kv = out.scan(/^(\w+)=([\d.]+)$/).to_h { |k, v| [k, Float(v)] }
      ratios[build]["memory"] << kv.fetch("rb_memory_pairs") / kv.fetch("rb_seed_memory_pairs")
      ratios[build]["redis"] << kv.fetch("rb_redis_pairs") / kv.fetch("rb_gem_pairs")
      printf("round %d %-6s memory %.2fx (%.0f vs seed %.0f pairs/s)  redis %.2fx (%.0f vs gem %.0f pairs/s)\n",
             round + 1, build, ratios[build]["memory"].last, kv["rb_memory_pairs"],
             kv["rb_seed_memory_pairs"], ratios[build]["redis"].last, kv["rb_redis_pairs"], kv["rb_gem_pairs"])
    end
  end
  median = ->(xs) { s = xs.sort; s.size.odd? ? s[s.size / 2] : (s[s.size / 2 - 1] + s[s.size / 2]) / 2 }
  puts
  puts "| figure | build | median | min | max |"
  puts "|---|---|---|---|---|"
  [["memory", "Ruby Memory ÷ seed Monitor+Hash"], ["redis", "Ruby Redis ÷ redis gem SET NX PX + Lua"]].each do |key, label|
    libs.each_key do |build|
      xs = ratios[build][key]
      printf("| %s | %s | %.2f | %.2f | %.2f |\n", label, build, median.(xs), xs.min, xs.max)
    end
  end
ensure
  Process.kill("TERM", server)
  Process.wait(server)
end
