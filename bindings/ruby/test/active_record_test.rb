# frozen_string_literal: true

# MistriLocks::Postgres.from_active_record and MistriLocks::RailsCache on
# Solid Cache, against Debian's ActiveRecord 6.1 (ruby-activerecord, ruby-pg,
# ruby-sqlite3) on the run's throwaway PostgreSQL and on real SQLite files;
# and fencing at the resource from ActiveRecord (fence_check inside the
# application's transaction refusing a stale holder's write).
#
# solid_cache itself cannot be installed here (it needs Rails 7.2+ and
# RubyGems). SolidCache::Store and SolidCache::Record below are stand-ins
# with the surface of solid_cache 1.0 that RailsCache reads:
# SolidCache::Record, the abstract ActiveRecord base class of the cache's
# tables, connected with connects_to (Solid Cache's `database: :cache`
# means `connects_to shards: { cache: { writing: :cache } }`), with
# `each_shard` / `with_shard`; SolidCache::Store < ActiveSupport::Cache::Store
# with `shard_options`. The MySQL case stubs connection_db_config (no MySQL
# server or mysql2 gem here).

require_relative "test_helper"
require "minitest/mock"
require "uri"
require "mistri_locks/integrations/rails_cache"
begin
  require "active_record"
  require "active_support/cache"
rescue LoadError => e
  raise LoadError, "#{e.message}: install ruby-activerecord, ruby-pg and ruby-sqlite3"
end

# Granular connection swapping (connected_to on an abstract class), as
# Rails 7+ always does.
ActiveRecord::Base.legacy_connection_handling = false

# The stand-in: solid_cache 1.0's public classes, as far as RailsCache reads them.
module SolidCache
  class Configuration
    attr_reader :connects_to

    def initialize(connects_to: nil) = (@connects_to = connects_to)
    def sharded? = connects_to && connects_to[:shards]
    def shard_keys = sharded? ? connects_to[:shards].keys : []
  end

  class << self
    attr_accessor :configuration
  end
  self.configuration = Configuration.new

  class Record < ActiveRecord::Base
    self.abstract_class = true

    class << self
      # solid_cache 1.0 passes role: default_role (Rails 7.1+); 6.1's is :writing.
      def with_shard(shard, &block)
        if shard && SolidCache.configuration.sharded?
          connected_to(shard: shard, role: :writing, prevent_writes: false, &block)
        else
          block.call
        end
      end

      def each_shard(&block)
        return to_enum(:each_shard) unless block_given?

        if SolidCache.configuration.sharded?
          SolidCache.configuration.shard_keys.each { |shard| Record.with_shard(shard, &block) }
        else
          yield
        end
      end
    end
  end

  class Store < ActiveSupport::Cache::Store
    attr_reader :shard_options

    def initialize(options = {})
      super
      @shard_options = options.fetch(:shards, nil)
    end
  end
end

# The databases: primary "mistri" (the app's), "mistri_cache" and
# "mistri_cache2" (cache databases) on the throwaway PostgreSQL; SQLite files
# under a storage/ folder.
module ArDatabases
  class << self
    def storage
      @storage ||= begin
        dir = Dir.mktmpdir("mistri-rb-ar")
        at_exit { FileUtils.rm_rf(dir) }
        File.join(dir, "storage").tap { |s| Dir.mkdir(s, 0o700) }
      end
    end

    def pg(database)
      port = Integer(TestPostgres.url[%r{:(\d+)/}, 1])
      { "adapter" => "postgresql", "host" => "127.0.0.1", "port" => port, "database" => database,
        "username" => "postgres" }
    end

    def setup!
      return if @set_up

      %w[mistri_cache mistri_cache2].each do |db|
        TestPostgres.psql("CREATE DATABASE #{db}") unless TestPostgres.psql("SELECT 1 FROM pg_database WHERE datname = '#{db}'") == "1"
      end
      ActiveRecord::Base.configurations = {
        "default_env" => {
          "primary" => pg("mistri"),
          "cache" => pg("mistri_cache"),
          "cache2" => pg("mistri_cache2"),
          "sqlite_cache" => { "adapter" => "sqlite3", "database" => File.join(storage, "production_cache.sqlite3") },
          "memory_cache" => { "adapter" => "sqlite3", "database" => ":memory:" },
        },
      }
      ActiveRecord::Base.establish_connection(:primary)
      @set_up = true
    end

    # Points SolidCache::Record at +connects_to+, as Solid Cache's engine does
    # from config/cache.yml.
    def solid_cache(connects_to)
      setup!
      SolidCache.configuration = SolidCache::Configuration.new(connects_to: connects_to)
      SolidCache::Record.connects_to(**connects_to)
    end
  end
