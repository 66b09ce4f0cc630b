# frozen_string_literal: true

# The Cluster and Sentinel URL forms reach Ruby through the core's one URL
# dispatcher (the full suites run in core/tests/scale_out.rs).
require_relative "test_helper"

class ScaleOutTest < Minitest::Test
  def test_cluster_and_sentinel_urls_are_accepted
    cluster = MistriLocks::Redis.new(url: "redis+cluster://127.0.0.1:1,127.0.0.1:2")
    error = assert_raises(MistriLocks::ConnectionError) { cluster.held?("job") }
    assert_match(/CLUSTER SLOTS/, error.message)
    sentinel = MistriLocks::Redis.new(url: "redis+sentinel://127.0.0.1:1/mymaster/0")
    error = assert_raises(MistriLocks::ConnectionError) { sentinel.held?("job") }
    assert_match(/sentinel/, error.message)
  end

  def test_bad_scale_out_urls_are_config_errors
    assert_raises(MistriLocks::ConfigError) { MistriLocks::Redis.new(url: "redis+sentinel://127.0.0.1:1") }
  end
end
