# frozen_string_literal: true

# One entry point: MistriLocks.open(url, namespace:, label:, schema:) opens
# every backend as its own class (a lease taken through it is the one the
# backend's own constructor sees), an unknown scheme's error lists every
# scheme, and each backend's constructor refuses another backend's URL.

require_relative "test_helper"
require "securerandom"
require "tmpdir"

class OpenTest < Minitest::Test
  def ns = "mistri:test:#{SecureRandom.hex(8)}"

  def shared(a, b)
    key = "open-#{SecureRandom.hex(8)}"
    assert a.acquire(key, ttl: 30)
    refute b.acquire(key, ttl: 30), "the second handle must see the lease"
    assert a.release(key)
  end

  def test_memory
    locks = MistriLocks.open("memory://", label: "opener")
    assert_instance_of MistriLocks::Memory, locks
    assert_equal "opener", locks.label
    shared(locks, locks.new_owner)
  end

  def test_a_path_and_a_file_url
    Dir.mktmpdir do |dir|
      db = File.join(dir, "locks.db")
      by_path = MistriLocks.open(db)
      by_url = MistriLocks.open("file://#{db}")
      assert_instance_of MistriLocks::Local, by_path
      assert_instance_of MistriLocks::Local, by_url
      shared(by_path, by_url)
      shared(by_url, MistriLocks::Local.new(path: db))
    end
  end

  def test_redis_with_a_namespace
    name = ns
    locks = MistriLocks.open(TestRedis.url, namespace: name, label: "opener")
    assert_instance_of MistriLocks::Redis, locks
    assert_equal "opener", locks.label
    shared(locks, MistriLocks::Redis.new(url: TestRedis.url, namespace: name))
  end

  def test_postgres_with_a_schema
    name = ns
    schema = "open_#{SecureRandom.hex(4)}"
    locks = MistriLocks.open(TestPostgres.url, namespace: name, schema: schema)
    assert_instance_of MistriLocks::Postgres, locks
    # The schema option, not the URL, chose the tables.
    shared(locks, MistriLocks::Postgres.new(url: "#{TestPostgres.url}?schema=#{schema}", namespace: name))
    shared(locks, MistriLocks::Postgres.new(url: TestPostgres.url, schema: schema, namespace: name))
    e = assert_raises(ArgumentError) { MistriLocks.open("#{TestPostgres.url}?schema=a", schema: "b") }
    assert_match(/given twice/, e.message)
  end

  def test_an_unknown_scheme_lists_every_scheme
    e = assert_raises(MistriLocks::ConfigError) { MistriLocks.open("http://example.com") }
    ["memory://", "file://", "redis://", "rediss://", "redis+cluster://", "redis+sentinel://",
     "postgres://", "postgresql://", "DSN"].each { |scheme| assert_includes e.message, scheme }
  end

  def test_schema_is_for_postgres_only
    e = assert_raises(MistriLocks::ConfigError) { MistriLocks.open("memory://", schema: "s") }
    assert_match(/Postgres option/, e.message)
  end

  def test_each_constructor_refuses_another_backends_url
    e = assert_raises(MistriLocks::ConfigError) { MistriLocks::Redis.new(url: "postgres://u:secret@127.0.0.1:1/db") }
    assert_match(/Redis constructor takes redis:\/\//, e.message)
    assert_includes e.message, "open(url)"
    refute_includes e.message, "secret"
    e = assert_raises(MistriLocks::ConfigError) { MistriLocks::Postgres.new(url: TestRedis.url) }
    assert_match(/Postgres constructor takes postgres:\/\//, e.message)
    e = assert_raises(MistriLocks::ConfigError) { MistriLocks::Local.new(path: TestRedis.url) }
    assert_match(/Local constructor takes/, e.message)
  end
end
