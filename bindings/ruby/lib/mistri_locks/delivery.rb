# frozen_string_literal: true

module MistriLocks
  # The Ruby glue of the core's host delivery (mistri_locks::delivery):
  # delivers aborts to Ruby objects, on Ruby threads only. (Internal.)
  #
  # The heartbeat is a Rust thread and never calls Ruby. A Ruby object that
  # wants to hear about a core signal's abort (an AbortSignal with on_abort
  # blocks, a hold with a duck-typed signal) registers here and gets a
  # listener id; the core then notes (id, reason) when the signal trips, and:
  #
  # - if it was tripped by Ruby code on a Ruby thread (AbortSignal#abort!,
  #   or on_abort on an aborted signal), that same thread delivers before the
  #   call returns;
  # - otherwise (the heartbeat: stop flag seen, lease lost), one delivery
  #   thread per process, blocked without the GVL, wakes and delivers.
  #
  # Delivery calls the object's private +_fire(reason)+. The registry holds
  # its objects weakly: an object nobody else references can't be told
  # anything, and is not kept alive for that. The core says when to start
  # the thread: once per process, again in a forked child.
  module Delivery
    @targets = ObjectSpace::WeakMap.new
    @lock = Mutex.new
    @next_id = 0

    class << self
      # Registers +target+; returns its delivery id.
      def register(target)
        @lock.synchronize do
          start_thread
          @next_id += 1
          @targets[@next_id] = target
          @next_id
        end
      end

      # Makes sure this process has its delivery thread (after a fork, the
      # parent's is gone). Holds call it: a signal whose watchers were
      # registered before a fork may be tripped by the child's heartbeat.
      def ensure_running
        @lock.synchronize { start_thread }
      end

      # Delivers notes [[id, reason], ...] on the calling thread. A target
      # that raises gets a warning, and the others are still told.
      def deliver(events)
        events.each do |id, reason|
          target = @targets[id]
          next unless target

          begin
            target.__send__(:_fire, reason)
          rescue StandardError => e
            warn "mistri_locks: abort delivery raised #{e.class}: #{e.message}"
          end
        end
        nil
      end

      private

      def start_thread
        return unless _claim_thread

        thread = Thread.new do
          loop { deliver(_wait_events) }
        ensure
          _thread_ended
        end
        thread.name = "mistri_locks delivery"
        thread.report_on_exception = false
      end
    end
    private_class_method :_wait_events, :_claim_thread, :_thread_ended
  end
end
