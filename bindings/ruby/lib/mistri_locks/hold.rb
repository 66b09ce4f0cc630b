# frozen_string_literal: true

module MistriLocks
  # A held lease, renewed by the heartbeat until released or lost. Made by
  # MistriLocks.hold or Locks#hold.
  #
  # Native methods: key (String), fence (Integer: the fencing number of this
  # acquisition, greater than every earlier one for the key), lost? (the
  # lease was found gone or taken, or renewals failed past its deadline; the
  # signal is then tripped with a reason saying so), touch (progress for
  # progress_timeout:; cheap, a no-op without one).
  #
  # Forked children: a child's copy of its parent's Hold never renews, and
  # its release touches nothing (returns false; release_outcome
  # :other_process).
  #
  # A Hold that is garbage-collected unreleased is released by its finalizer
  # (on Redis that is a round trip during GC); use release or the block form.
  class Hold
    LOCK = Mutex.new # guards every hold's @duck (held only briefly)
    private_constant :LOCK

    # The signal tripped on stop or loss: the +signal:+ given to hold (a
    # MistriLocks::AbortSignal or your duck-typed object), else a
    # MistriLocks::AbortSignal of the hold's own (its Ruby object made on
    # the first call, the same one from then on).
    def signal
      @signal || LOCK.synchronize { @signal ||= _signal }
    end

    # What Hold#release_outcome returns, one per ReleaseOutcome of the core.
    RELEASE_OUTCOMES = %i[released not_held lost already_released other_process expired].freeze

    # Stops renewing and deletes the lease if it is still ours. Idempotent.
    # Returns without waiting for the heartbeat: from then on no tick renews
    # the lease, and a renewal already in flight can't outlive the delete
    # (renewals compare the owner token). Returns true if this call deleted
    # the lease, false otherwise (already released, lost, expired, or a
    # forked child's copy): release_outcome says which. The delete is
    # bounded twice: by the adapter's I/O timeout and by the lease's end
    # (the answer to its last confirmed renewal + ttl); when the lease's end
    # comes first the lease has lapsed: false (release_outcome :expired),
    # not an error. Raises MistriLocks::ConnectionError if the delete can't
    # be confirmed before the lease's end (Redis unreachable, the connection
    # cut; or by then, while a renewal was unanswered) — the hold has
    # stopped renewing regardless; the lease expires within its ttl, and
    # releasing again retries the delete.
    def release
      release_outcome == :released
    end

    # Releases as release does, and says what happened, as a Symbol:
    #   :released          this call deleted the lease
    #   :not_held          the hold was renewing, but the lease had gone
    #                      (expired or taken) by the delete; nothing deleted
    #   :lost              the hold had been lost before; nothing deleted
    #   :already_released  an earlier release already ran
    #   :other_process     a forked child's copy: the parent's lease is left alone
    #   :expired           no answer before the lease's end: it has lapsed by
    #                      expiry; nothing to retry
    def release_outcome
      _release
    ensure
      # A trip noted just before the release is still delivered, then the
      # duck-typed signal hears nothing more. (@duck is set before the hold
      # is returned, and only ever cleared: without one, nothing to do.)
      if @duck
        _fire(@core.reason) if @core.aborted?
        LOCK.synchronize { @duck = nil }
      end
    end

    def inspect
      "#<#{self.class} key=#{key.inspect} fence=#{fence} lost=#{lost?}>"
    end

    class << self
      # Raises TypeError unless +signal+ is nil, a MistriLocks::AbortSignal
      # or responds to abort!. (Internal.)
      def check_signal(signal)
        return if signal.nil? || signal.is_a?(AbortSignal) || signal.respond_to?(:abort!)

        raise TypeError, "signal must be a MistriLocks::AbortSignal or respond to " \
                         "abort!(reason), got #{signal.class}"
      end

      # Acquires through +locks+ (nil: the configured one) and wires the
      # signal: MistriLocks.hold and Locks#hold. Their other keywords (ttl:,
      # heartbeat:, stop_key:, safety_margin:, label:, wait:, limit:,
      # max_hold:, progress_timeout:) go to the core by name, which holds
      # their one list, checks and defaults: an unknown one is an
      # ArgumentError naming the nearest. (Internal.)
      def start(locks, key, signal: nil, **options)
        check_signal(signal)
        native = signal if signal.is_a?(AbortSignal)
        hold = MistriLocks.__send__(:_hold, locks, key, native, options)
        return nil unless hold

        Delivery.ensure_running if native
        hold.__send__(:_attach, signal) if signal
        hold
      end

      # The block form of hold. (Internal.)
      def run(hold)
        return nil unless hold

        begin
          yield hold
        ensure
          hold.release
        end
      end
    end

    private

    # The +signal:+ given to hold (without one, #signal makes the hold's
    # own when asked).
    def _attach(signal)
      @signal = signal
      return if signal.is_a?(AbortSignal)

      # A duck-typed signal: the core signal's trip is delivered to it from
      # a Ruby thread (see Delivery).
      @core = _signal
      @duck = signal
      _handle, events = @core.__send__(:_watch, Delivery.register(self))
      Delivery.deliver(events)
    end

    # Delivery: tell the duck-typed signal, once.
    def _fire(reason)
      duck = LOCK.synchronize do
        d = @duck
        @duck = nil
        d
      end
      duck&.abort!(reason)
    end
  end
end
