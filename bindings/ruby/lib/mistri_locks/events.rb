# frozen_string_literal: true

module MistriLocks
  # Counters and hold events of one owner (the core's mistri_locks::stats
  # defines every name):
  #
  #   locks.stats  # => {holds_active: 1, renewals_sent: 12, beat_rtt_p50: 0.0004, ...}
  #   handle = locks.on_event { |e| logger.info("#{e[:kind]} #{e[:key]}") }
  #   locks.remove_event_hook(handle)  # => true
  #
  # Events (e[:kind]): :acquired (a hold took its lease), :refused (a hold
  # found the lease held elsewhere; fence 0), :at_risk (the first failed
  # renewal attempt since the last confirmed one; reason: the error),
  # :renewed_late (a renewal confirmed after failed attempts), :lost (the
  # hold is lost; e[:cause] is :not_held, :too_late or :deadline; reason:
  # the signal's reason), :stopped (its stop flag was seen), :released
  # (released before being lost). Each event is a Hash {kind:, key:,
  # fence:, reason:, cause:}.
  #
  # Blocks run on a Ruby thread only (the MistriLocks delivery thread),
  # never on the heartbeat; a block that raises gets a warning.
  class Locks
    EVENT_LOCK = Mutex.new # guards every owner's @event_hooks
    private_constant :EVENT_LOCK

    # Registers a block to run with each event of this owner's holds.
    # Returns a handle for remove_event_hook.
    def on_event(&block)
      raise ArgumentError, "on_event needs a block" unless block

      hook = EventHook.new(block)
      id = Delivery.register(hook)
      EVENT_LOCK.synchronize do
        handle = _on_event(id)
        (@event_hooks ||= {})[handle] = hook
        handle
      end
    end

    # Unregisters an on_event block. Returns true if it was registered on
    # this owner; no event reaches it afterwards.
    def remove_event_hook(handle)
      raise TypeError, "handle must be an Integer, got #{handle.class}" unless handle.is_a?(Integer)

      EVENT_LOCK.synchronize do
        hook = @event_hooks&.delete(handle)
        return false unless hook

        hook.removed = true
        _remove_event_hook(handle)
      end
    end
  end

  # One on_event block, as a Delivery target. (Internal.)
  class EventHook
    attr_writer :removed

    def initialize(block)
      @block = block
      @removed = false
    end

    private

    def _fire(event)
      return if @removed

      @block.call(event) if event.is_a?(Hash)
    rescue StandardError => e
      warn "mistri_locks: on_event block raised #{e.class}: #{e.message}"
    end
  end
  private_constant :EventHook
end
