# frozen_string_literal: true

# The jobs the job and Sidekiq tests run, loaded both by the test process
# (to enqueue them) and by the real `sidekiq` process (job_boot.rb). Every
# job appends lines to a witness file (O_APPEND writes of one line are
# atomic): "+ jid pid time" when perform starts, "- jid pid time" when it
# ends, "x jid reason time" when interrupted. Times are CLOCK_REALTIME (both
# processes share the machine's clock).
#
# Timing comes from JOB_TTL and JOB_HEARTBEAT (seconds), the same in both
# processes.

require "active_job"
require "mistri_locks"
require "mistri_locks/integrations/active_job"

module JobTiming
  TTL = Float(ENV.fetch("JOB_TTL", "0.5"))
  HEARTBEAT = Float(ENV.fetch("JOB_HEARTBEAT", "0.1"))
  TICK = [HEARTBEAT, 1.0].min
end

module Witness
  def self.now = Process.clock_gettime(Process::CLOCK_REALTIME)

  def self.write(path, *fields)
    File.open(path, "a") { |f| f.syswrite("#{fields.join(" ")} #{format("%.6f", now)}\n") }
  end

  # [[mark, jid, arg, time], ...]
  def self.read(path)
    return [] unless File.exist?(path)

    File.readlines(path).map do |line|
      mark, jid, arg, time = line.split
      [mark, jid, arg, Float(time)]
    end
  end
end

# Runs +seconds+ with checkpoints every tick/4: a long job that stops
# cleanly when told.
module LeasedWork
  def work(witness, seconds)
    Witness.write(witness, "+", job_id, Process.pid)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      lease.checkpoint!
      sleep JobTiming::TICK / 4
    end
    Witness.write(witness, "-", job_id, Process.pid)
  rescue MistriLocks::Job::Interrupted => e
    Witness.write(witness, "x", job_id, e.reason)
    # The signal's reason, for a failing test's message.
    File.open("#{witness}.why", "a") { |f| f.syswrite("#{job_id} #{e.detail}\n") }
    raise
  end
end

class ApplicationJob < ActiveJob::Base
  include LeasedWork
end

# Ten of these on one key: they wait in the lease's line.
class WaitingSerialJob < ApplicationJob
  include MistriLocks::Job
  holds_lease key: ->(tag, _witness, _seconds) { "serial:#{tag}" },
              ttl: JobTiming::TTL, heartbeat: JobTiming::HEARTBEAT, wait: 60, on_conflict: :raise

  def perform(tag, witness, seconds) = work(witness, seconds)
end

# Ten of these on one key: a conflict re-enqueues with a short backoff.
class RetryingSerialJob < ApplicationJob
  include MistriLocks::Job
  holds_lease key: ->(tag, _witness, _seconds) { "serial:#{tag}" },
              ttl: JobTiming::TTL, heartbeat: JobTiming::HEARTBEAT,
              on_conflict: :retry, attempts: 1000, backoff: JobTiming::TTL / 2

  def perform(tag, witness, seconds) = work(witness, seconds)
end

# A long job: stopped, broken or killed mid-perform by the tests.
class LongJob < ApplicationJob
  include MistriLocks::Job
  holds_lease key: ->(tag, _witness, _seconds) { "long:#{tag}" },
              ttl: JobTiming::TTL, heartbeat: JobTiming::HEARTBEAT, backoff: JobTiming::TTL / 2

  def perform(tag, witness, seconds) = work(witness, seconds)
end

# The next job of LongJob's key, already waiting in the lease's line.
class NextJob < ApplicationJob
  # Declared before the lease's around_perform, so it runs first: "w" says
  # the job is about to join the lease's line.
  before_perform { |job| Witness.write(job.arguments[1], "w", job.job_id, Process.pid) }
  include MistriLocks::Job
  holds_lease key: ->(tag, _witness, _seconds) { "long:#{tag}" },
              ttl: JobTiming::TTL, heartbeat: JobTiming::HEARTBEAT, wait: 60, on_conflict: :raise

  def perform(tag, witness, seconds) = work(witness, seconds)
end

# The benchmark's short jobs: the same body with and without the lease.
class ShortLeasedJob < ActiveJob::Base
  include MistriLocks::Job
  holds_lease key: ->(i, _witness) { "short:#{i}" }, ttl: 30, heartbeat: 10

  def perform(_i, witness) = Witness.write(witness, "-", job_id, Process.pid)
end

class ShortPlainJob < ActiveJob::Base
  def perform(_i, witness) = Witness.write(witness, "-", job_id, Process.pid)
end

# Plain Sidekiq (no ActiveJob), when Sidekiq is loaded.
if defined?(Sidekiq)
  require "mistri_locks/integrations/sidekiq"

  class SidekiqSerialJob
    include Sidekiq::Worker
    sidekiq_options retry: false,
                    mistri_lease: { key: ->(args) { "sk:#{args[0]}" }, ttl: JobTiming::TTL,
                                    heartbeat: JobTiming::HEARTBEAT, on_conflict: :retry, attempts: 1000,
                                    backoff: JobTiming::TTL / 2 }

    def job_id = jid
    include LeasedWork

    def perform(_tag, witness, seconds) = work(witness, seconds)
  end

  # Its lease backend (MISTRI_JOB_DOWN_URL) refuses connections when the job
  # first starts; Sidekiq's retry runs it again once a redis-server listens.
  module DownLocks
    def self.get
      @get ||= MistriLocks::Redis.new(url: ENV.fetch("MISTRI_JOB_DOWN_URL"), namespace: "mistri:down")
    end
  end

  class SidekiqDownJob
    include Sidekiq::Worker
    sidekiq_options retry: 5, mistri_lease: { key: ->(args) { "down:#{args[0]}" }, ttl: JobTiming::TTL,
                                              heartbeat: JobTiming::HEARTBEAT, locks: -> { DownLocks.get } }
    sidekiq_retry_in { |_count, _error| 1 }

    def perform(_tag, witness)
      Witness.write(witness, "+", jid, lease.fence)
    end
  end
end
