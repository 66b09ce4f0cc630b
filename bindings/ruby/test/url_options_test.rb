# frozen_string_literal: true

# A URL option its backend does not know is an ArgumentError at open, before
# anything connects (issue 39, findings 3 and 15): the message names the
# option and the nearest known one, the password masked. The URLs point at
# closed ports, so the error cannot be a connection error.

require_relative "test_helper"
require "tmpdir"

class UrlOptionsTest < Minitest::Test
  def test_a_mistyped_redis_option_names_the_right_one
    [%w[min_replica=all min_replica], %w[minreplicas=all minreplicas], %w[MIN_REPLICAS=all MIN_REPLICAS]].each do |pair, key|
      url = "redis://admin:s3cret@127.0.0.1:1/0?#{pair}"
      want = %(unknown option "#{key}" in redis://admin:***@127.0.0.1:1/0; did you mean "min_replicas"?)
      [-> { MistriLocks.open(url) }, -> { MistriLocks::Redis.new(url: url) }].each do |opener|
        e = assert_raises(ArgumentError, url) { opener.call }
        assert_equal want, e.message
        refute_includes e.message, "s3cret"
      end
    end
  end

  def test_an_unknown_option_lists_the_known_ones
    %w[bogus=1 timeout=abc].each do |pair|
      url = "redis+cluster://127.0.0.1:1,127.0.0.1:2?#{pair}"
      e = assert_raises(ArgumentError) { MistriLocks.open(url) }
      assert_match(/unknown option "#{pair.split("=").first}"/, e.message)
      assert_match(%r{redis\+cluster:// takes: min_replicas, replica_timeout}, e.message)
    end
  end

  def test_a_bad_value_names_the_option_and_the_value
    e = assert_raises(ArgumentError) do
      MistriLocks.open("redis://127.0.0.1:1/0?min_replicas=1&replica_timeout=abc")
    end
    assert_match(/replica_timeout must be a number of seconds, got "abc"/, e.message)
  end

  def test_postgres_and_sentinel_too
    e = assert_raises(ArgumentError) do
      MistriLocks::Postgres.new(url: "postgres://u:s3cret@127.0.0.1:1/db?sslmod=require")
    end
    assert_equal 'unknown option "sslmod" in postgres://u:***@127.0.0.1:1/db; did you mean "sslmode"?', e.message
    e = assert_raises(ArgumentError) { MistriLocks.open("redis+sentinel://127.0.0.1:1/m?sentinel_pasword=s3cret") }
    assert_match(/did you mean "sentinel_password"/, e.message)
    refute_includes e.message, "s3cret"
  end

  def test_a_file_url_query_is_refused
    Dir.mktmpdir do |dir|
      url = "file://#{dir}/x.db?mode=ro"
      [-> { MistriLocks.open(url) }, -> { MistriLocks::Local.new(path: url) }].each do |opener|
        e = assert_raises(ArgumentError) { opener.call }
        assert_match(%r{unknown option "mode" in file://.*file:// takes no options}, e.message)
      end
      assert_empty Dir.children(dir)
    end
  end
end
