# frozen_string_literal: true

require_relative "test_helper"

# Keys reach the core as UTF-8 text whatever their Ruby encoding. Memory
# borrows a key's bytes when Ruby already knows they are ASCII (a flag
# check, no copy); every other string goes through the checked path.
class KeyTextTest < Minitest::Test
  def setup
    @locks = MistriLocks::Memory.new
  end

  def pair(key, same)
    assert @locks.acquire(key, ttl: 30), "acquire #{key.inspect}"
    assert @locks.held?(same), "#{same.inspect} names #{key.inspect}'s lease"
    refute @locks.new_owner.acquire(same, ttl: 30)
    assert @locks.release(same), "release #{same.inspect}"
    refute @locks.held?(key)
  end

  def test_ascii_keys_in_any_ascii_encoding_name_the_same_lease
    utf8 = +"job-1"
    utf8.ascii_only? # Ruby now knows (caches) that it is ASCII
    pair(utf8, "job-1".b)
    pair("job-1".encode("US-ASCII"), :"job-1")
    pair("job-1".b, String.new("job-1", encoding: "ISO-8859-1"))
  end

  def test_non_ascii_keys_are_converted_to_utf8
    pair("clé", "clé".encode("ISO-8859-1"))
    pair("ключ", "ключ".encode("UTF-16LE").encode("UTF-8"))
  end

  def test_a_key_changed_in_place_is_read_again
    key = +"job"
    assert key.ascii_only?
    assert @locks.acquire(key, ttl: 30)
    key << "é" # no longer ASCII: the cached code range is dropped
    refute @locks.held?(key)
    assert @locks.acquire(key, ttl: 30)
    assert @locks.held?("jobé")
    assert @locks.release("job")
    assert @locks.release(key)
  end

  def test_bad_keys_are_errors
    assert_raises(ArgumentError) { @locks.acquire("\xff".b, ttl: 30) }
    assert_raises(ArgumentError) { @locks.acquire("\xffjob".dup.force_encoding("UTF-8"), ttl: 30) }
    assert_raises(ArgumentError) { @locks.release("") }
    assert_raises(TypeError) { @locks.release(42) }
  end
end
