# frozen_string_literal: true

# MistriLocks::RailsCache against Debian's ruby-activesupport and ruby-redis
# (scripts/setup installs them): the store -> adapter mapping, and the Mistri
# drop-in contract (mistri_compat_test.rb) on MemoryStore, RedisCacheStore
# on the throwaway redis-server, and a FileStore in best-effort mode.

require_relative "test_helper"
require_relative "mistri_compat_test"
require "mistri_locks/integrations/rails_cache"
begin
  require "active_support"
  require "active_support/cache"
  require "redis"
  require "active_support/cache/redis_cache_store"
rescue LoadError => e
  raise LoadError, "#{e.message}: install ruby-activesupport and ruby-redis (scripts/setup)"
end

# Sends several commands on one connection (SELECT then a read, say) and
# returns the last reply.
def redis_commands(*commands)
  TCPSocket.open("127.0.0.1", TestRedis.port) do |s|
    commands.map do |args|
      s.write("*#{args.size}\r\n" + args.map { |a| "$#{a.to_s.bytesize}\r\n#{a}\r\n" }.join)
      TestRedis.send(:read_reply, s)
    end.last
  end
end

class RailsCacheTest < Minitest::Test
  def test_a_memory_store_gets_the_native_memory_adapter_shared_per_store
    store = ActiveSupport::Cache::MemoryStore.new
    a = MistriLocks::RailsCache.new(cache: store)
    b = MistriLocks::RailsCache.new(cache: store, namespace: "mistri:locks")
    assert_kind_of MistriLocks::Memory, a
    assert a.acquire("rc:one", ttl: 5)
    refute b.acquire("rc:one", ttl: 5), "the same store: another owner sees the lease"
    refute b.release("rc:one"), "and cannot release it"
    assert a.held?("rc:one")
    other = MistriLocks::RailsCache.new(cache: ActiveSupport::Cache::MemoryStore.new)
    assert other.acquire("rc:one", ttl: 5), "another store is another backend"
    assert_nil store.read("mistri:locks:lease:rc:one"), "nothing is written into the cache itself"
  end

  def test_a_redis_cache_store_gets_the_native_redis_adapter_on_its_server
    store = ActiveSupport::Cache::RedisCacheStore.new(url: TestRedis.url, namespace: "app-cache")
    ns = "mistri:rc:#{SecureRandom.hex(4)}"
    locks = MistriLocks::RailsCache.new(cache: store, namespace: ns)
    assert_kind_of MistriLocks::Redis, locks
    assert locks.acquire("rc:r", ttl: 5)
    assert_operator locks.fence("rc:r"), :>, 0
    assert_equal 1, TestRedis.command("EXISTS", "#{ns}:lease:{rc:r}")
    assert locks.release("rc:r")
    default = MistriLocks::RailsCache.new(cache: store)
    key = "rc:default:#{SecureRandom.hex(4)}"
    assert default.acquire(key, ttl: 5)
    assert_equal 1, TestRedis.command("EXISTS", "mistri:locks:lease:{#{key}}"), "namespace defaults to mistri:locks"
    assert default.release(key)
  end

  def test_connection_settings_come_from_the_store_s_client
    port = TestRedis.port
    store = ActiveSupport::Cache::RedisCacheStore.new(redis: ::Redis.new(host: "127.0.0.1", port: port, db: 3))
    assert_equal "redis://127.0.0.1:#{port}/3", MistriLocks::RailsCache.redis_url(store)
    ns = "mistri:rc:#{SecureRandom.hex(4)}"
    locks = MistriLocks::RailsCache.new(cache: store, namespace: ns)
    assert locks.acquire("rc:db3", ttl: 5)
    assert_equal 1, redis_commands(["SELECT", "3"], ["EXISTS", "#{ns}:lease:{rc:db3}"]), "the lease is in db 3"
    assert_equal 0, TestRedis.command("EXISTS", "#{ns}:lease:{rc:db3}"), "not in db 0"

    built = ActiveSupport::Cache::RedisCacheStore.new(redis: -> { ::Redis.new(url: "rediss://u%40x:p%20w@h.example:6390/2") })
    assert_equal "rediss://u%40x:p%20w@h.example:6390/2", MistriLocks::RailsCache.redis_url(built)
    password_only = ActiveSupport::Cache::RedisCacheStore.new(host: "::1", port: 7000, password: "s:cret")
    assert_equal "redis://:s%3Acret@[::1]:7000/0", MistriLocks::RailsCache.redis_url(password_only)
    unix = ActiveSupport::Cache::RedisCacheStore.new(path: "/run/redis.sock", db: 1)
    assert_equal "redis+unix:///run/redis.sock?db=1", MistriLocks::RailsCache.redis_url(unix)
  end

  def test_a_password_in_the_store_s_url_reaches_the_server
    # ACL user on the throwaway server, removed afterwards.
    user = "rc#{SecureRandom.hex(3)}"
    TestRedis.command("ACL", "SETUSER", user, "on", ">pa:ss word", "~*", "&*", "+@all")
    store = ActiveSupport::Cache::RedisCacheStore.new(url: "redis://#{user}:pa%3Ass%20word@127.0.0.1:#{TestRedis.port}/0")
    locks = MistriLocks::RailsCache.new(cache: store, namespace: "mistri:rc:#{SecureRandom.hex(4)}")
    assert locks.acquire("rc:auth", ttl: 5)
    assert locks.release("rc:auth")
    wrong = ActiveSupport::Cache::RedisCacheStore.new(url: "redis://#{user}:nope@127.0.0.1:#{TestRedis.port}/0")
    assert_raises(MistriLocks::Error) { MistriLocks::RailsCache.new(cache: wrong).acquire("rc:auth", ttl: 5) }
  ensure
    TestRedis.command("ACL", "DELUSER", user)
  end

  def test_other_stores_are_refused_with_the_reason
    Dir.mktmpdir do |dir|
      error = assert_raises(MistriLocks::ConfigError) do
        MistriLocks::RailsCache.new(cache: ActiveSupport::Cache::FileStore.new(dir))
      end
      assert_match(/RedisCacheStore/, error.message)
      assert_match(/MemoryStore/, error.message)
      assert_match(/FileStore/, error.message)
      assert_match(/compare-and-delete/, error.message)
      assert_match(/best_effort: true/, error.message)
    end
    assert_raises(MistriLocks::ConfigError) { MistriLocks::RailsCache.new(cache: ActiveSupport::Cache::NullStore.new) }
    distributed = ActiveSupport::Cache::RedisCacheStore.new(url: [TestRedis.url, TestRedis.url.sub("/0", "/1")])
    assert_match(/several servers/, assert_raises(MistriLocks::ConfigError) { MistriLocks::RailsCache.new(cache: distributed) }.message)
  end

  def test_best_effort_mode_is_the_seed_s_adapter
    Dir.mktmpdir do |dir|
      store = ActiveSupport::Cache::FileStore.new(dir)
      a = MistriLocks::RailsCache.new(cache: store, best_effort: true)
      b = MistriLocks::RailsCache.new(cache: store, best_effort: true)
      assert_kind_of MistriLocks::RailsCache::BestEffort, a
      assert_same true, a.acquire("rc:be", ttl: 5)
      assert_same false, b.acquire("rc:be", ttl: 5)
      assert_same false, b.renew("rc:be", ttl: 5), "the (non-atomic) owner check"
      assert_same false, b.release("rc:be")
      assert_same true, a.release("rc:be")
      assert_raises(TypeError) { MistriLocks.locks = a }
    end
  end

  def test_cache_defaults_to_rails_cache
    assert_raises(ArgumentError) { MistriLocks::RailsCache.new }
    store = ActiveSupport::Cache::MemoryStore.new
    rails = Module.new
    rails.define_singleton_method(:cache) { store }
    Object.const_set(:Rails, rails)
    a = MistriLocks::RailsCache.new
    b = MistriLocks::RailsCache.new(cache: store)
    assert_kind_of MistriLocks::Memory, a
    assert a.acquire("rc:rails", ttl: 5)
    refute b.acquire("rc:rails", ttl: 5), "Rails.cache was used"
  ensure
    Object.send(:remove_const, :Rails) if defined?(::Rails) && ::Rails == rails
  end
