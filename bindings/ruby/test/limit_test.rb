# frozen_string_literal: true

# N-holder leases (limit:) through the Ruby face (issue 14).

require_relative "test_helper"

module LimitCases
  def test_up_to_limit_owners_hold_at_once
    owners = [backend.locks] + Array.new(3) { backend.owner }
    assert_equal [true, true, true, false], owners.map { |o| o.acquire("pool", ttl: 30, limit: 3) }
    assert owners[0].release("pool")
    assert owners[3].acquire("pool", ttl: 30, limit: 3)
    fences = owners[1..].map { |o| o.fence("pool") }
    assert_equal 3, fences.uniq.size
    info = backend.locks.info("pool")
    assert_equal 3, info[:limit]
    assert_nil info[:holder], "an N-holder lease lists its holders instead"
    assert_equal fences.sort, info[:holders].map { |h| h[:fence] }.sort
    assert(info[:holders].all? { |h| h[:holder] == backend.locks.label })
  end

  def test_holds_share_a_limited_lease_and_a_waiter_gets_a_freed_slot
    holds = Array.new(2) { backend.owner.hold("pool", ttl: 30, heartbeat: 1, limit: 2) }
    refute_includes holds, nil
    refute_equal holds[0].fence, holds[1].fence
    assert_nil backend.locks.hold("pool", ttl: 30, limit: 2)
    Thread.new { sleep 0.3; holds[0].release } # rubocop:disable Style/Semicolon
    t0 = Clock.now
    fence = backend.locks.hold("pool", ttl: 30, limit: 2, wait: 20, &:fence)
    refute_nil fence
    assert_operator Clock.now - t0, :>=, 0.2
    holds[1].release
  end
end

Backends.parametrize(LimitCases, "LimitTest", factories: Backends::FACTORIES.slice("Memory", "Redis"))
