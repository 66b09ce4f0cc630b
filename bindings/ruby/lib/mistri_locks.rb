# frozen_string_literal: true

# Cross-process leases and stop flags, over the mistri_locks Rust core.
#
#   require "mistri_locks"
#   MistriLocks.locks = MistriLocks::Redis.new(url: "redis://127.0.0.1:6379/0")
#   MistriLocks.hold("nightly-report", ttl: 60, heartbeat: 10, stop_key: "stop:report") do |hold|
#     work_one_item until hold.signal.aborted?
#   end
#
# On the PostgreSQL a Rails app already runs:
#   MistriLocks.locks = MistriLocks::Postgres.from_active_record   # or .new(url: "postgres://...")
#
# Every handle (MistriLocks::Memory, Redis, Local, Postgres: a MistriLocks::Locks) is a drop-in for
# `Mistri.locks = ...` in the mistri gem: the seven methods acquire(key, ttl:),
# renew(key, ttl:), release(key), held?(key), set_flag(key, ttl: 300),
# flag?(key), clear_flag(key), with fractional-second TTLs.
module MistriLocks
end

require_relative "mistri_locks/version"
require_relative "mistri_locks/error"
# The native extension: the platform gem's build for this Ruby minor
# (lib/mistri_locks/3.1/, the rake-compiler-dock / rb-sys layout), else the
# one compiled here (build.sh, or installing the source gem).
if File.file?(File.join(__dir__, "mistri_locks", RUBY_VERSION[/\A\d+\.\d+/], "mistri_locks.#{RbConfig::CONFIG["DLEXT"]}"))
  require_relative "mistri_locks/#{RUBY_VERSION[/\A\d+\.\d+/]}/mistri_locks"
else
  require "mistri_locks/mistri_locks"
end
require_relative "mistri_locks/delivery"
require_relative "mistri_locks/abort_signal"
require_relative "mistri_locks/hold"
require_relative "mistri_locks/locks"
require_relative "mistri_locks/postgres"
require_relative "mistri_locks/events"

module MistriLocks
  # The job rules every job face shares (loaded on first use; loads no
  # framework), and Prometheus text.
  autoload :Job, "mistri_locks/job"
  autoload :Metrics, "mistri_locks/metrics"
  # The framework integrations are not loaded from here; each is required by
  # its own path (lib/mistri_locks/integrations/):
  #   require "mistri_locks/integrations/active_job"  # include MistriLocks::Job in an ActiveJob
  #   require "mistri_locks/integrations/sidekiq"     # MistriLocks::Sidekiq::ServerMiddleware (loads Sidekiq)
  #   require "mistri_locks/integrations/rails_cache" # MistriLocks::RailsCache, the drop-in for Mistri::Locks::RailsCache
  #   require "mistri_locks/integrations/web"         # MistriLocks::Web, the operator's page as a Rack app

  @locks = nil

  class << self
    # The process-wide handle used by MistriLocks.hold (the object given to
    # configure or locks=), or nil.
    attr_reader :locks

    # Sets (or with nil, clears) the process-wide handle: a MistriLocks::Locks
    # (Memory, Redis, Local, Postgres), as configure(locks) does in Python and
    # mistri_configure in C. Returns +locks+. The core keeps the one slot
    # that holds use; @locks only remembers this Ruby object, so
    # MistriLocks.locks returns it.
    def configure(locks)
      unless locks.nil? || locks.is_a?(Locks)
        raise TypeError, "MistriLocks.configure (and locks=) takes a MistriLocks::Locks (Memory, Redis, Local, Postgres) " \
                         "or nil, got #{locks.class}"
      end
      _configure(locks)
      @locks = locks
    end

    # MistriLocks.locks = handle: the same as configure(handle) (the mistri
    # gem's `Mistri.locks = ...`).
    alias locks= configure

    # Acquires +key+ on MistriLocks.locks and keeps it renewed every
    # +heartbeat+ seconds (and at least every ttl/3) until released; with a
    # +stop_key+, trips the hold's signal within a tick (min(heartbeat, 1 s))
    # of anyone raising that flag.
    #
    # The hold is lost (its signal trips with a reason starting "lease
    # lost:") as soon as a renewal finds the lease gone, or when no renewal
    # has been confirmed by its safe deadline: the send time of the last
    # confirmed renewal + ttl - +safety_margin+ (default
    # min(ttl/4, max(tick + the adapter's I/O timeout, 0.025))), so the
    # holder hears it before anyone else can take the lease.
    #
    # Returns a MistriLocks::Hold, or nil when nothing is configured or the
    # lease is held elsewhere (a refused caller never touches the real
    # holder's lease).
    #
    # With a block: yields the hold, releases it when the block ends (also on
    # an exception) and returns the block's value. When refused, the block is
    # not run and nil is returned.
    #
    # +signal+: a MistriLocks::AbortSignal, or any object responding to
    # abort!(reason) (such as Mistri::AbortSignal), which is called from a
    # Ruby thread when the hold is stopped or lost.
    #
    # +label+: what the lease stores as its holder (shown by info and
    # `mistri-locks status`); default: the handle's label, `host:pid ruby`.
    #
    # +wait+: seconds to wait for a lease held elsewhere (nil, the default:
    # don't wait; 0: try once; Float::INFINITY: no limit), woken by its
    # release or expiry; nil at the end of the wait. The wait runs without
    # the GVL; Thread#raise, Timeout.timeout, Ctrl-C and the +signal+
    # tripping end it (the waiter leaves the line).
    #
    # +limit+: up to +limit+ holders at once (an N-holder lease), each with
    # its own token, fence and renewal; a crashed holder's slot frees itself
    # at its ttl.
    #
    # Hung-holder guard: +max_hold+ seconds: never renew past this age (the
    # signal trips, saying so, before the lease lapses); +progress_timeout+
    # seconds: the work calls Hold#touch at least this often, else renewals
    # stop and the signal trips saying the work stalled.
    #
    # The keywords and their defaults are listed once, in Hold.start.
    def hold(key, **options, &block)
      hold = Hold.start(nil, key, **options)
      block ? Hold.run(hold, &block) : hold
    end
  end
  private_class_method :_configure, :_hold
end
