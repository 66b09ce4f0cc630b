# frozen_string_literal: true

require "mistri_locks"

module MistriLocks
  # A lease around a job's perform: the rules every Ruby job face shares,
  # loading no framework. The faces are integrations:
  # `require "mistri_locks/integrations/active_job"` for ActiveJob
  # (`include MistriLocks::Job` and `holds_lease`), and
  # `require "mistri_locks/integrations/sidekiq"` for plain Sidekiq
  # (MistriLocks::Sidekiq::ServerMiddleware).
  #
  #   MistriLocks::Job.stop(job_id)           # from any process
  #
  # The lease is a MistriLocks::Hold taken when perform starts and released
  # when it ends (around_perform): never while the job sits in a queue, where
  # no process is alive to renew it. Its ttl bounds silence (a killed worker's
  # lease frees itself within ttl), not run time: the heartbeat renews it for
  # as long as perform runs.
  #
  # A backend that can't be reached when perform starts
  # (MistriLocks::ConnectionError) fails the job with that error and a
  # warning in the job's log, whatever on_conflict says: Sidekiq puts it in
  # its retry set (ActiveJob: retry_on, or the adapter's retry), so it runs
  # again once the backend is back. It is not acked as done.
  #
  # The hold watches the job's stop key, Job.stop_key(id) (the core's
  # format, docs/PROTOCOL.md "Jobs"; id: ActiveJob's job_id, Sidekiq's
  # jid): Job.stop(id) raises it, and so do Python's
  # mistri_locks.integrations.celery.stop(id), C's mistri_locks_stop_job and
  # `mistri-locks stop`. The
  # lease's holder description carries that stop key (`stop_key` in
  # `info`/`list`, stored with the lease), so Job.stop_holder(key) and
  # `mistri-locks stop --holder-of KEY` stop whatever job holds a key.
  #
  # Nothing here loads ActiveJob or Sidekiq (ActiveSupport::Notifications is
  # used only if the app has loaded it).
  module Job
    # Raised by Hold#checkpoint! (the lease inside perform) when the hold's
    # signal has tripped. #reason is :stopped (its stop key was raised) or
    # :lost (the lease was found gone or taken, or not renewed in time);
    # #detail is the signal's reason text.
    class Interrupted < MistriLocks::Error
      attr_reader :reason, :detail

      def initialize(reason, detail = nil)
        @reason = reason
        @detail = detail
        super("job interrupted (#{reason})#{detail ? ": #{detail}" : ""}")
      end
    end

    # Raised when the lease is held elsewhere and on_conflict is :raise, or
    # :retry has used up its attempts.
    class Conflict < MistriLocks::Error
      attr_reader :key, :attempts

      def initialize(key, attempts, message = nil)
        @key = key
        @attempts = attempts
        super(message || "the lease on #{key.inspect} is held elsewhere")
      end
    end

    # The ActiveSupport::Notifications event name (payload: event:
    # :acquired | :conflict | :interrupted | :released, key:, job_id:,
    # job_class:, and fence:, attempts:, reason:, outcome: as they apply).
    EVENT = "mistri_locks.job"

    # What a job does when its lease is held elsewhere, stopped or lost.
    POLICIES = %i[retry discard raise].freeze
    # The core's policy names (JobOptions, docs/JOBS.md) in Ruby's spelling.
    POLICY = { "retry" => :retry, "skip" => :discard, "raise" => :raise }.freeze

    class << self
      # The flag that stops the job +job_id+ (a String or Symbol): the core's
      # job stop key, the same string in every language (Python's
      # celery.stop_key, the CLI, docs/PROTOCOL.md "Jobs").
      def stop_key(job_id)
        id = job_id.is_a?(Symbol) ? job_id.to_s : job_id
        raise TypeError, "job id must be a String, got #{job_id.class}" unless id.is_a?(String)

        MistriLocks._job_stop_key(id)
      end

      # Raises the job's stop flag (for +ttl+ seconds, default the flag TTL)
      # on +locks+ (default MistriLocks.locks): the job stops at its next
      # checkpoint!, or its lease.signal trips, within a tick. A job still
      # queued stops as soon as it starts. Returns true.
      def stop(job_id, locks: nil, ttl: FLAG_TTL)
        configured(locks).stop_job(job_id, ttl: ttl)
        true
      end

      # Stops whatever job holds +key+ (every holder of an N-holder lease):
      # raises the stop key each holder's description carries
      # (Locks#stop_holders). Returns the stop keys raised ([] when the key is
      # not held or its holders carry none, e.g. a hold that is not a job's).
      def stop_holder(key, locks: nil, ttl: FLAG_TTL)
        configured(locks).stop_holders(key, ttl: ttl)
      end

      # Runs +block+ with the lease described by +options+ (a LeaseOptions)
      # held, and applies the conflict, stop and loss rules. The one path for
      # ActiveJob and Sidekiq; +reenqueue+ is called with (wait, attempts) to
      # run the job again later. (Internal.)
      def perform_leased(options, args:, job_id:, job_class:, attempts:, logger:, reenqueue:)
        key = options.key_for(args) # a raising key lambda fails this job only
        begin
          locks = options.locks_for
          # One native call: the job's stop key (the core builds it), the
          # holder label and the class's hold options, built once
          # (LeaseOptions#hold_options).
          hold = MistriLocks._job_hold(locks, key, job_id, job_class.to_s, options.hold_options)
        rescue MistriLocks::ConnectionError => e
          # The job fails, and the queue's own retry runs it again (Sidekiq's
          # retry set, ActiveJob's retry_on): never acked as done.
          logger&.warn("mistri_locks: #{job_class} #{job_id}: the lease backend is unreachable at start " \
                       "(#{e.message}); the job fails and is retried by the queue")
          raise
        end
        payload = { key: key, job_id: job_id, job_class: job_class }.freeze
        return conflict(options, payload, attempts, logger, reenqueue) unless hold

        # An event's Hash is built only when someone listens.
        instrument(payload.merge(event: :acquired, fence: hold.fence)) if listening?
        interrupted = nil
        begin
          yield hold
        rescue Interrupted => e
          interrupted = e
        ensure
          outcome = begin
            hold.release_outcome
          rescue MistriLocks::Error => e
            logger&.warn("mistri_locks: releasing #{key.inspect}: #{e.message} (it expires within its ttl)")
            :error
          end
          instrument(payload.merge(event: :released, fence: hold.fence, outcome: outcome)) if listening?
        end
        interrupted && interrupted(options, payload, interrupted, locks, stop_key(job_id), logger, reenqueue)
      end

      # Emits a "mistri_locks.job" event when ActiveSupport is loaded. (Internal.)
      def instrument(payload)
        return unless defined?(ActiveSupport::Notifications)

        ActiveSupport::Notifications.instrument(EVENT, payload)
      end

      # Does anything subscribe to "mistri_locks.job"? (A lookup in
      # ActiveSupport's cache: cheaper than the event's Hash.) (Internal.)
      def listening?
        defined?(ActiveSupport::Notifications) && ActiveSupport::Notifications.notifier.listening?(EVENT)
      end

      private

      def configured(locks)
        locks ||= MistriLocks.locks
        return locks if locks

        raise MistriLocks::Error, "no locks configured: set MistriLocks.locks = ... (or pass locks:)"
      end

      def conflict(options, payload, attempts, logger, reenqueue)
        attempts += 1
        instrument(payload.merge(event: :conflict, attempts: attempts))
        case options.on_conflict
        when :raise
          raise Conflict.new(payload[:key], attempts)
        when :discard
          logger&.info("mistri_locks: discarded #{payload[:job_class]} #{payload[:job_id]}: " \
                       "the lease on #{payload[:key].inspect} is held elsewhere")
          nil
        when :retry
          if attempts >= options.attempts
            raise Conflict.new(payload[:key], attempts,
                               "the lease on #{payload[:key].inspect} was held elsewhere #{attempts} times; giving up")
          end
          wait = options.backoff_for(attempts)
          logger&.info("mistri_locks: #{payload[:job_class]} #{payload[:job_id]}: the lease on " \
                       "#{payload[:key].inspect} is held elsewhere; retry #{attempts} in #{wait.round(3)} s")
          reenqueue.call(wait, attempts)
          nil
        end
      end

      def interrupted(options, payload, error, locks, stop, logger, reenqueue)
        instrument(payload.merge(event: :interrupted, reason: error.reason))
        policy = error.reason == :lost ? options.on_lost : options.on_stopped
        case policy
        when :raise
          raise error
        when :discard
          logger&.info("mistri_locks: #{payload[:job_class]} #{payload[:job_id]} #{error.reason}, " \
                       "not retried: #{error.detail}")
          nil
        when :retry
          # The retry keeps the job id, and so the stop key: lower it, or the
          # retry would stop at once.
          locks.clear_flag(stop) if error.reason == :stopped
          logger&.info("mistri_locks: #{payload[:job_class]} #{payload[:job_id]} #{error.reason}, " \
                       "retried: #{error.detail}")
          reenqueue.call(options.backoff_for(1), 0)
          nil
        end
      end
    end

    # Hold#checkpoint! and Hold#stopping? (included into MistriLocks::Hold
    # when this file loads: once per class, never a per-hold singleton).
    module Checkpoint
      # Raises Interrupted(:stopped | :lost) once the hold's signal has
      # tripped; otherwise returns nil (cheap: no I/O).
      def checkpoint!
        reason = stopping?
        raise Interrupted.new(reason, signal.reason) if reason
      end

      # :lost, :stopped or nil: why the work should stop, if it should (the
      # core's typed Hold#interruption; a duck-typed signal: also when the
      # caller aborted it itself).
      def stopping?
        why = interruption
        return why.first if why

        duck = @signal # a duck-typed signal: given to hold, never made here
        return nil if duck.nil? || duck.is_a?(AbortSignal) || !duck.respond_to?(:aborted?)

        duck.aborted? ? :stopped : nil
      end
    end

    Hold.include(Checkpoint)

    # The options of holds_lease (and Sidekiq's mistri_lease), checked when
    # the class is loaded.
    class LeaseOptions
      KEYS = %i[key ttl heartbeat limit wait on_conflict on_stopped on_lost attempts backoff locks].freeze
      attr_reader :ttl, :heartbeat, :limit, :wait, :on_conflict, :on_stopped, :on_lost, :attempts,
                  # The native hold options (ttl, heartbeat, limit, wait), built
                  # once here: MistriLocks._job_hold takes them. (Internal.)
                  :hold_options

      # +owner+: the job class (its name is the default key). +args_style+:
      # :splat (ActiveJob: the key lambda takes perform's arguments) or
      # :array (Sidekiq: the key lambda takes the args Array).
      def initialize(owner, args_style, options)
        raise TypeError, "lease options must be a Hash, got #{options.class}" unless options.is_a?(Hash)

        options = options.transform_keys(&:to_sym)
        unknown = options.keys - KEYS
        unless unknown.empty?
          raise ArgumentError, "#{owner}: unknown lease option#{"s" if unknown.size > 1} " \
                               "#{unknown.map(&:inspect).join(", ")} (known: #{KEYS.join(", ")})"
        end
        @owner = owner
        @args_style = args_style
        @given = options
        @key = check_key(options.fetch(:key, owner.name))
        # The numbers and policies: checked, with their defaults, by the
        # core (JobOptions), so every face refuses the same things in the
        # same words. A backoff lambda is Ruby's own.
        @backoff = options.fetch(:backoff, nil)
        check_backoff
        core = options.slice(:ttl, :heartbeat, :limit, :wait, :attempts, :on_conflict, :on_stopped, :on_lost)
        %i[on_conflict on_stopped on_lost].each { |name| spelling(name, core[name]) if core.key?(name) }
        core[:backoff] = @backoff if @backoff.is_a?(Numeric)
        checked = begin
          MistriLocks._job_options(core)
        rescue ArgumentError => e
          raise ArgumentError, "#{owner}: #{e.message}"
        end
        @ttl, @heartbeat, @limit, @wait, @attempts, @hold_options =
          checked.values_at(:ttl, :heartbeat, :limit, :wait, :attempts, :hold)
        @on_conflict, @on_stopped, @on_lost = checked.values_at(:on_conflict, :on_stopped, :on_lost).map { |p| POLICY[p] }
        @locks = options.fetch(:locks, nil)
        return if @locks.nil? || @locks.is_a?(Locks) || (@locks.respond_to?(:call) && arity_ok?(@locks, 0, 0))

        raise ArgumentError, "#{owner}: locks must be a MistriLocks::Locks or a lambda taking no arguments"
      end

      # The same options for a subclass: checked again with it as the owner,
      # so a default key is the subclass's name, not its parent's.
      def inherit(owner) = LeaseOptions.new(owner, @args_style, @given)

      # The lease key for one perform's arguments.
      def key_for(args)
        return @key unless @key.respond_to?(:call)

        key = @args_style == :array ? @key.call(args) : @key.call(*args)
        return key.to_s if key.is_a?(Symbol)
        raise TypeError, "#{@owner}: the key lambda returned #{key.class}, not a String" unless key.is_a?(String)

        key
      end

      # The handle to hold on: locks: (or its lambda's value), else MistriLocks.locks.
      def locks_for
        locks = @locks.respond_to?(:call) ? @locks.call : @locks
        locks ||= MistriLocks.locks
        raise MistriLocks::Error, "#{@owner}: no locks configured (MistriLocks.locks = ..., or locks:)" unless locks.is_a?(Locks)

        locks
      end

      # Seconds before retry +attempt+ (1, 2, ...): backoff: (a number, or a
      # lambda of the attempt), else min(ttl / 4 × 2^(attempt-1), ttl) with
      # ±25 % jitter: a conflict lasts as long as the other performer runs,
      # at least; the ttl caps it so a crashed holder's key is retried soon
      # after it frees.
      def backoff_for(attempt)
        return @backoff.to_f if @backoff.is_a?(Numeric)
        return Float(@backoff.call(attempt)) if @backoff

        [@ttl / 4.0 * (2**(attempt - 1)), @ttl.to_f].min * (0.75 + (rand * 0.5))
      end

      # Checks the key lambda against perform's parameters (ActiveJob), when
      # both are known. Raises ArgumentError when perform's arguments can't
      # be passed to it.
      def check_perform(method)
        return unless @key.is_a?(Proc) && @key.lambda? && @args_style == :splat
        return if method.parameters.any? { |kind, _| %i[key keyreq keyrest].include?(kind) }

        pmin, pmax = positional(method.parameters)
        lmin, lmax = positional(@key.parameters)
        return if lmin <= pmin && (lmax.nil? || (pmax && lmax >= pmax))

        raise ArgumentError, "#{@owner}: the key lambda takes #{range(lmin, lmax)} argument(s), but perform " \
                             "takes #{range(pmin, pmax)}: it gets perform's arguments"
      end

      private

      def check_key(key)
        key = key.to_s if key.is_a?(Symbol)
        if key.is_a?(String)
          raise ArgumentError, "#{@owner}: key must not be empty" if key.empty?

          return key
        end
        raise ArgumentError, "#{@owner}: key must be a String or a lambda, got #{key.class}" unless key.is_a?(Proc)
        if @args_style == :array && !arity_ok?(key, 1, 1)
          raise ArgumentError, "#{@owner}: the key lambda must take one argument (the job's args Array), " \
                               "it takes #{range(*positional(key.parameters))}"
        end
        key
      end

      def check_backoff
        return if @backoff.nil? || @backoff.is_a?(Numeric) # the core checks the number
        return if @backoff.respond_to?(:call) && arity_ok?(@backoff, 1, 1)

        raise ArgumentError, "#{@owner}: backoff must be seconds >= 0 or a lambda of the attempt number"
      end

      # Ruby spells the policies :retry, :discard, :raise (docs/JOBS.md);
      # the core maps them onto its vocabulary.
      def spelling(name, value)
        return if POLICIES.include?(value)

        raise ArgumentError, "#{@owner}: #{name} must be one of #{POLICIES.map(&:inspect).join(", ")}, got #{value.inspect}"
      end

      # Does +callable+ accept n arguments, for every n in lo..hi?
      def arity_ok?(callable, lo, hi)
        params = callable.is_a?(Proc) ? callable.parameters : callable.method(:call).parameters
        return true if callable.is_a?(Proc) && !callable.lambda? # a proc drops or pads arguments

        min, max = positional(params)
        min <= lo && (max.nil? || max >= hi)
      end

      def positional(params)
        min = params.count { |kind, _| kind == :req }
        max = params.any? { |kind, _| kind == :rest } ? nil : min + params.count { |kind, _| kind == :opt }
        [min, max]
      end

      def range(min, max)
        return "#{min}+" if max.nil?

        min == max ? min.to_s : "#{min}..#{max}"
      end
    end

    # The readers a leased perform uses, for ActiveJob and (through
    # MistriLocks::Sidekiq::Leased) plain Sidekiq jobs alike.
    module Leased
      # The lease inside perform: the MistriLocks::Hold (fence, signal, lost?,
      # checkpoint!, stopping?), nil outside perform.
      def lease
        @mistri_lease_hold
      end

      # :stopped, :lost or nil: whether the lease asks this job to stop.
      def stopping?
        @mistri_lease_hold&.stopping?
      end
    end
    include Leased

    # `include MistriLocks::Job` is the ActiveJob face, defined in the file
    # mistri_locks/integrations/active_job.rb; without it loaded, including the
    # module would give a job no lease at all, so it is refused.
    def self.included(base)
      return ActiveJobFace.attach(base) if const_defined?(:ActiveJobFace, false)

      raise MistriLocks::Error, "include MistriLocks::Job in #{base} needs the ActiveJob integration: " \
                                'require "mistri_locks/integrations/active_job" first'
    end
  end
end