end

# The Mistri drop-in contract on top of each mapping.
module RailsCacheBackends
  class MemoryStore
    def initialize = (@store = ActiveSupport::Cache::MemoryStore.new; @first = owner)
    def locks = @first
    def owner = MistriLocks::RailsCache.new(cache: @store, namespace: "mistri:locks")
    def delete_lease(key) = @first.break_lease(key) || raise("no lease on #{key}")
  end

  class RedisCacheStore
    def initialize
      @namespace = "mistri:test:#{SecureRandom.hex(6)}"
      @first = owner
    end

    def locks = @first

    # Another process: its own store object on the same server.
    def owner
      store = ActiveSupport::Cache::RedisCacheStore.new(url: TestRedis.url)
      MistriLocks::RailsCache.new(cache: store, namespace: @namespace)
    end

    def delete_lease(key)
      TestRedis.command("DEL", "#{@namespace}:lease:{#{key}}") == 1 || raise("no lease on #{key}")
    end
  end

  class FileStoreBestEffort
    def initialize
      @dir = Dir.mktmpdir("mistri-rb-filestore")
      @first = owner
    end

    def locks = @first
    def owner = MistriLocks::RailsCache.new(cache: ActiveSupport::Cache::FileStore.new(@dir), best_effort: true)
    def delete_lease(key) = ActiveSupport::Cache::FileStore.new(@dir).delete("mistri:locks:lease:#{key}") || raise("no lease")
  end
end

Backends.parametrize(MistriCompatCases, "MistriCompatTest", factories: {
                       "RailsCacheMemoryStore" => -> { RailsCacheBackends::MemoryStore.new },
                       "RailsCacheRedisCacheStore" => -> { RailsCacheBackends::RedisCacheStore.new },
                     })
# Best-effort objects are not native adapters: MistriLocks.hold cannot use
# them (that case is test_best_effort_mode_is_the_seed_s_adapter).
Backends.parametrize(MistriCompatCases, "MistriCompatTest",
                     factories: { "RailsCacheFileStoreBestEffort" => -> { RailsCacheBackends::FileStoreBestEffort.new } }) do
  undef_method :test_our_hold_takes_the_seeds_signal
end