end

class ActiveRecordTest < Minitest::Test
  def setup = ArDatabases.setup!
  def ns = "mistri:test:#{SecureRandom.hex(6)}"

  def leases_in(database, namespace)
    TestPostgres.psql(database: database, sql: "SELECT count(*) FROM mistri_locks.leases WHERE ns = '#{namespace}'").to_i
  end

  # ----------------------------------------------------------- from_active_record

  def test_from_active_record_is_a_postgres_on_the_apps_database
    namespace = ns
    [ActiveRecord::Base, ActiveRecord::Base.connection_pool, ActiveRecord::Base.connection_db_config,
     ActiveRecord::Base.connection_db_config.configuration_hash].each do |source|
      locks = MistriLocks::Postgres.from_active_record(source, namespace: namespace)
      assert_kind_of MistriLocks::Postgres, locks
      assert locks.acquire("ar:primary", ttl: 5), "from #{source.class}"
      assert_equal 1, leases_in("mistri", namespace), "the lease is a row in the app's database"
      refute MistriLocks::Postgres.new(url: TestPostgres.url, namespace: namespace).acquire("ar:primary", ttl: 5)
      assert locks.release("ar:primary")
    end
    assert_kind_of MistriLocks::Postgres, MistriLocks::Postgres.from_active_record
  end

  def test_from_active_record_refuses_other_databases_and_objects
    sqlite = ActiveRecord::DatabaseConfigurations::HashConfig.new("test", "x", adapter: "sqlite3", database: "x.db")
    error = assert_raises(MistriLocks::ConfigError) { MistriLocks::Postgres.from_active_record(sqlite) }
    assert_match(/PostgreSQL/, error.message)
    assert_match(/sqlite3/, error.message)
    assert_raises(TypeError) { MistriLocks::Postgres.from_active_record(Object.new) }
  end

  def test_urls_from_configs_follow_libpq
    pg = MistriLocks::Postgres
    assert_equal "postgres://app:p%40ss%2Fw%20rd@db.internal:6432/app_prod?sslmode=require&application_name=web",
                 pg.url_from_config(adapter: "postgresql", host: "db.internal", port: "6432", database: "app_prod",
                                    username: "app", password: "p@ss/w rd", sslmode: "require",
                                    application_name: "web")
    assert_equal "postgres://app@/app?host=%2Fvar%2Frun%2Fpostgresql",
                 pg.url_from_config(host: "/var/run/postgresql", database: "app", username: "app")
    assert_equal "postgres://[::1]:5432/app", pg.url_from_config(host: "::1", port: 5432, database: "app")
    assert_equal "postgres:///app", pg.url_from_config(database: "app"), "no host: libpq's default socket"
  end

  # The core builds the URL (Django's builder calls the same function): an
  # IPv6 host bracketed, a password with @ : / ? # % comes back whole, a
  # bad port refused; the URL of a real config opens the real database.
  def test_the_core_builds_the_url_from_the_parts
    pg = MistriLocks::Postgres
    password = "p@ss:w/rd?#% &="
    url = pg.url_from_config(host: "::1", port: 5433, database: "app", username: "me", password: password)
    parsed = URI.parse(url)
    assert_equal ["[::1]", 5433, "me"], [parsed.host, parsed.port, parsed.user]
    assert_equal password, URI.decode_www_form_component(parsed.password)
    assert_equal "postgres://[fe80::1]/", pg.url_from_config(host: "[fe80::1]", port: "")
    assert_raises(ArgumentError) { pg.url_from_config(host: "h", port: "x") }
    assert_raises(ArgumentError) { pg.url_from_config(host: "h", port: 70_000) }
    real = URI.parse(TestPostgres.url)
    config = { adapter: "postgresql", host: real.host, port: real.port, database: real.path.delete_prefix("/"),
               username: real.user || "postgres", password: password }
    locks = pg.from_active_record(config, namespace: "url:#{Process.pid}")
    assert locks.acquire("url:1", ttl: 5)
    assert locks.held?("url:1")
    assert locks.release("url:1")
  end

  def test_schema_given_twice_is_an_argument_error_and_bad_urls_config_errors
    assert_raises(ArgumentError) { MistriLocks::Postgres.new(url: "#{TestPostgres.url}?schema=a", schema: "b") }
    assert_raises(MistriLocks::ConfigError) { MistriLocks::Postgres.new(url: "redis://127.0.0.1:6379/0") }
    assert_raises(MistriLocks::ConfigError) { MistriLocks::Postgres.new(url: "postgres://h/db?sslmode=bogus") }
    assert_raises(MistriLocks::ConfigError) { MistriLocks::Postgres.schema_sql(schema: 'bad"name') }
    schema = "rb_#{SecureRandom.hex(4)}"
    sql = MistriLocks::Postgres.schema_sql(schema: schema)
    assert_includes sql, %("#{schema}".fence_check)
    locks = MistriLocks::Postgres.new(url: TestPostgres.url, schema: schema, namespace: ns)
    assert locks.acquire("in-schema", ttl: 5)
    assert_equal "1", TestPostgres.psql("SELECT count(*) FROM #{schema}.leases WHERE key = 'in-schema'")
  end

  # ------------------------------------------------------- RailsCache on Solid Cache

  def test_solid_cache_on_postgresql_gets_postgres_on_the_cache_database
    ArDatabases.solid_cache(shards: { cache: { writing: :cache } }) # database: :cache
    namespace = ns
    store = SolidCache::Store.new
    a = MistriLocks::RailsCache.new(cache: store, namespace: namespace)
    b = MistriLocks::RailsCache.new(cache: store, namespace: namespace)
    assert_kind_of MistriLocks::Postgres, a
    assert a.acquire("sc:pg", ttl: 5)
    refute b.acquire("sc:pg", ttl: 5), "another owner on the same cache database sees the lease"
    assert_equal 1, leases_in("mistri_cache", namespace), "the lease lives in the cache's database"
    refute MistriLocks::Postgres.from_active_record(namespace: namespace).held?("sc:pg"),
           "not in the app's primary database"
    assert a.release("sc:pg")
  end

  def test_solid_cache_on_the_apps_own_connection_uses_the_primary_database
    # No database in config/cache.yml: SolidCache::Record never calls
    # connects_to and so uses ActiveRecord::Base's pool (undo earlier tests').
    SolidCache.configuration = SolidCache::Configuration.new
    SolidCache::Record.connection_specification_name = nil
    namespace = ns
    a = MistriLocks::RailsCache.new(cache: SolidCache::Store.new, namespace: namespace)
    assert a.acquire("sc:primary", ttl: 5)
    assert_equal 1, leases_in("mistri", namespace)
  end

  def test_solid_cache_over_several_databases_is_a_config_error
    ArDatabases.solid_cache(shards: { one: { writing: :cache }, two: { writing: :cache2 } })
    error = assert_raises(MistriLocks::ConfigError) { MistriLocks::RailsCache.new(cache: SolidCache::Store.new) }
    assert_match(/2 databases/, error.message)
    # A store limited to one shard is one database.
    namespace = ns
    locks = MistriLocks::RailsCache.new(cache: SolidCache::Store.new(shards: [:two]), namespace: namespace)
    assert_kind_of MistriLocks::Postgres, locks
    assert locks.acquire("sc:two", ttl: 5)
    assert_equal 1, leases_in("mistri_cache2", namespace)
  end

  def test_solid_cache_on_sqlite_gets_local_beside_the_cache_file
    ArDatabases.solid_cache(shards: { sqlite_cache: { writing: :sqlite_cache } })
    store = SolidCache::Store.new
    a = MistriLocks::RailsCache.new(cache: store)
    assert_kind_of MistriLocks::Local, a
    assert a.acquire("sc:sqlite", ttl: 5)
    path = File.join(ArDatabases.storage, "production_cache.mistri_locks.sqlite3")
    assert File.exist?(path), "the Local file is next to the cache database"
    # Another process (or container) mounting the same storage/ shares it.
    out = IO.popen([RbConfig.ruby, "-I", Subprocess::LIB, "-e", <<~RUBY, path], &:read)
      require "mistri_locks"
      l = MistriLocks::Local.new(path: ARGV[0])
      print [l.held?("sc:sqlite"), l.acquire("sc:sqlite", ttl: 5)].inspect
    RUBY
    assert_equal "[true, false]", out
    assert a.release("sc:sqlite")
  end

  def test_solid_cache_on_in_memory_sqlite_is_a_config_error
    ArDatabases.solid_cache(shards: { memory_cache: { writing: :memory_cache } })
    error = assert_raises(MistriLocks::ConfigError) { MistriLocks::RailsCache.new(cache: SolidCache::Store.new) }
    assert_match(/in-memory SQLite/, error.message)
  end

  # The config of the throwaway MariaDB as an ActiveRecord mysql2/trilogy
  # app writes it (the password needs percent-encoding in a URL).
  def mariadb_config(adapter, name: "cache")
    port = Integer(TestMariadb.url[%r{:(\d+)/}, 1])
    ActiveRecord::DatabaseConfigurations::HashConfig.new(
      "production", name, adapter: adapter, host: "127.0.0.1", port: port, database: "mistri",
                          username: "mistri", password: "pw:mistri/41"
    )
  end

  # Solid Cache on MySQL/MariaDB (issue 41): the leases live in the cache's
  # database, as on PostgreSQL (the connection is stubbed: ActiveRecord's
  # mysql2 adapter is not needed, only its config).
  def test_solid_cache_on_mysql_gets_the_mysql_backend_on_the_cache_database
    SolidCache.configuration = SolidCache::Configuration.new
    %w[mysql2 trilogy].each do |adapter|
      namespace = ns
      SolidCache::Record.stub(:connection_db_config, mariadb_config(adapter)) do
        store = SolidCache::Store.new
        a = MistriLocks::RailsCache.new(cache: store, namespace: namespace)
        b = MistriLocks::RailsCache.new(cache: store, namespace: namespace)
        assert a.acquire("sc:my", ttl: 5), adapter
        refute b.acquire("sc:my", ttl: 5), "another owner on the same cache database sees the lease"
        refute MistriLocks.open(TestMariadb.url, namespace: namespace).acquire("sc:my", ttl: 5),
               "the lease lives in the MariaDB"
        assert a.release("sc:my")
      end
    end
  end

  def test_solid_cache_on_another_database_is_a_config_error_saying_what_is_supported
    SolidCache.configuration = SolidCache::Configuration.new
    config = ActiveRecord::DatabaseConfigurations::HashConfig.new("production", "cache", adapter: "sqlserver",
                                                                                          database: "app_cache")
    SolidCache::Record.stub(:connection_db_config, config) do
      error = assert_raises(MistriLocks::ConfigError) { MistriLocks::RailsCache.new(cache: SolidCache::Store.new) }
      assert_match(/PostgreSQL/, error.message)
      assert_match(/MySQL/, error.message)
      assert_match(/SQLite/, error.message)
      assert_match(/sqlserver/, error.message)
    end
  end

  # MistriLocks.from_active_record: PostgreSQL as Postgres.from_active_record,
  # MySQL/MariaDB (mysql2, trilogy) by the mysql:// URL the core builds from
  # the config, anything else a ConfigError.
  def test_from_active_record_opens_mysql_from_a_mysql2_or_trilogy_config
    %w[mysql2 trilogy].each do |adapter|
      namespace = ns
      locks = MistriLocks.from_active_record(mariadb_config(adapter), namespace: namespace)
      assert locks.acquire("ar:my", ttl: 5), adapter
      refute MistriLocks.open(TestMariadb.url, namespace: namespace).acquire("ar:my", ttl: 5)
      assert locks.release("ar:my")
    end
    assert_kind_of MistriLocks::Postgres, MistriLocks.from_active_record(ActiveRecord::Base)
    socket = { adapter: "mysql2", host: "/run/mysqld/mysqld.sock", database: "app" }
    assert_raises(ArgumentError) { MistriLocks.from_active_record(socket) }
    sqlite = ActiveRecord::DatabaseConfigurations::HashConfig.new("test", "x", adapter: "sqlite3", database: "x.db")
    error = assert_raises(MistriLocks::ConfigError) { MistriLocks.from_active_record(sqlite) }
    assert_match(/sqlite3/, error.message)
  end

  # ------------------------------------------------------------ fence_check from AR

  class Report < ActiveRecord::Base
    self.table_name = "mistri_reports"
  end

  # What an application does: the fence check and its write in one transaction.
  def write_fenced(id, fence, body)
    Report.transaction do
      Report.connection.select_value(Report.sanitize_sql_array(["SELECT mistri_locks.fence_check(?, ?)", "report:#{id}", fence]))
      Report.find_or_initialize_by(id: id).update!(body: body)
    end
  end

  def test_fence_check_refuses_the_stale_holders_write
    conn = ActiveRecord::Base.connection
    conn.execute("CREATE TABLE IF NOT EXISTS mistri_reports (id bigint PRIMARY KEY, body text)")
    namespace = ns
    a = MistriLocks::Postgres.from_active_record(namespace: namespace)
    b = MistriLocks::Postgres.from_active_record(namespace: namespace)
    id = rand(1 << 40)

    assert a.acquire("report", ttl: 0.3)
    fence_a = a.fence("report")
    write_fenced(id, fence_a, "from A")
    sleep 0.6 # A pauses past its ttl; B takes over
    assert b.acquire("report", ttl: 5)
    fence_b = b.fence("report")
    assert_operator fence_b, :>, fence_a
    write_fenced(id, fence_b, "from B")

    error = assert_raises(ActiveRecord::StatementInvalid) { write_fenced(id, fence_a, "from A, stale") }
    assert_match(/stale fence/, error.message)
    assert_equal "from B", Report.find(id).body, "the stale write rolled back whole"
    write_fenced(id, fence_b, "from B again")
    assert b.release("report")

    MistriLocks.hold("report", ttl: 5, heartbeat: 1) { flunk "nothing configured: no hold" }
    MistriLocks.locks = a
    MistriLocks.hold("report", ttl: 5, heartbeat: 1) do |hold|
      assert_operator hold.fence, :>, fence_b
      write_fenced(id, hold.fence, "from A's hold")
    end
    assert_raises(ActiveRecord::StatementInvalid) { write_fenced(id, fence_b, "from B, stale") }
    assert_equal "from A's hold", Report.find(id).body
  ensure
    MistriLocks.locks = nil
  end

  # On MySQL/MariaDB (issue 41): an app on ActiveRecord's mysql2 adapter
  # calls the backend's mistri_fence_check procedure in its own transaction.
  # The procedure answers with a result set, which ActiveRecord 6.1's
  # mysql2 adapter leaves pending after a CALL ("Commands out of sync" on
  # the next statement), so the CALL goes through the raw client, which
  # then drops it (abandon_results!).
  class MyRecord < ActiveRecord::Base
    self.abstract_class = true
  end

  class MyReport < MyRecord
    self.table_name = "mistri_reports"
  end

  def write_fenced_mysql(id, fence, body)
    MyReport.transaction do
      raw = MyReport.connection.raw_connection
      raw.query(MyReport.sanitize_sql_array(["CALL mistri_fence_check(?, ?)", "report:#{id}", fence]))
      raw.abandon_results!
      MyReport.find_or_initialize_by(id: id).update!(body: body)
    end
  end

  def test_fence_check_refuses_the_stale_holders_write_on_mysql
    MyRecord.establish_connection(mariadb_config("mysql2", name: "primary").configuration_hash)
    MyRecord.connection.execute("CREATE TABLE IF NOT EXISTS mistri_reports (id bigint PRIMARY KEY, body text) ENGINE=InnoDB")
    namespace = ns
    a = MistriLocks.from_active_record(MyRecord, namespace: namespace)
    b = MistriLocks.from_active_record(MyReport, namespace: namespace)
    id = rand(1 << 40)

    assert a.acquire("report", ttl: 0.3) # never renewed: it lapses
    fence_a = a.fence("report")
    write_fenced_mysql(id, fence_a, "from A")
    sleep 0.6 # A pauses past its ttl; B takes over
    assert b.acquire("report", ttl: 5)
    fence_b = b.fence("report")
    assert_operator fence_b, :>, fence_a
    write_fenced_mysql(id, fence_b, "from B")

    error = assert_raises(Mysql2::Error) { write_fenced_mysql(id, fence_a, "from A, stale") }
    assert_match(/ML409/, error.message)
    assert_equal "from B", MyReport.find(id).body, "the stale write rolled back whole"
    write_fenced_mysql(id, fence_b, "from B again")
    assert_equal "from B again", MyReport.find(id).body
    assert b.release("report")
  ensure
    MyRecord.remove_connection
  end
end
