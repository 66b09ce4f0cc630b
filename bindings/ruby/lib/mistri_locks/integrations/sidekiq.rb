# frozen_string_literal: true

require "mistri_locks/job"
require "sidekiq"

module MistriLocks
  # A lease around a plain Sidekiq job's perform (no ActiveJob):
  #
  #   require "mistri_locks/integrations/sidekiq"
  #   Sidekiq.configure_server do |config|
  #     config.server_middleware { |chain| chain.add MistriLocks::Sidekiq::ServerMiddleware }
  #   end
  #
  #   class ReportJob
  #     include Sidekiq::Job
  #     sidekiq_options mistri_lease: { key: ->(args) { "report:#{args[0]}" }, ttl: 60, on_conflict: :retry }
  #
  #     def perform(account_id)
  #       lease.checkpoint!            # the MistriLocks::Hold, as in MistriLocks::Job
  #     end
  #   end
  #
  #   MistriLocks::Job.stop(jid)       # stops it at its next checkpoint!
  #
  # The options and rules are MistriLocks::Job's (key, ttl, heartbeat,
  # limit, wait, on_conflict, on_stopped, on_lost, attempts, backoff,
  # locks), checked when sidekiq_options runs (at class load); the key
  # lambda takes the job's args Array. The options are kept on the class,
  # not in the job's payload (a lambda can't be serialized). A :retry pushes
  # the same job (same jid, so the same stop key) to run at now + backoff,
  # counting attempts in its "mistri_lease_attempts" field.
  module Sidekiq
    # The server middleware: holds the job class's mistri_lease around
    # perform. Jobs without mistri_lease pass through untouched.
    class ServerMiddleware
      def call(worker, job, _queue, &block)
        options = worker.class.respond_to?(:mistri_lease) ? worker.class.mistri_lease : nil
        return yield unless options

        MistriLocks::Job.perform_leased(options, args: job["args"], job_id: job["jid"], job_class: job["class"],
                                                 attempts: job.fetch("mistri_lease_attempts", 0).to_i,
                                                 logger: ::Sidekiq.logger,
                                                 reenqueue: ->(wait, attempts) { Sidekiq.push_again(job, wait, attempts) }) do |hold|
          worker.instance_variable_set(:@mistri_lease_hold, hold)
          begin
            block.call
          ensure
            worker.instance_variable_set(:@mistri_lease_hold, nil)
          end
        end
      end
    end

    # The same job (same jid), to run +wait+ seconds from now. (Internal.)
    def self.push_again(job, wait, attempts)
      again = job.reject { |k, _| %w[enqueued_at error_message error_class failed_at retried_at].include?(k) }
      ::Sidekiq::Client.push(again.merge("at" => Time.now.to_f + wait, "mistri_lease_attempts" => attempts))
    end

    # `lease` and `stopping?` inside a Sidekiq job's perform (the same
    # readers as MistriLocks::Job's).
    Leased = MistriLocks::Job::Leased

    # Prepended to Sidekiq's sidekiq_options: takes mistri_lease out,
    # checks it (ArgumentError at class load) and keeps it on the class.
    module Options
      def sidekiq_options(opts = {})
        lease = nil
        rest = opts.reject do |k, v|
          next false unless k.to_s == "mistri_lease"

          lease = v
          true
        end
        unless lease.nil?
          @mistri_lease = MistriLocks::Job::LeaseOptions.new(self, :array, lease)
          include Leased
        end
        super(rest)
      end

      # The class's lease options, else its parent's (with this class's
      # name as the default key), or nil.
      def mistri_lease
        return @mistri_lease if @mistri_lease

        @mistri_lease = superclass.mistri_lease&.inherit(self) if superclass.respond_to?(:mistri_lease)
      end
    end
  end
end

::Sidekiq::Worker::Options::ClassMethods.prepend(MistriLocks::Sidekiq::Options)
