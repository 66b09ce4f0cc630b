# frozen_string_literal: true

# One key grammar (issue 28 §7), the same answer on every backend: keys and
# stop keys at most 1,024 bytes, no NUL, not starting with "}". A bad one is
# an ArgumentError before anything is sent; a bad stop key is refused when
# the hold starts.

require_relative "test_helper"

module KeyGrammarCases
  def locks = backend.locks

  def test_bad_keys_and_stop_keys_are_argument_errors
    ["", "a\0b", "}x", "k" * 1025].each do |bad|
      assert_raises(ArgumentError) { locks.acquire(bad, ttl: 5) }
      assert_raises(ArgumentError) { locks.set_flag(bad, ttl: 5) }
      assert_raises(ArgumentError) { locks.hold(bad, ttl: 5, heartbeat: 1) }
      err = assert_raises(ArgumentError) { locks.hold("k", ttl: 5, heartbeat: 1, stop_key: bad) }
      assert_includes err.message, "stop_key"
    end
    refute locks.held?("k")
  end

  def test_good_keys_work_everywhere
    ["k" * 1024, "x}", "{a}b", "job 7: ü ✓"].each do |good|
      assert locks.acquire(good, ttl: 5), good
      assert locks.held?(good)
      assert locks.release(good)
    end
    hold = locks.hold("k", ttl: 5, heartbeat: 1, stop_key: "x}")
    assert_same true, hold.release
  end
end

Backends.parametrize(KeyGrammarCases, "KeyGrammarTest")
