# frozen_string_literal: true

# What a real `sidekiq -r job_boot.rb` process loads in the job tests: the
# lock backend named by MISTRI_JOB_LOCKS (redis|local|postgres, with
# MISTRI_JOB_URL and MISTRI_JOB_NAMESPACE), ActiveJob on Sidekiq's adapter,
# the MistriLocks Sidekiq middleware, and the test jobs. Writes the file
# MISTRI_JOB_READY once Sidekiq has started (the test waits for it).

$LOAD_PATH.unshift File.expand_path("../../lib", __dir__)
require "sidekiq"
require_relative "job_classes"

module JobLocks
  def self.open(kind, url, namespace)
    case kind
    when "redis" then MistriLocks::Redis.new(url: url, namespace: namespace)
    when "local" then MistriLocks::Local.new(path: url)
    when "postgres" then MistriLocks::Postgres.new(url: url, namespace: namespace)
    else raise ArgumentError, "MISTRI_JOB_LOCKS: #{kind.inspect}"
    end
  end
end

if ENV["MISTRI_JOB_READY"]
  MistriLocks.locks = JobLocks.open(ENV.fetch("MISTRI_JOB_LOCKS"), ENV.fetch("MISTRI_JOB_URL"),
                                    ENV.fetch("MISTRI_JOB_NAMESPACE", "mistri:locks"))
  ActiveJob::Base.queue_adapter = :sidekiq
  # Scheduled retries (retry_job wait:) are picked up within this poll.
  Sidekiq.options[:poll_interval_average] = Float(ENV.fetch("JOB_POLL", "0.1"))
  # Sidekiq's scheduler first sleeps a random 0-5 s (so a fleet's processes
  # don't poll at once); a test's bound is the poll interval from boot on.
  require "sidekiq/scheduled"
  Sidekiq::Scheduled::Poller.prepend(Module.new { def initial_wait = nil })
  # bench_jobs.rb: each perform's duration as ActiveJob measures it (around
  # every around_perform, so the lease's acquire and release are inside).
  if (durations = ENV["MISTRI_JOB_DURATIONS"])
    ActiveSupport::Notifications.subscribe("perform.active_job") do |*event|
      e = ActiveSupport::Notifications::Event.new(*event)
      File.open(durations, "a") { |f| f.syswrite("#{e.payload[:job].class.name} #{e.duration}\n") }
    end
  end
  Sidekiq.configure_server do |config|
    config.server_middleware { |chain| chain.add MistriLocks::Sidekiq::ServerMiddleware }
    config.on(:startup) { File.write(ENV.fetch("MISTRI_JOB_READY"), Process.pid.to_s) }
  end
end
