# frozen_string_literal: true

module MistriLocks
  # A thread-safe, one-way "please stop" latch with a reason and callbacks,
  # shared with the Rust core (a hold trips it from its heartbeat).
  #
  #   signal = MistriLocks::AbortSignal.new
  #   handle = signal.on_abort { |reason| logger.info("stopping: #{reason}") }
  #   signal.abort!("deploy")        # runs the block on this thread
  #   signal.aborted?                # => true
  #   signal.reason                  # => "deploy"
  #
  # Native methods: new, aborted?, reason (a String or nil), derive (a child
  # signal that hears this one's abort, never the reverse).
  #
  # on_abort blocks run exactly once, always on a Ruby thread: on the thread
  # calling abort! (before abort! returns), on the registering thread if the
  # signal is already aborted, and otherwise (a hold's heartbeat tripped it)
  # on the MistriLocks delivery thread, within moments. A block that raises
  # gets a warning; the other blocks still run.
  class AbortSignal
    LOCK = Mutex.new # guards every signal's @callbacks (held only briefly)
    private_constant :LOCK

    # Trips the signal with +reason+ (converted with to_s; nil for none).
    # Returns true if this call tripped it, false if it was already aborted
    # (the first reason stays).
    def abort!(reason = nil)
      tripped, events = _abort(reason&.to_s)
      Delivery.deliver(events)
      tripped
    end

    # Waits until the signal is aborted or +timeout+ seconds pass (nil:
    # forever). Returns true if aborted. Releases the GVL while waiting and
    # stays interruptible (Thread#raise, Timeout.timeout, Ctrl-C).
    def wait(timeout = nil)
      _wait(timeout)
    end

    # Registers a block to run with the reason when the signal is aborted
    # (at once if it already is). Returns a handle for remove_callback.
    def on_abort(&block)
      raise ArgumentError, "on_abort needs a block" unless block

      id = Delivery.register(self)
      handle, events = LOCK.synchronize do
        handle, events = _watch(id)
        (@callbacks ||= {})[handle] = block
        [handle, events]
      end
      Delivery.deliver(events)
      handle
    end

    # Unregisters an on_abort block. Returns true if it was registered and
    # had not run yet.
    def remove_callback(handle)
      removed = LOCK.synchronize { @callbacks&.delete(handle) }
      return false unless removed

      _unwatch(handle)
      true
    end

    def inspect
      "#<#{self.class} aborted=#{aborted?}#{aborted? ? " reason=#{reason.inspect}" : ""}>"
    end

    private

    # Delivery: run (once) every block registered so far.
    def _fire(reason)
      blocks = LOCK.synchronize do
        pending = @callbacks
        @callbacks = nil
        pending
      end
      blocks&.each_value do |block|
        block.call(reason)
      rescue StandardError => e
        warn "mistri_locks: on_abort block raised #{e.class}: #{e.message}"
      end
    end
  end
end
