# frozen_string_literal: true

# Benchmark (not a test): what `include MistriLocks::Job` adds to a short
# job, beside what the same two round trips cost when the job body makes
# them with the redis gem.
#
#   bindings/ruby/build.sh --release && ruby -I bindings/ruby/lib bindings/ruby/bench_jobs.rb
#
# ONE redis-server (holding Sidekiq's queues and the leases), and per
# concurrency in BENCH_CONCURRENCY (default "1 5") ONE real `sidekiq`
# process (Debian's ruby-sidekiq, ActiveJob's Sidekiq adapter; boot file
# bench_jobs_boot.rb). Four jobs with the same body (append one line to a
# file):
#
#   plain    ShortPlainJob: no lease
#   leased   ShortLeasedJob: holds_lease (a distinct key per job: no conflicts)
#   before   ShortBeforeJob: the lease taken the way MistriLocks::Job took
#            it before issue 40 item 7 (see bench_jobs_boot.rb)
#   gem      ShortGemJob: the body itself takes and releases a lock with the
#            redis gem (SET NX PX, then a Lua compare-and-delete)
#
# Each round queues jobs on a queue the worker does not read, then RENAMEs
# it onto the worker's queue. Rounds of one kind (rotating which kind runs
# first) time the drain: jobs/s. Then mixed rounds queue N jobs of every
# kind in turn and drain them together, so each kind meets the same
# neighbours at the same moment of a noisy machine: ActiveJob's
# perform.active_job duration (around every around_perform, so the lease's
# acquire and release are inside) of those gives each job's time; a kind's
# added time is its p50/p99 minus the plain job's (its own rounds' p50 is
# printed too). "cpu" is the sidekiq process's CPU time per job (all threads:
# Ruby's and the lease's own, mistri-*, also shown apart with their
# context switches per job), median over rounds (Linux).
#
# Pinning (with 2+ cores and taskset): a redis-server this script starts
# runs on the last core, the sidekiq process on core 0 (scripts/bench pins
# its server the same way and passes BENCH_REDIS_PORT).
#
# Env: BENCH_JOBS (per round, default 400), BENCH_ROUNDS (per kind, default
# 3), BENCH_CONCURRENCY (default "1 5"), BENCH_KINDS (default "plain leased
# before gem"; plain is the reference; nostop and bare: see
# bench_jobs_boot.rb), BENCH_REDIS_PORT (use that loopback
# redis-server instead of starting one), BENCH_KV=1 (also print key=value
# lines, for scripts/bench).

require "fileutils"
require "securerandom"
require "socket"
require "tmpdir"
require "etc"
require "mistri_locks"
require "sidekiq"
require "active_job"
require "logger"

N = Integer(ENV.fetch("BENCH_JOBS", "400"))
ROUNDS = Integer(ENV.fetch("BENCH_ROUNDS", "3"))
CONCURRENCIES = ENV.fetch("BENCH_CONCURRENCY", "1 5").split.map { |c| Integer(c) }
KV = ENV["BENCH_KV"] == "1"
BOOT = File.expand_path("bench_jobs_boot.rb", __dir__)
SCRIPTS = File.expand_path("test/scripts", __dir__)
require File.join(SCRIPTS, "job_classes")

KINDS = { "plain" => "ShortPlainJob", "leased" => "ShortLeasedJob", "before" => "ShortBeforeJob",
          "gem" => "ShortGemJob", "nostop" => "ShortNoStopJob", "bare" => "ShortBareJob" }.slice(*ENV.fetch("BENCH_KINDS", "plain leased before gem").split).freeze
LABELS = { "plain" => "no lease", "leased" => "holds_lease", "before" => "holds_lease, before",
           "gem" => "redis gem SET NX PX + Lua del", "nostop" => "hold, no stop key",
           "bare" => "acquire + release, no hold" }.freeze

# The enqueuing side only needs the class names and arguments.
KINDS.each_value do |name|
  next if Object.const_defined?(name)

  Object.const_set(name, Class.new(ActiveJob::Base) { def perform(*) = nil })
end

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

def wait_until(bound, what)
  deadline = now + bound
  until yield
    raise "#{what}: not within #{bound} s" if now > deadline

    sleep 0.005
  end
end

def lines(path) = File.exist?(path) ? File.foreach(path).count : 0

