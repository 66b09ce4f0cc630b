# frozen_string_literal: true

# What bench_jobs.rb's `sidekiq -r` loads: the job tests' boot file
# (test/scripts/job_boot.rb: the backend, ActiveJob on Sidekiq, the
# middleware, ShortPlainJob and ShortLeasedJob, each perform's duration
# written to MISTRI_JOB_DURATIONS) and the benchmark's two other jobs, with
# the same body:
#
# - ShortGemJob: the baseline. The body makes the lease's two round trips
#   itself with the redis gem (SET NX PX with a random token, then a Lua
#   compare-and-delete), on a connection of its thread's own.
# - ShortBeforeJob: the lease the way MistriLocks::Job took it before issue
#   40 item 7 (a481958): per job a payload Hash, the label String, hold's
#   keyword Hash read by name, a Ruby Hold wrapper with its signal, two
#   ActiveSupport events built by Hash#merge, and a stop key that the
#   heartbeat thread reads right after the acquire. Kept runnable through
#   the public API, for the "before" row.

require_relative "test/scripts/job_boot"
require "redis"
require "securerandom"

# Compare-and-delete: the usual release of a SET NX PX lock.
BENCH_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"

class ShortGemJob < ActiveJob::Base
  def perform(i, witness)
    redis = (Thread.current[:mistri_bench_redis] ||= Redis.new(url: ENV.fetch("REDIS_URL")))
    key = "gem:#{ENV.fetch("MISTRI_JOB_NAMESPACE", "")}:short:#{i}"
    token = SecureRandom.hex(16)
    raise "gem lock refused" unless redis.set(key, token, nx: true, px: 30_000)

    begin
      Witness.write(witness, "-", job_id, Process.pid)
    ensure
      redis.eval(BENCH_RELEASE, keys: [key], argv: [token])
    end
  end
end

class ShortBeforeJob < ActiveJob::Base
  KEY = ->(i, _witness) { "before:#{i}" }

  around_perform do |job, block|
    key = KEY.call(*job.arguments)
    payload = { key: key, job_id: job.job_id, job_class: job.class.name }
    stop = MistriLocks::Job.stop_key(job.job_id)
    locks = MistriLocks.locks
    label = "#{locks.label} #{job.class.name}"
    hold = locks.hold(key, ttl: 30, heartbeat: 10, stop_key: stop, wait: nil, limit: 1, label: label)
    raise "lease refused" unless hold

    ActiveSupport::Notifications.instrument(MistriLocks::Job::EVENT, payload.merge(event: :acquired, fence: hold.fence))
    begin
      job.instance_variable_set(:@mistri_lease_hold, hold)
      block.call
    ensure
      job.instance_variable_set(:@mistri_lease_hold, nil)
      outcome = hold.release_outcome
      ActiveSupport::Notifications.instrument(MistriLocks::Job::EVENT,
                                              payload.merge(event: :released, fence: hold.fence, outcome: outcome))
    end
  end

  def perform(_i, witness) = Witness.write(witness, "-", job_id, Process.pid)
end

# Two diagnostic kinds (BENCH_KINDS="... nostop bare"): where the lease's
# time goes beyond its two round trips.
# - ShortNoStopJob: a hold (heartbeat registration) without a stop key, so
#   no stop flag is read or subscribed to.
# - ShortBareJob: Locks#acquire and #release: the two round trips alone, no
#   hold (nothing for the heartbeat thread to do).
class ShortNoStopJob < ActiveJob::Base
  around_perform do |job, block|
    MistriLocks.locks.hold("nostop:#{job.arguments[0]}", ttl: 30, heartbeat: 10) { block.call }
  end

  def perform(_i, witness) = Witness.write(witness, "-", job_id, Process.pid)
end

class ShortBareJob < ActiveJob::Base
  around_perform do |job, block|
    key = "bare:#{job.arguments[0]}"
    raise "lease refused" unless MistriLocks.locks.acquire(key, ttl: 30)

    begin
      block.call
    ensure
      MistriLocks.locks.release(key)
    end
  end

  def perform(_i, witness) = Witness.write(witness, "-", job_id, Process.pid)
end
