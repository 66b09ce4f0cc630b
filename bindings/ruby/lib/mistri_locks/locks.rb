# frozen_string_literal: true

module MistriLocks
  # An owner of leases on one backend: the seven operations of the mistri
  # gem's adapter contract (and holds). MistriLocks::Memory, Redis and Local
  # are its subclasses; each is a drop-in for `Mistri.locks = ...`.
  #
  # Keys are Strings (or Symbols, meaning their name); an empty key is an
  # ArgumentError, anything else a TypeError. TTLs are seconds, Integer or
  # Float (0.01 is valid); zero, negative, NaN or infinite TTLs are an
  # ArgumentError, non-numbers a TypeError.
  #
  # Every acquire mints a secret owner token kept inside this object, so
  # renew and release only ever act on this object's own live lease.
  #
  # Native methods:
  #   release(key)    -> true if this object's lease was deleted
  #   held?(key)      -> is a live lease there (anyone's)?
  #   flag?(key)      -> is the flag up?
  #   clear_flag(key) -> true (lowers the flag)
  #   fence(key)      -> this object's fencing number for key, or nil
  #   break_lease(key)-> operator override: delete anyone's lease on key
  #   new_owner       -> another owner on the same backend (like another process)
  #   active_holds    -> how many holds this object's heartbeat renews
  #   info(key)       -> who holds key (a Hash: holder, fence, times, ttl,
  #                      heartbeat, time_left, limit, holders), or nil
  #   stats           -> this owner's counters (a Hash; see events.rb)
  #   label, label=   -> what this handle's leases store as their holder
  #                      (default "host:pid ruby"; nil restores it)
  class Locks
    # Takes the lease on +key+ for +ttl+ seconds if no live lease exists.
    # Returns true if taken.
    #
    # +wait+: seconds to wait for a lease held elsewhere (nil, the default:
    # don't wait; 0: try once; Float::INFINITY: no limit), woken by its
    # release or expiry; false at the end of the wait. The wait runs
    # without the GVL; Thread#raise, Timeout.timeout and Ctrl-C interrupt
    # it, and so does +signal+ (a MistriLocks::AbortSignal: false once it
    # trips). +limit+: take one of +limit+ slots of an N-holder lease.
    # (The extra keywords are optional: this stays the mistri gem's
    # acquire(key, ttl:).)
    def acquire(key, ttl:, wait: nil, limit: 1, signal: nil)
      return _acquire(key, ttl) if wait.nil? && limit == 1 && signal.nil?

      unless signal.nil? || signal.is_a?(AbortSignal)
        raise TypeError, "signal must be a MistriLocks::AbortSignal, got #{signal.class}"
      end
      _acquire_with(key, ttl, wait, limit, signal)
    end

    # Extends this object's lease on +key+ to +ttl+ seconds from now. Returns
    # false if it holds none (never acquired, released, expired or retaken).
    def renew(key, ttl:) = _renew(key, ttl)

    # Raises the flag +key+ for +ttl+ seconds (it needs no owner). Returns true.
    def set_flag(key, ttl: FLAG_TTL) = _set_flag(key, ttl)

    # Stops whoever holds +key+: raises, for +ttl+ seconds, the stop flag each
    # holder watches (each once). Returns the stop keys raised, in the order
    # of the holders ([] when nobody holds +key+ or no holder watches a stop
    # key: a plain lease can only be broken).
    def stop_holders(key, ttl: FLAG_TTL) = _stop_holders(key, ttl)

    # Raises the stop flag of job +job_id+ (MistriLocks::Job.stop_key) for
    # +ttl+ seconds. Returns the stop key.
    def stop_job(job_id, ttl: FLAG_TTL) = _stop_job(job_id.is_a?(Symbol) ? job_id.to_s : job_id, ttl)

    # The live leases and raised flags whose keys start with +prefix+ (a
    # String or Symbol; "" lists all of this namespace, or this Local file),
    # what `mistri-locks list` shows:
    #
    #   locks.list("report:")
    #   # => {leases: [{key: "report:7", holder: "web1:4242 ruby", fence: 12, ...}],
    #   #     flags: [{key: "report:stop", time_left: 287.5}]}
    #
    # Each lease is the Hash info(key) returns; each flag a Hash {key:,
    # time_left:} (seconds, nil if it has no expiry). Both sorted by key.
    def list(prefix = "") = _list(prefix)

    # See MistriLocks.hold (this handle instead of MistriLocks.locks; the
    # same keywords, listed once in Hold.start).
    def hold(key, **options, &block)
      hold = Hold.start(self, key, **options)
      block ? Hold.run(hold, &block) : hold
    end
  end

  # Leases and flags inside this process (threads, not processes): real TTLs
  # on a monotonic clock. MistriLocks::Memory.new
  class Memory < Locks
    def self.new(label: nil) = _new.tap { |locks| locks.label = label unless label.nil? }
    private_class_method :_new
  end

  # Leases and flags on Redis, shared by every process and language that
  # speaks the mistri_locks protocol. Keys live under +namespace+. Auth and
  # TLS come from the URL (redis://user:pass@host:port/db, rediss://).
  # Connects lazily: an unreachable server is a MistriLocks::ConnectionError
  # from the first operation. Round trips release the GVL; each is bounded by
  # a 5 s socket timeout (an interrupt arriving meanwhile is raised after it).
  class Redis < Locks
    def self.new(url: DEFAULT_URL, namespace: DEFAULT_NAMESPACE, label: nil)
      _open(url, namespace).tap { |locks| locks.label = label unless label.nil? }
    end
    private_class_method :_open
  end

  # Leases and flags shared by every process on this host (Puma or Unicorn
  # workers, a Sidekiq swarm) through an SQLite database file: atomic across
  # processes, no server. +path+ nil means $MISTRI_LOCKS_LOCAL_PATH, else the
  # per-user default /var/tmp/mistri_locks-<uid>/locks.db (the same for every
  # process of the user, whatever its environment). A corrupt or unwritable
  # file, a symbolic link, or a folder another user owns or can write is a
  # MistriLocks::ConfigError naming the path and the problem.
  class Local < Locks
    def self.new(path: nil, label: nil)
      _open(path.nil? ? nil : File.path(path)).tap { |locks| locks.label = label unless label.nil? }
    end
    private_class_method :_open
  end

  # The one entry point: the backend +url+ names, any of them (memory://, a
  # Local path or file://PATH, redis://, rediss://, redis+cluster://,
  # redis+sentinel://, postgres://, postgresql://, a libpq key/value DSN),
  # as that backend's class. +namespace+ is for Redis and Postgres;
  # +schema+ for Postgres only (another backend's is a ConfigError). An
  # unknown scheme is a ConfigError listing them all.
  #
  #   MistriLocks.locks = MistriLocks.open(ENV.fetch("MISTRI_LOCKS_URL"))
  def self.open(url, namespace: Redis::DEFAULT_NAMESPACE, label: nil, schema: nil)
    _open(String(url), String(namespace), label.nil? ? nil : String(label), schema.nil? ? nil : String(schema))
  end

  # ActiveRecord adapters that speak to MySQL or MariaDB.
  MYSQL_ADAPTERS = /\A(mysql2|trilogy|mysql)\z/i

  # The backend on the database an ActiveRecord connection uses (+source+
  # as for Postgres.from_active_record: a model class, default
  # ActiveRecord::Base; a connection pool, a db config or its Hash):
  # PostgreSQL opens Postgres.from_active_record; MySQL or MariaDB (mysql2,
  # trilogy) opens a mysql:// URL the core builds from the config's host,
  # port, database, username, password and ssl_mode (every part
  # percent-encoded, an IPv6 host bracketed; a socket is an ArgumentError:
  # the backend reaches MySQL over TCP). Another database is a ConfigError.
  def self.from_active_record(source = nil, namespace: Redis::DEFAULT_NAMESPACE, label: nil, schema: nil)
    source ||= Postgres.send(:default_record)
    config = ActiveRecordConfig.hash_of(source)
    adapter = config[:adapter].to_s
    if Postgres::ADAPTERS.match?(adapter)
      return Postgres.from_active_record(source, schema: schema, namespace: namespace, label: label)
    end
    unless MYSQL_ADAPTERS.match?(adapter)
      raise ConfigError, "MistriLocks.from_active_record needs a PostgreSQL, MySQL or MariaDB database; " \
                         "#{ActiveRecordConfig.describe(source)} uses #{adapter.inspect}"
    end
    url = _mysql_url_of({
                          host: config[:host], port: config[:port], database: config[:database],
                          user: config[:username] || config[:user], password: config[:password],
                          tls_mode: config[:ssl_mode]
                        })
    open(url, namespace: namespace, label: label, schema: schema)
  end
  private_class_method :_open, :_mysql_url_of
end