# What the process +pid+ has used so far, all its threads and the lease's
# own (named mistri-*): [CPU seconds, CPU seconds of mistri-*, context
# switches of mistri-*] (Linux's per-thread schedstat and status; nil
# elsewhere).
def cpu_seconds(pid)
  tasks = Dir["/proc/#{pid}/task/*"]
  return nil if tasks.empty?

  all = ours = switches = 0
  tasks.each do |t|
    ns = File.read("#{t}/schedstat").split.first.to_i
    all += ns
    next unless File.read("#{t}/comm").start_with?("mistri")

    ours += ns
    switches += File.read("#{t}/status").scan(/ctxt_switches:\s+(\d+)/).sum { |(n)| n.to_i }
  rescue SystemCallError
    next # a thread that ended meanwhile
  end
  [all / 1e9, ours / 1e9, switches]
end

def percentile(sorted, p) = sorted[[(sorted.size * p).ceil - 1, 0].max]

def pin(core)
  return [] unless Etc.nprocessors >= 2 && system("command -v taskset >/dev/null")

  ["taskset", "-c", (core == :last ? Etc.nprocessors - 1 : core).to_s]
end

server = nil
if ENV["BENCH_REDIS_PORT"]
  port = Integer(ENV["BENCH_REDIS_PORT"])
else
  probe = TCPServer.new("127.0.0.1", 0)
  port = probe.addr[1]
  probe.close
  server = spawn(*pin(:last), "redis-server", "--port", port.to_s, "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", out: File::NULL, err: File::NULL)
end
url = "redis://127.0.0.1:#{port}/0"
dir = Dir.mktmpdir("mistri-bench-jobs")
worker = nil
stop_worker = lambda do
  next unless worker

  Process.kill("TERM", worker)
  Process.wait(worker)
  worker = nil
