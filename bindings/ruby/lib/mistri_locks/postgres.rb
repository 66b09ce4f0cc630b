# frozen_string_literal: true

module MistriLocks
  # Leases and flags in a PostgreSQL database, shared by every process and
  # language that speaks the mistri_locks protocol: rows judged by the
  # database's clock, one statement or one short transaction per operation
  # (so PgBouncer in transaction mode works too), LISTEN/NOTIFY where the
  # connection allows it (else the tick poll).
  #
  #   MistriLocks.locks = MistriLocks::Postgres.new(url: ENV.fetch("DATABASE_URL"))
  #   MistriLocks.locks = MistriLocks::Postgres.from_active_record   # the app's own database
  #
  # +url+: postgres:// or postgresql:// with libpq's conventions
  # (postgres://user:pass@host:5432/dbname?sslmode=require, a unix socket
  # as ?host=/run/postgresql). +schema+: where the tables live (default
  # "mistri_locks", created on first use), here or as ?schema= in the URL,
  # not both (an ArgumentError). An unparsable URL, or another backend's
  # (MistriLocks.open takes every backend), is a MistriLocks::ConfigError. Postgres.schema_sql is the DDL for a role that
  # may not run it.
  #
  # Fencing at the resource: inside the application's own transaction,
  # SELECT mistri_locks.fence_check(resource, fence) raises when a higher
  # fence was already seen for +resource+, so a stale holder's write rolls
  # back whole:
  #
  #   ActiveRecord::Base.transaction do
  #     ActiveRecord::Base.connection.select_value(ActiveRecord::Base.sanitize_sql_array(
  #       ["SELECT mistri_locks.fence_check(?, ?)", "report:#{report.id}", hold.fence]))
  #     report.update!(body: body)
  #   end
  class Postgres < Locks
    DEFAULT_SCHEMA = "mistri_locks"

    # ActiveRecord adapters that speak to PostgreSQL.
    ADAPTERS = /\A(postgresql|postgis|postgres)\z/i

    class << self
      def new(url:, schema: nil, namespace: Redis::DEFAULT_NAMESPACE, label: nil)
        _open(String(url), namespace, schema.nil? ? nil : String(schema)).tap { |locks| locks.label = label unless label.nil? }
      end

      # The DDL that creates (or, run again, leaves as it is) the tables and
      # the fence_check function in +schema+: for a role that may not run
      # DDL (`mistri-locks schema` prints the same), e.g. in a migration:
      #   execute MistriLocks::Postgres.schema_sql
      def schema_sql(schema: DEFAULT_SCHEMA) = _schema_sql(String(schema))

      # A Postgres on the database an ActiveRecord connection uses: +source+
      # is a model class (default ActiveRecord::Base, the app's primary
      # database; an abstract class such as SolidCache::Record names its own
      # database), a connection pool, an ActiveRecord::DatabaseConfigurations
      # config or its configuration Hash. The URL is built from the config's
      # host, port, database, username, password, sslmode and
      # application_name; ActiveRecord's own connections are not shared (the
      # core keeps its own, with deadlines on every call). A database that is
      # not PostgreSQL is a ConfigError.
      #
      # (Named after what it reads, like the rest of Ruby's from_* and
      # ActiveRecord's own connection_db_config: any of the objects a Rails
      # app has at hand works, and +new+ stays the one URL constructor.)
      def from_active_record(source = default_record, schema: nil, namespace: Redis::DEFAULT_NAMESPACE, label: nil)
        config = ActiveRecordConfig.hash_of(source)
        adapter = config[:adapter].to_s
        unless ADAPTERS.match?(adapter)
          raise ConfigError, "MistriLocks::Postgres.from_active_record needs a PostgreSQL database " \
                             "(adapter postgresql); #{ActiveRecordConfig.describe(source)} uses #{adapter.inspect}"
        end
        new(url: url_from_config(config), schema: schema, namespace: namespace, label: label)
      end

      # The postgres:// URL of an ActiveRecord-style configuration Hash
      # (host, port, database, username, password, sslmode,
      # application_name; a host starting with "/" is a unix socket folder,
      # no host at all libpq's default socket folder, as ActiveRecord's pg
      # adapter does). The core builds it: every part percent-encoded, an
      # IPv6 host bracketed.
      def url_from_config(config)
        config = config.transform_keys(&:to_sym)
        _url_of({
                  host: config[:host], port: config[:port], database: config[:database],
                  user: config[:username] || config[:user], password: config[:password],
                  sslmode: config[:sslmode], application_name: config[:application_name]
                })
      end

      private

      def default_record
        raise ArgumentError, "MistriLocks::Postgres.from_active_record: ActiveRecord is not loaded (pass a source)" unless defined?(::ActiveRecord::Base)

        ::ActiveRecord::Base
      end
    end
    private_class_method :_open, :_schema_sql, :_url_of
  end

  # Reads the database configuration of an ActiveRecord source (a model
  # class, a connection pool, a db config or a Hash) through ActiveRecord's
  # public surface: connection_db_config / db_config / configuration_hash.
  module ActiveRecordConfig
    class << self
      def db_config_of(source)
        if source.respond_to?(:connection_db_config) then source.connection_db_config
        elsif source.respond_to?(:db_config) then source.db_config
        elsif source.respond_to?(:configuration_hash) then source
        end
      end

      def hash_of(source)
        return source.transform_keys(&:to_sym) if source.is_a?(Hash)

        config = db_config_of(source)
        if config.nil?
          raise TypeError, "expected an ActiveRecord model class, connection pool, db config or Hash, got #{source.class}"
        end

        config.configuration_hash.transform_keys(&:to_sym).merge(adapter: config.adapter)
      end

      def describe(source)
        source.is_a?(Module) ? source.name.to_s : source.class.name.to_s
      end
    end
  end
end
