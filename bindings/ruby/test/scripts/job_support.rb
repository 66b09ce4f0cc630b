# frozen_string_literal: true

# Shared by job_test.rb and sidekiq_test.rb: a real `sidekiq` process (the
# Debian package's executable, `-r job_boot.rb`, concurrency 5) against the
# throwaway redis-server of test_helper.rb, started per test on its own
# queue and stopped afterwards (also on failure).

require "sidekiq"
require "active_job"
require_relative "job_classes"
require_relative "job_boot"

ActiveJob::Base.queue_adapter = :sidekiq
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
ActiveJob::Base.logger = Logger.new(nil)
Sidekiq.logger.level = Logger::WARN

# Points Sidekiq's client at the throwaway redis-server. Called from a
# test, not at load: test_helper starts the server on first use and stops
# it at exit, and at load that exit hook would run before Minitest's.
def sidekiq_client!
  return if @sidekiq_client

  Sidekiq.configure_client { |config| config.redis = { url: TestRedis.url } }
  @sidekiq_client = true
end

# One worker process.
class SidekiqProcess
  BOOT = File.expand_path("job_boot.rb", __dir__)
  # Starting a Ruby with ActiveJob and Sidekiq is machine speed, not
  # protocol: a generous bound, only for readiness.
  BOOT_BOUND = 90

  attr_reader :pid, :log

  def initialize(queue:, locks:, url:, namespace: "mistri:locks", concurrency: 5, env: {})
    sidekiq_client!
    @dir = Dir.mktmpdir("mistri-sidekiq")
    @log = File.join(@dir, "sidekiq.log")
    ready = File.join(@dir, "ready")
    child_env = {
      "REDIS_URL" => TestRedis.url, "MISTRI_JOB_READY" => ready, "MISTRI_JOB_LOCKS" => locks,
      "MISTRI_JOB_URL" => url, "MISTRI_JOB_NAMESPACE" => namespace,
      "JOB_TTL" => JobTiming::TTL.to_s, "JOB_HEARTBEAT" => JobTiming::HEARTBEAT.to_s,
      "RUBYLIB" => [Subprocess::LIB, ENV["RUBYLIB"]].compact.join(File::PATH_SEPARATOR),
    }.merge(env)
    # -t 1: a TERM'd worker shuts down within a second.
    @pid = spawn(child_env, "sidekiq", "-r", BOOT, "-c", concurrency.to_s, "-q", queue, "-t", "1",
                 in: File::NULL, out: @log, err: %i[child out])
    deadline = Clock.now + BOOT_BOUND
    until File.exist?(ready)
      raise "sidekiq exited at boot:\n#{File.read(@log)}" if Process.wait(@pid, Process::WNOHANG)
      raise "sidekiq not ready in #{BOOT_BOUND} s:\n#{File.read(@log)}" if Clock.now > deadline

      sleep 0.05
    end
  end

  def kill9
    Process.kill("KILL", @pid)
    Process.wait(@pid)
    @pid = nil
  end

  # TERM (Sidekiq traps it itself: a clean shutdown within -t), KILL if it
  # is still there after 15 s.
  def stop
    return FileUtils.rm_rf(@dir) unless @pid

    Process.kill("TERM", @pid)
    deadline = Clock.now + 15
    until Process.wait(@pid, Process::WNOHANG)
      if Clock.now > deadline
        Process.kill("KILL", @pid)
        Process.wait(@pid)
        break
      end
      sleep 0.05
    end
    @pid = nil
    FileUtils.rm_rf(@dir)
  end

  def self.run(**options)
    worker = new(**options)
    yield worker
  ensure
    worker&.stop
  end
end

# The lock backends the worker and the test share.
module JobBackend
  def self.redis
    ns = "mistri:test:#{SecureRandom.hex(6)}"
    { locks: "redis", url: TestRedis.url, namespace: ns, handle: MistriLocks::Redis.new(url: TestRedis.url, namespace: ns) }
  end

  def self.local
    path = File.join(TestLocal.dir, "#{SecureRandom.hex(6)}.db")
    { locks: "local", url: path, namespace: "mistri:locks", handle: MistriLocks::Local.new(path: path) }
  end

  def self.postgres
    ns = "mistri:test:#{SecureRandom.hex(6)}"
    { locks: "postgres", url: TestPostgres.url, namespace: ns,
      handle: MistriLocks::Postgres.new(url: TestPostgres.url, namespace: ns) }
  end
end

# Waits for the witness until +done+ (a block over its lines) holds, at
# most +bound+ seconds. Returns the lines.
def wait_witness(path, bound, what)
  deadline = Clock.now + bound
  loop do
    lines = Witness.read(path)
    return lines if yield(lines)
    if Clock.now > deadline
      why = File.exist?("#{path}.why") ? "\ninterruptions:\n#{File.read("#{path}.why")}" : ""
      raise Minitest::Assertion, "#{what}: not within #{bound.round(2)} s; witness:\n#{lines.map { |l| l.join(" ") }.join("\n")}#{why}"
    end

    sleep 0.02
  end
end

# The CLI binary (cargo builds it beside the extension's target).
def cli_path
  @cli_path ||= begin
    root = File.expand_path("../../../..", __dir__)
    target = ENV["CARGO_TARGET_DIR"] || File.join(root, "target")
    path = File.join(target, "debug", "mistri-locks")
    raise "#{path} missing: cargo build -p mistri_locks_cli (bindings/ruby/test.sh does)" unless File.executable?(path)

    path
  end
end
