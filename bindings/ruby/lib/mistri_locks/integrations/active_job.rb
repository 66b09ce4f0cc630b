# frozen_string_literal: true

require "mistri_locks"
require "mistri_locks/job"

module MistriLocks
  # The ActiveJob face of MistriLocks::Job (the rules themselves, which load
  # no framework, are in mistri_locks/job):
  #
  #   require "mistri_locks/integrations/active_job"   # e.g. in config/initializers
  #
  #   class NightlyReportJob < ApplicationJob
  #     include MistriLocks::Job
  #     holds_lease key: ->(account_id) { "report:#{account_id}" }, ttl: 60, heartbeat: 10,
  #                 limit: 1, wait: 0, on_conflict: :retry
  #
  #     def perform(account_id)
  #       batches(account_id).each do |batch|
  #         lease.checkpoint!                 # raises Interrupted when stopped or lost
  #         write(batch, fence: lease.fence)
  #       end
  #     end
  #   end
  #
  #   MistriLocks::Job.stop(job_id)           # from any process
  #
  # This file does not load ActiveJob itself: it uses the job class it is
  # included in (around_perform, retry_job, serialize).
  module Job
    # What `include MistriLocks::Job` does to an ActiveJob class (called by
    # MistriLocks::Job.included). (Internal.)
    module ActiveJobFace
      def self.attach(base)
        base.extend(ClassMethods)
        base.around_perform { |job, block| job.__send__(:mistri_lease_perform, &block) }
        # Prepended so it comes before ActiveJob::Continuable's checkpoint!,
        # whichever was included first.
        base.prepend(ContinuableCheckpoint)
      end
    end

    # Class methods of a job that includes MistriLocks::Job.
    module ClassMethods
      # Declares the job's lease (see MistriLocks::Job). Checked now: an
      # unknown option, a ttl <= 0 or a key lambda that can't take perform's
      # arguments raise ArgumentError while the class loads.
      def holds_lease(**options)
        @mistri_lease = LeaseOptions.new(self, :splat, options)
        @mistri_lease.check_perform(instance_method(:perform)) if method_defined?(:perform, false)
        @mistri_lease
      end

      # The job's LeaseOptions: its holds_lease, else its parent's (with
      # this class's name as the default key), else the defaults.
      def mistri_lease
        @mistri_lease ||= if superclass.respond_to?(:mistri_lease)
                            superclass.mistri_lease.inherit(self)
                          else
                            LeaseOptions.new(self, :splat, {})
                          end
      end

      # perform defined after holds_lease: check the key lambda now.
      def method_added(name)
        super
        @mistri_lease&.check_perform(instance_method(:perform)) if name == :perform
      end
    end

    # Conflict retries are counted in the job's payload.
    def serialize
      super.merge("mistri_lease_attempts" => @mistri_lease_attempts.to_i)
    end

    def deserialize(job_data)
      super
      @mistri_lease_attempts = job_data.fetch("mistri_lease_attempts", 0).to_i
    end

    # Where ActiveJob::Continuable is included (Rails 8.1+): its checkpoint!
    # (between steps, and step.checkpoint!) also asks the lease. A stop or a
    # loss whose policy is :retry interrupts the job the Continuable way
    # (interrupt!, so it resumes from its cursor); otherwise the lease's
    # checkpoint! raises Interrupted and the policy applies.
    module ContinuableCheckpoint
      def checkpoint!
        reason = stopping?
        if reason
          options = self.class.mistri_lease
          policy = reason == :lost ? options.on_lost : options.on_stopped
          if policy == :retry && respond_to?(:interrupt!, true)
            Job.instrument({ event: :interrupted, key: lease.key, job_id: job_id, job_class: self.class.name,
                             reason: reason })
            interrupt!(reason: reason)
          end
          lease.checkpoint!
        end
        super if defined?(super)
      end
    end

    private

    def mistri_lease_perform(&block)
      Job.perform_leased(self.class.mistri_lease, args: arguments, job_id: job_id, job_class: self.class.name,
                                                  attempts: @mistri_lease_attempts.to_i, logger: logger,
                                                  reenqueue: lambda { |wait, attempts|
                                                    @mistri_lease_attempts = attempts
                                                    retry_job(wait: wait)
                                                  }) do |hold|
        @mistri_lease_hold = hold
        begin
          block.call
        ensure
          @mistri_lease_hold = nil
        end
      end
    end
  end
end
