# frozen_string_literal: true

# A hold's keywords cross into Rust as one Hash, read by name by the core's
# HoldOptions::set (issue 40): the core holds the list of names, so an
# unknown one is an ArgumentError naming the nearest known one, and a value
# of the wrong kind is still a TypeError.

require_relative "test_helper"

class HoldOptionsByNameTest < Minitest::Test
  def setup = (@locks = MistriLocks::Memory.new)

  def test_an_unknown_option_names_the_nearest
    e = assert_raises(ArgumentError) { @locks.hold("k", ttl: 5, hearbeat: 1) }
    assert_match(/unknown hold option "hearbeat"; did you mean "heartbeat"\?/, e.message)
    e = assert_raises(ArgumentError) { MistriLocks.hold("k", stopkey: "s") }
    assert_match(/did you mean "stop_key"\?/, e.message)
    e = assert_raises(ArgumentError) { @locks.hold("k", nope: 1) }
    assert_match(/unknown hold option "nope" \(known: ttl, heartbeat, stop_key/, e.message)
    refute @locks.held?("k"), "a refused call took nothing"
  end

  def test_values_by_name_and_their_kinds
    hold = @locks.hold("k", ttl: 5, heartbeat: Rational(1, 2), stop_key: :"stop:k", label: "worker", limit: 2)
    holder = @locks.info("k")[:holders].first
    assert_equal ["stop:k", "worker", 0.5, 2], [holder[:stop_key], holder[:holder], holder[:heartbeat], @locks.info("k")[:limit]]
    hold.release
    e = assert_raises(TypeError) { @locks.hold("k", limit: 1.5) }
    assert_match(/limit must be an integer/, e.message)
    e = assert_raises(TypeError) { @locks.hold("k", label: 7) }
    assert_match(/label must be text/, e.message)
    e = assert_raises(TypeError) { @locks.hold("k", ttl: [5]) }
    assert_match(/ttl must be a number, text or nil, got Array/, e.message)
    e = assert_raises(ArgumentError) { @locks.hold("k", limit: 0) }
    assert_match(/limit/, e.message)
  end

  # The core says "wrong kind" with its own error kind (WrongType), not in
  # words the face reads: every option setter's wrong kind is a TypeError,
  # a value of the right kind out of range an ArgumentError.
  def test_a_wrong_kind_option_is_a_type_error_by_the_cores_kind
    e = assert_raises(TypeError) { @locks.hold("k", ttl: "5") }
    assert_match(/ttl must be a number of seconds/, e.message)
    assert_raises(ArgumentError) { @locks.hold("k", ttl: -1) }
    e = assert_raises(TypeError) { @locks.send(:_operator_options, { allow_actions: "yes" }) }
    assert_match(/allow_actions must be true or false/, e.message)
    e = assert_raises(TypeError) { MistriLocks::Postgres.url_from_config(host: "h", port: 5432.5) }
    assert_match(/port must be a number/, e.message)
    assert_raises(ArgumentError) { MistriLocks::Postgres.url_from_config(host: "h", port: 70_000) }
    refute @locks.held?("k"), "a refused call took nothing"
  end
end
