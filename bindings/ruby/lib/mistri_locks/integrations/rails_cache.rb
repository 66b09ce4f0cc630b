# frozen_string_literal: true

require "mistri_locks"
require "securerandom"
require "uri"

module MistriLocks
  # The drop-in for the mistri gem's Mistri::Locks::RailsCache:
  #
  #   Mistri.locks = MistriLocks::RailsCache.new(cache: Rails.cache, namespace: "mistri:locks")
  #   MistriLocks.locks = MistriLocks::RailsCache.new   # cache: Rails.cache
  #
  # Same signature and defaults, but instead of leases written with plain
  # cache writes it returns the native adapter that the store's backend
  # allows, with owner tokens and fences:
  #
  # - ActiveSupport::Cache::RedisCacheStore: a MistriLocks::Redis on the
  #   store's Redis server, built from its connection settings (URL, or
  #   host/port/db/username/password/ssl, or a unix socket path; a
  #   ConnectionPool is looked through), keys under +namespace+. Every
  #   process and language speaking the mistri_locks protocol shares it.
  # - ActiveSupport::Cache::MemoryStore: a MistriLocks::Memory (one
  #   process), one backend per store object: two RailsCache.new on the same
  #   store are two owners that see each other's leases, as two processes
  #   on one Redis would.
  # - SolidCache::Store (Rails 8's default cache; also
  #   ActiveSupport::Cache::SolidCacheStore): the cache's database, found
  #   through SolidCache::Record (the ActiveRecord base class of its
  #   tables: connection_db_config in each of its shards). On PostgreSQL a
  #   MistriLocks::Postgres on that database (tables in the schema
  #   "mistri_locks", beside the cache's own); on SQLite a MistriLocks::Local
  #   on a file next to the cache database (storage/production_cache.sqlite3
  #   -> storage/production_cache.mistri_locks.sqlite3), so the processes of
  #   one host, and containers that mount the same storage/ (the old and the
  #   new one during a deploy), share it. On MySQL or MariaDB (mysql2,
  #   trilogy) the MySQL backend on that database (MistriLocks.open of the
  #   mysql:// URL the core builds from its config; tables prefixed
  #   mistri_). Another database (and a cache spread over several
  #   databases) raise ConfigError: a lease must live in one place that can
  #   compare-and-delete with the database's clock.
  # - Any other store (FileStore, MemCacheStore, NullStore, a
  #   Redis::Distributed store, ...) raises MistriLocks::ConfigError: owner
  #   checks need an atomic compare-and-delete (and compare-and-renew),
  #   which those stores cannot do, so a holder whose lease expired could
  #   renew or delete the next holder's lease. Unless +best_effort: true+:
  #   then a RailsCache::BestEffort is returned, which behaves like the
  #   seed's adapter (the seven methods over cache reads and writes, with a
  #   non-atomic owner check) and is usable only through Mistri.locks= (the
  #   native MistriLocks.hold needs a native adapter).
  #
  # The result is a MistriLocks::Redis / MistriLocks::Memory (or a
  # BestEffort): RailsCache is a factory, so the object answers every
  # native method (hold, fence, info, new_owner, ...).
  module RailsCache
    SUPPORTED = "ActiveSupport::Cache::RedisCacheStore (the native Redis adapter), " \
                "ActiveSupport::Cache::MemoryStore (the native Memory adapter, one process) and " \
                "SolidCache::Store on PostgreSQL (the native Postgres adapter), MySQL/MariaDB (the native MySQL " \
                "backend) or SQLite (the native Local adapter)"

    # What SolidCache::Store maps to, for its error messages.
    SOLID_CACHE_SUPPORTED = "Solid Cache on PostgreSQL (MistriLocks::Postgres on the cache's database), on " \
                            "MySQL or MariaDB (the MySQL backend on the cache's database) or on " \
                            "SQLite (MistriLocks::Local on a file next to the cache's database)"

    # Memory backends by MemoryStore object (weakly: a dropped store drops them).
    @memories = ObjectSpace::WeakMap.new
    @memories_lock = Mutex.new

    class << self
      # +cache+ defaults to Rails.cache when Rails is loaded.
      def new(cache: default_cache, namespace: Redis::DEFAULT_NAMESPACE, best_effort: false)
        raise ArgumentError, "MistriLocks::RailsCache: no cache given and Rails is not loaded (pass cache:)" if cache.nil?

        if redis_store?(cache)
          Redis.new(url: redis_url(cache), namespace: namespace)
        elsif memory_store?(cache)
          memory_for(cache).new_owner
        elsif solid_cache_store?(cache)
          solid_cache_locks(cache, namespace)
        elsif best_effort
          BestEffort.new(cache: cache, namespace: namespace)
        else
          raise ConfigError, "MistriLocks::RailsCache supports #{SUPPORTED}; got #{cache.class}. " \
                             "Owner checks need an atomic compare-and-delete (and compare-and-renew), which " \
                             "#{cache.class} cannot do, so a holder whose lease had expired could renew or delete " \
                             "the next holder's lease. Pass best_effort: true to use it anyway the way " \
                             "Mistri::Locks::RailsCache does (no atomic owner check)."
        end
      end

      # The redis:// URL of a RedisCacheStore's server (raises ConfigError
      # for a store spread over several servers).
      def redis_url(store)
        client = store.redis
        client = client.with { |c| c } if defined?(::ConnectionPool) && client.is_a?(::ConnectionPool)
        if defined?(::Redis::Distributed) && client.is_a?(::Redis::Distributed)
          raise ConfigError, "MistriLocks::RailsCache: a RedisCacheStore over several servers " \
                             "(Redis::Distributed) cannot hold leases: a lease must live on one server"
        end
        url_from(connection_settings(client))
      end

      # The ActiveRecord db config of a SolidCache::Store's database (raises
      # ConfigError for a cache over several databases).
      def solid_cache_db_config(store)
        record = ::SolidCache::Record
        configs = []
        shards = store.respond_to?(:shard_options) ? Array(store.shard_options) : []
        if shards.any? && record.respond_to?(:with_shard)
          shards.each { |shard| record.with_shard(shard) { configs << record.connection_db_config } }
        elsif record.respond_to?(:each_shard)
          record.each_shard { configs << record.connection_db_config }
        else
          configs << record.connection_db_config
        end
        configs.uniq! { |c| place_of(c) }
        if configs.size > 1
          raise ConfigError, "MistriLocks::RailsCache: this Solid Cache spreads over #{configs.size} databases " \
                             "(#{configs.map(&:name).join(", ")}); a lease must live in one. Pass " \
                             "MistriLocks::Postgres.from_active_record(...) or MistriLocks::Postgres.new(url:) instead."
        end
        configs.first or raise ConfigError, "MistriLocks::RailsCache: SolidCache::Record has no database"
      end

      private

      def solid_cache_store?(cache)
        defined?(::SolidCache::Store) && cache.is_a?(::SolidCache::Store)
      end

      def solid_cache_locks(store, namespace)
        config = solid_cache_db_config(store)
        adapter = config.adapter.to_s
        if Postgres::ADAPTERS.match?(adapter)
          Postgres.from_active_record(config, namespace: namespace)
        elsif MistriLocks::MYSQL_ADAPTERS.match?(adapter)
          MistriLocks.from_active_record(config, namespace: namespace)
        elsif adapter.match?(/sqlite/i)
          Local.new(path: local_path_beside(config))
        else
          raise ConfigError, "MistriLocks::RailsCache supports #{SOLID_CACHE_SUPPORTED}; this Solid Cache's " \
                             "database (#{config.name}) uses #{adapter.inspect}. For another database, give the " \
                             "locks a server of their own: MistriLocks::Postgres.new(url:) or MistriLocks::Redis.new(url:)."
        end
      end

      # Where one database lives, to tell shards on one database from many.
      def place_of(config)
        h = config.configuration_hash
        [config.adapter.to_s, h[:host].to_s, h[:port].to_s, h[:database].to_s]
      end

      # storage/production_cache.sqlite3 -> storage/production_cache.mistri_locks.sqlite3
      # (one file per cache database, so development and test stay apart).
      def local_path_beside(config)
        database = config.configuration_hash[:database].to_s
        if database.empty? || database.include?(":memory:") || database.start_with?("file::memory")
          raise ConfigError, "MistriLocks::RailsCache: this Solid Cache uses an in-memory SQLite database " \
                             "(#{config.name}), which other processes cannot see; use MistriLocks::Local.new(path:) " \
                             "or MistriLocks::Memory.new for one process."
        end
        database = database.delete_prefix("file:").split("?", 2).first
        root = defined?(::Rails) && ::Rails.respond_to?(:root) && ::Rails.root ? ::Rails.root.to_s : Dir.pwd
        path = File.expand_path(database, root)
        File.join(File.dirname(path), "#{File.basename(path, ".*")}.mistri_locks.sqlite3")
      end

      def default_cache
        defined?(::Rails) && ::Rails.respond_to?(:cache) ? ::Rails.cache : nil
      end

      def redis_store?(cache)
        defined?(::ActiveSupport::Cache::RedisCacheStore) && cache.is_a?(::ActiveSupport::Cache::RedisCacheStore)
      end

      def memory_store?(cache)
        defined?(::ActiveSupport::Cache::MemoryStore) && cache.is_a?(::ActiveSupport::Cache::MemoryStore)
      end

      def memory_for(store)
        @memories_lock.synchronize { @memories[store] ||= Memory.new }
      end

      # host, port, db, path, username, password, ssl of a redis-rb client
      # (4.x: client.options; 5.x on redis-client: client.config).
      def connection_settings(client)
        inner = client.respond_to?(:_client) ? client._client : client
        if inner.respond_to?(:config) && !inner.respond_to?(:options)
          c = inner.config
          { host: c.host, port: c.port, db: c.db, path: c.path, username: c.username,
            password: c.password, ssl: c.ssl }
        else
          o = inner.options
          { host: o[:host], port: o[:port], db: o[:db], path: o[:path], username: o[:username],
            password: o[:password], ssl: o[:ssl] || o[:scheme] == "rediss" }
        end
      end

      def url_from(settings)
        user = settings[:username].to_s
        password = settings[:password].to_s
        db = Integer(settings[:db] || 0)
        if settings[:path]
          query = URI.encode_www_form({ db: db, user: (user unless user.empty?),
                                        pass: (password unless password.empty?) }.compact)
          return "redis+unix://#{settings[:path]}?#{query}"
        end

        auth = if password.empty? && user.empty? then ""
               else "#{escape(user)}#{":#{escape(password)}" unless password.empty?}@"
               end
        host = settings[:host].to_s
        host = "[#{host}]" if host.include?(":") # IPv6
        "#{settings[:ssl] ? "rediss" : "redis"}://#{auth}#{host}:#{settings[:port] || 6379}/#{db}"
      end

      def escape(part) = URI.encode_www_form_component(part).gsub("+", "%20")
    end

    # The seed's adapter over any ActiveSupport cache store (opt-in, see
    # RailsCache.new): leases and flags are cache entries under +namespace+
    # with expires_in. The owner check is a read then a write/delete, not
    # atomic: a holder whose lease expired between the two steps can still
    # renew or delete the next holder's lease. Stores that keep whole
    # seconds (MemCacheStore) round sub-second TTLs. A drop-in for
    # `Mistri.locks = ...` only.
    class BestEffort
      attr_reader :cache, :namespace

      def initialize(cache:, namespace: Redis::DEFAULT_NAMESPACE)
        @cache = cache
        @namespace = namespace
        @token = SecureRandom.hex(16)
      end

      # Writes the lease unless a live one exists. true if taken.
      def acquire(key, ttl:)
        @cache.write(lease_key(key), @token, unless_exist: true, expires_in: ttl) ? true : false
      end

      # Extends this object's lease (if the entry still carries its token).
      def renew(key, ttl:)
        return false unless mine?(key)

        @cache.write(lease_key(key), @token, expires_in: ttl) ? true : false
      end

      # Deletes this object's lease (if the entry still carries its token).
      def release(key)
        return false unless mine?(key)

        @cache.delete(lease_key(key)) ? true : false
      end

      def held?(key) = @cache.exist?(lease_key(key))

      def set_flag(key, ttl: FLAG_TTL)
        @cache.write(flag_key(key), true, expires_in: ttl)
        true
      end

      def flag?(key) = @cache.exist?(flag_key(key))

      def clear_flag(key)
        @cache.delete(flag_key(key))
        true
      end

      def inspect = "#<#{self.class} cache=#{@cache.class} namespace=#{@namespace.inspect}>"

      private

      def mine?(key) = @cache.read(lease_key(key)) == @token
      def lease_key(key) = "#{@namespace}:lease:#{key}"
      def flag_key(key) = "#{@namespace}:flag:#{key}"
    end
  end
end
