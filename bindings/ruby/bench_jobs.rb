# frozen_string_literal: true

# Benchmark (not a test): what `include MistriLocks::Job` costs a short job.
#
#   bindings/ruby/build.sh --release && ruby -I bindings/ruby/lib bindings/ruby/bench_jobs.rb
#
# ONE real `sidekiq` process (Debian's ruby-sidekiq, concurrency 5, ActiveJob's
# Sidekiq adapter; the job test's boot file, test/scripts/job_boot.rb) against
# one redis-server, which also holds the leases (MistriLocks::Redis). Two jobs
# with the same body (append one line to a file): ShortLeasedJob with
# holds_lease (a distinct key per job, so no conflicts), ShortPlainJob without.
# Rounds alternate which kind runs first. Each round queues N jobs on a queue
# the worker does not read, then RENAMEs it onto the worker's queue and times
# the drain: jobs/s. ActiveJob's perform.active_job duration (which wraps the
# lease's around_perform) gives each job's time; the added latency is the
# leased p50/p99 minus the plain p50/p99.
#
# Env: BENCH_JOBS (per round, default 400), BENCH_ROUNDS (per kind, default 3),
# BENCH_REDIS_PORT (use that loopback redis-server instead of starting one),
# BENCH_KV=1 (also print key=value lines, for scripts/bench), BENCH_CONCURRENCY
# (the worker's threads, default 5).

require "fileutils"
require "securerandom"
require "socket"
require "tmpdir"
require "mistri_locks"
require "sidekiq"
require "active_job"
require "logger"

N = Integer(ENV.fetch("BENCH_JOBS", "400"))
ROUNDS = Integer(ENV.fetch("BENCH_ROUNDS", "3"))
CONCURRENCY = Integer(ENV.fetch("BENCH_CONCURRENCY", "5"))
KV = ENV["BENCH_KV"] == "1"
SCRIPTS = File.expand_path("test/scripts", __dir__)
require File.join(SCRIPTS, "job_classes")

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

def wait_until(bound, what)
  deadline = now + bound
  until yield
    raise "#{what}: not within #{bound} s" if now > deadline

    sleep 0.005
  end
end

def lines(path) = File.exist?(path) ? File.foreach(path).count : 0

def percentile(sorted, p) = sorted[[(sorted.size * p).ceil - 1, 0].max]

server = nil
if ENV["BENCH_REDIS_PORT"]
  port = Integer(ENV["BENCH_REDIS_PORT"])
else
  probe = TCPServer.new("127.0.0.1", 0)
  port = probe.addr[1]
  probe.close
  server = spawn("redis-server", "--port", port.to_s, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 out: File::NULL, err: File::NULL)
end
url = "redis://127.0.0.1:#{port}/0"
dir = Dir.mktmpdir("mistri-bench-jobs")
worker = nil
begin
  Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
  Sidekiq.logger.level = Logger::WARN
  Sidekiq.configure_client { |c| c.redis = { url: url } }
  ActiveJob::Base.queue_adapter = :sidekiq
  ActiveJob::Base.logger = Logger.new(nil)
  wait_until(10, "redis-server up") { (Sidekiq.redis { |r| r.ping } rescue nil) == "PONG" } # rubocop:disable Style/RescueModifier

  queue = "bench-#{SecureRandom.hex(4)}"
  ready = File.join(dir, "ready")
  durations = File.join(dir, "durations")
  ns = "mistri:bench:#{SecureRandom.hex(4)}"
  worker = spawn({ "REDIS_URL" => url, "MISTRI_JOB_READY" => ready, "MISTRI_JOB_LOCKS" => "redis",
                   "MISTRI_JOB_URL" => url, "MISTRI_JOB_NAMESPACE" => ns, "MISTRI_JOB_DURATIONS" => durations,
                   "RUBYLIB" => [File.expand_path("lib", __dir__), ENV["RUBYLIB"]].compact.join(File::PATH_SEPARATOR) },
                 "sidekiq", "-r", File.join(SCRIPTS, "job_boot.rb"), "-c", CONCURRENCY.to_s, "-q", queue, "-t", "1",
                 in: File::NULL, out: File.join(dir, "sidekiq.log"), err: %i[child out])
  wait_until(90, "sidekiq booted") { File.exist?(ready) }

  rates = Hash.new { |h, k| h[k] = [] }
  witness = File.join(dir, "witness")
  run = lambda do |job, record|
    staging = "#{queue}-staging"
    N.times { |i| job.set(queue: staging).perform_later(i, witness) }
    before = lines(witness)
    t0 = now
    Sidekiq.redis { |r| r.rename("queue:#{staging}", "queue:#{queue}") }
    wait_until(60 + N, "#{job} drained") { lines(witness) >= before + N }
    rates[job.name] << N / (now - t0) if record
  end
  run.call(ShortPlainJob, false) # warm-up: both code paths loaded, connections open
  run.call(ShortLeasedJob, false)
  File.write(durations, "")
  ROUNDS.times do |r|
    kinds = r.even? ? [ShortPlainJob, ShortLeasedJob] : [ShortLeasedJob, ShortPlainJob]
    kinds.each { |job| run.call(job, true) }
  end

  by_kind = Hash.new { |h, k| h[k] = [] }
  File.foreach(durations) do |line|
    name, ms = line.split
    by_kind[name] << Float(ms)
  end
  plain = by_kind["ShortPlainJob"].sort
  leased = by_kind["ShortLeasedJob"].sort
  median = ->(xs) { xs.sort[xs.size / 2] }
  plain_rate = median.call(rates["ShortPlainJob"])
  leased_rate = median.call(rates["ShortLeasedJob"])
  puts "Jobs on one sidekiq process (concurrency #{CONCURRENCY}, ActiveJob adapter, Redis), #{N} jobs x #{ROUNDS} rounds each, interleaved:"
  puts format("  without the lease  %8.0f jobs/s   perform p50 %.2f ms  p99 %.2f ms", plain_rate,
              percentile(plain, 0.5), percentile(plain, 0.99))
  puts format("  holds_lease        %8.0f jobs/s   perform p50 %.2f ms  p99 %.2f ms   (ratio %.2f)", leased_rate,
              percentile(leased, 0.5), percentile(leased, 0.99), leased_rate / plain_rate)
  puts format("  added per job      p50 %.2f ms  p99 %.2f ms",
              percentile(leased, 0.5) - percentile(plain, 0.5), percentile(leased, 0.99) - percentile(plain, 0.99))
  if KV
    puts "rb_jobs_plain_per_s=#{plain_rate}", "rb_jobs_leased_per_s=#{leased_rate}",
         "rb_jobs_plain_p50_ms=#{percentile(plain, 0.5)}", "rb_jobs_plain_p99_ms=#{percentile(plain, 0.99)}",
         "rb_jobs_leased_p50_ms=#{percentile(leased, 0.5)}", "rb_jobs_leased_p99_ms=#{percentile(leased, 0.99)}"
  end
ensure
  if worker
    Process.kill("TERM", worker)
    Process.wait(worker)
  end
  if server
    Process.kill("TERM", server)
    Process.wait(server)
  end
  FileUtils.rm_rf(dir)
end
