# frozen_string_literal: true

# Locks#list(prefix = ""): the live leases and raised flags under a prefix,
# as the core's Listing (what `mistri-locks list` shows), on every backend;
# each lease the same Hash as info(key).

require_relative "test_helper"

module ListCases
  def locks = backend.locks

  # info's Hash without what changes between two reads.
  # What two reads of one lease agree on. time_left runs down between them,
  # and on Redis renewed_at is derived at read time (now - (ttl - time left)),
  # so it moves with how long each read's round trip took: both are checked
  # against the clock instead (see renewed_within).
  def steady(lease)
    lease.except(:time_left, :renewed_at).merge(holders: lease[:holders]&.map { |h| h.except(:renewed_at) })
  end

  # Every renewed_at of +lease+ lies between +from+ and now (wall clock, s),
  # with a millisecond of rounding.
  def renewed_within(lease, from)
    [lease, *lease[:holders]].each do |h|
      assert_operator h[:renewed_at], :>=, from - 0.001
      assert_operator h[:renewed_at], :<=, Time.now.to_f + 0.001
    end
  end

  def test_nothing_listed_at_first
    assert_equal({ leases: [], flags: [], waiting: [] }, locks.list)
    assert_equal({ leases: [], flags: [], waiting: [] }, locks.list("job:"))
  end

  def test_leases_and_flags_under_a_prefix_sorted_by_key
    other = backend.owner
    started = Time.now.to_f
    assert other.acquire("job:b", ttl: 5)
    hold = locks.hold("job:a", ttl: 5, heartbeat: 0.5, label: "report 7")
    assert locks.acquire("mail", ttl: 5)
    other.set_flag("job:stop", ttl: 30)
    locks.set_flag("mail:stop")

    listing = locks.list("job:")
    assert_equal %i[leases flags waiting], listing.keys
    assert_equal %w[job:a job:b], listing[:leases].map { |l| l[:key] }
    assert_equal(%w[job:a job:b].map { |k| steady(locks.info(k)) }, listing[:leases].map { |l| steady(l) })
    listing[:leases].each { |l| renewed_within(l, started) }
    a = listing[:leases][0]
    assert_equal "report 7", a[:holder]
    assert_equal hold.fence, a[:fence]
    assert_equal 5.0, a[:ttl]
    assert_equal 0.5, a[:heartbeat]
    assert_equal 1, a[:limit]
    assert_operator a[:time_left], :<=, 5
    assert_equal [{ key: "job:stop" }], listing[:flags].map { |f| f.except(:time_left) }
    assert_operator listing[:flags][0][:time_left], :<=, 30
    assert_operator listing[:flags][0][:time_left], :>, 20

    everything = locks.list
    assert_equal %w[job:a job:b mail], everything[:leases].map { |l| l[:key] }
    assert_equal %w[job:stop mail:stop], everything[:flags].map { |f| f[:key] }
    assert_equal everything.transform_values { |v| v.map { |x| x[:key] } },
                 other.list("").transform_values { |v| v.map { |x| x[:key] } }, "every owner sees the same"

    hold.release
    locks.clear_flag("mail:stop")
    assert_equal %w[job:b mail], locks.list[:leases].map { |l| l[:key] }
    assert_equal %w[job:stop], locks.list[:flags].map { |f| f[:key] }
  end

  def test_a_waiting_line_is_listed_until_it_has_the_lease
    waiter = backend.owner
    assert locks.acquire("wait:job", ttl: 30)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    thread = Thread.new { waiter.acquire("wait:job", ttl: 30, wait: 60) }
    deadline = started + 20
    waiting = []
    loop do
      waiting = locks.list("wait:")[:waiting]
      break unless waiting.empty?
      flunk "the waiter never showed" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.02
    end
    assert_equal [{ key: "wait:job", lines: 1 }], waiting.map { |w| w.except(:oldest_wait) }
    assert_operator waiting[0][:oldest_wait], :>=, 0
    assert_operator waiting[0][:oldest_wait], :<=, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started + 0.002
    assert locks.release("wait:job")
    assert_equal true, thread.join(60)&.value
    assert_equal [], locks.list("wait:")[:waiting]
    assert waiter.release("wait:job")
  end

  def test_a_symbol_prefix_and_a_prefix_that_matches_nothing
    assert locks.acquire("job:a", ttl: 5)
    assert_equal %w[job:a], locks.list(:"job:")[:leases].map { |l| l[:key] }
    assert_equal({ leases: [], flags: [], waiting: [] }, locks.list("nobody"))
  end

  def test_an_n_holder_lease_lists_each_holder
    assert locks.acquire("pool", ttl: 5, limit: 2)
    assert backend.owner.acquire("pool", ttl: 5, limit: 2)
    pool = locks.list("pool")[:leases]
    assert_equal 1, pool.size
    assert_equal 2, pool[0][:limit]
    assert_nil pool[0][:holder], "an N-holder lease has no single holder"
    assert_equal 2, pool[0][:holders].size
    assert_equal pool[0][:holders].map { |h| h[:fence] }.sort, pool[0][:holders].map { |h| h[:fence] }
  end

  def test_an_expired_lease_is_not_listed
    assert locks.acquire("short", ttl: 0.1)
    sleep 0.25
    assert_equal [], locks.list[:leases]
  end

  def test_bad_prefixes_are_clear_errors
    e = assert_raises(TypeError) { locks.list(7) }
    assert_includes e.message, "prefix must be a String or Symbol"
    assert_raises(TypeError) { locks.list(nil) }
    assert_raises(ArgumentError) { locks.list("job", "extra") }
    assert_raises(ArgumentError) { locks.list("\xff".dup.force_encoding("UTF-8")) }
  end
end

Backends.parametrize(ListCases, "ListTest")

# On Redis a listing is one namespace's: another namespace's keys stay out.
class RedisListNamespaceTest < Minitest::Test
  def test_a_listing_is_one_namespaces
    ours = MistriLocks::Redis.new(url: TestRedis.url, namespace: "mistri:test:#{SecureRandom.hex(6)}")
    theirs = MistriLocks::Redis.new(url: TestRedis.url, namespace: "mistri:test:#{SecureRandom.hex(6)}")
    assert theirs.acquire("job:x", ttl: 5)
    theirs.set_flag("job:stop", ttl: 5)
    assert ours.acquire("job:y", ttl: 5)
    assert_equal %w[job:y], ours.list[:leases].map { |l| l[:key] }
    assert_equal [], ours.list[:flags]
  end
end