end
begin
  Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
  Sidekiq.logger.level = Logger::WARN
  Sidekiq.configure_client { |c| c.redis = { url: url } }
  ActiveJob::Base.queue_adapter = :sidekiq
  ActiveJob::Base.logger = Logger.new(nil)
  wait_until(10, "redis-server up") { (Sidekiq.redis { |r| r.ping } rescue nil) == "PONG" } # rubocop:disable Style/RescueModifier

  results = {}
  CONCURRENCIES.each do |concurrency|
    queue = "bench-#{SecureRandom.hex(4)}"
    ready = File.join(dir, "ready-#{concurrency}")
    durations = File.join(dir, "durations-#{concurrency}")
    ns = "mistri:bench:#{SecureRandom.hex(4)}"
    worker = spawn({ "REDIS_URL" => url, "MISTRI_JOB_READY" => ready, "MISTRI_JOB_LOCKS" => "redis",
                     "MISTRI_JOB_URL" => url, "MISTRI_JOB_NAMESPACE" => ns, "MISTRI_JOB_DURATIONS" => durations,
                     "RUBYLIB" => [File.expand_path("lib", __dir__), ENV["RUBYLIB"]].compact.join(File::PATH_SEPARATOR) },
                   *pin(0), "sidekiq", "-r", BOOT, "-c", concurrency.to_s, "-q", queue, "-t", "1",
                   in: File::NULL, out: File.join(dir, "sidekiq-#{concurrency}.log"), err: %i[child out])
    wait_until(90, "sidekiq (c=#{concurrency}) booted") { File.exist?(ready) }

    rates = Hash.new { |h, k| h[k] = [] }
    cpu = Hash.new { |h, k| h[k] = [] }
    lease_cpu = Hash.new { |h, k| h[k] = [] }
    lease_switches = Hash.new { |h, k| h[k] = [] }
    witness = File.join(dir, "witness-#{concurrency}")
    serial = 0
    run = lambda do |kind, record|
      job = Object.const_get(KINDS.fetch(kind))
      staging = "#{queue}-staging"
      N.times { job.set(queue: staging).perform_later(serial += 1, witness) }
      before = lines(witness)
      cpu0 = cpu_seconds(worker)
      t0 = now
      Sidekiq.redis { |r| r.rename("queue:#{staging}", "queue:#{queue}") }
      wait_until(60 + N, "#{job} drained") { lines(witness) >= before + N }
      next unless record

      rates[kind] << N / (now - t0)
      if cpu0
        cpu1 = cpu_seconds(worker)
        cpu[kind] << (cpu1[0] - cpu0[0]) / N
        lease_cpu[kind] << (cpu1[1] - cpu0[1]) / N
        lease_switches[kind] << (cpu1[2] - cpu0[2]).to_f / N
      end
    end
    # A mixed round: N jobs of every kind queued in turn (kind by kind,
    # job by job), drained together: every kind meets the same neighbours
    # and the same moment of a noisy machine.
    mixed = lambda do |r|
      staging = "#{queue}-staging"
      jobs = KINDS.keys.rotate(r).map { |kind| Object.const_get(KINDS.fetch(kind)) }
      N.times { jobs.each { |job| job.set(queue: staging).perform_later(serial += 1, witness) } }
      before = lines(witness)
      Sidekiq.redis { |redis| redis.rename("queue:#{staging}", "queue:#{queue}") }
      wait_until(60 + (N * jobs.size), "mixed round drained") { lines(witness) >= before + (N * jobs.size) }
    end
    read_durations = lambda do
      by_class = Hash.new { |h, k| h[k] = [] }
      File.foreach(durations) do |line|
        name, ms = line.split
        by_class[name] << Float(ms)
      end
      File.write(durations, "")
      by_class
    end
    KINDS.each_key { |kind| run.call(kind, false) } # warm-up: code loaded, connections open
    File.write(durations, "")
    order = KINDS.keys
    ROUNDS.times do |r|
      order.rotate(r).each { |kind| run.call(kind, true) }
    end
    own = read_durations.call
    ROUNDS.times { |r| mixed.call(r) }
    by_class = read_durations.call
    stop_worker.call

    median = ->(xs) { xs.sort[xs.size / 2] }
    results[concurrency] = KINDS.to_h do |kind, name|
      times = by_class[name].sort
      [kind, { rate: median.call(rates[kind]), p50: percentile(times, 0.5), p99: percentile(times, 0.99),
               own_p50: percentile(own[name].sort, 0.5),
               cpu: cpu[kind].empty? ? nil : median.call(cpu[kind]) * 1e3,
               lease_cpu: cpu[kind].empty? ? nil : median.call(lease_cpu[kind]) * 1e3,
               switches: cpu[kind].empty? ? nil : median.call(lease_switches[kind]) }]
    end
  end

  puts "Jobs on one sidekiq process (ActiveJob adapter, Redis), #{N} jobs x #{ROUNDS} rounds per kind, pinned."
  puts "jobs/s and cpu: rounds of one kind (kinds in turn); perform p50/p99 (ActiveJob's): mixed rounds (the kinds'"
  puts "jobs queued in turn, drained together; 'own' p50: the kind's own rounds); 'added': minus the plain job's:"
  results.each do |concurrency, r|
    plain = r["plain"]
    puts "  concurrency #{concurrency}:"
    r.each do |kind, x|
      line = format("    %-30s %6.0f jobs/s (%.2fx)  perform p50 %.3f ms  p99 %.3f ms", LABELS[kind], x[:rate],
                    x[:rate] / plain[:rate], x[:p50], x[:p99])
      # (A lease thread that ended during a round took its counters along:
      # no figure then.)
      if x[:cpu]
        line += format("  cpu %.3f ms/job", x[:cpu])
        line += if x[:switches].negative? then " (mistri threads: -)"
                else format(" (mistri threads %.3f, %.1f switches)", x[:lease_cpu], x[:switches])
                end
      end
      if kind != "plain"
        line += format("   added p50 %.3f ms  p99 %.3f ms  (own %.3f)", x[:p50] - plain[:p50], x[:p99] - plain[:p99],
                       x[:own_p50] - plain[:own_p50])
      end
      puts line
    end
    if r.key?("leased") && r.key?("gem") && r.key?("before")
      added = ->(kind) { r[kind][:p50] - plain[:p50] }
      puts format("    added p50: holds_lease / redis gem %.2f, holds_lease / before %.2f",
                  added.call("leased") / added.call("gem"), added.call("leased") / added.call("before"))
    end
    next unless KV

    r.each do |kind, x|
      puts "rb_jobs_c#{concurrency}_#{kind}_per_s=#{x[:rate]}", "rb_jobs_c#{concurrency}_#{kind}_p50_ms=#{x[:p50]}",
           "rb_jobs_c#{concurrency}_#{kind}_p99_ms=#{x[:p99]}", "rb_jobs_c#{concurrency}_#{kind}_own_p50_ms=#{x[:own_p50]}"
      puts "rb_jobs_c#{concurrency}_#{kind}_cpu_ms=#{x[:cpu]}" if x[:cpu]
    end
  end
ensure
  stop_worker&.call
  if server
    Process.kill("TERM", server)
    Process.wait(server)
  end
  FileUtils.rm_rf(dir)
end
