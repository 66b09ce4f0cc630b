# frozen_string_literal: true

# MistriLocks.configure(locks): the process-wide handle, by the name the
# Python and C faces use (configure / mistri_configure); MistriLocks.locks=
# (the mistri gem's Mistri.locks = ...) is the same method.

require_relative "test_helper"

class ConfigureTest < Minitest::Test
  def teardown
    MistriLocks.configure(nil)
  end

  def test_configure_sets_the_handle_holds_use
    locks = MistriLocks::Memory.new
    assert_same locks, MistriLocks.configure(locks)
    assert_same locks, MistriLocks.locks
    fence = MistriLocks.hold("job", ttl: 5, heartbeat: 0.5) do |hold|
      assert locks.held?("job")
      assert_equal 1, locks.active_holds
      assert_equal 1, locks.stats[:holds_active]
      hold.fence
    end
    assert_kind_of Integer, fence
    refute locks.held?("job")
    assert_equal 0, locks.active_holds
  end

  def test_configure_nil_clears_it
    MistriLocks.configure(MistriLocks::Memory.new)
    assert_nil MistriLocks.configure(nil)
    assert_nil MistriLocks.locks
    assert_nil MistriLocks.hold("job", ttl: 5, heartbeat: 0.5)
  end

  def test_locks_assignment_is_the_same_as_configure
    locks = MistriLocks::Memory.new
    MistriLocks.locks = locks
    assert_same locks, MistriLocks.locks
    assert_equal :configure, MistriLocks.method(:locks=).original_name
    MistriLocks.configure(nil)
    assert_nil MistriLocks.locks
  end

  def test_configure_takes_a_handle_or_nil
    e = assert_raises(TypeError) { MistriLocks.configure("redis://127.0.0.1") }
    assert_includes e.message, "MistriLocks::Locks"
    assert_raises(TypeError) { MistriLocks.locks = Object.new }
    assert_raises(ArgumentError) { MistriLocks.configure }
    assert_nil MistriLocks.locks
  end

  def test_every_face_offers_the_same_handle_methods
    locks = MistriLocks::Memory.new
    %i[acquire renew release held? set_flag flag? clear_flag fence break_lease info list hold
       new_owner active_holds stats on_event remove_event_hook label label=].each do |name|
      assert_respond_to locks, name
    end
    %i[release release_outcome lost? fence key touch signal].each do |name|
      assert MistriLocks::Hold.method_defined?(name), "Hold##{name}"
    end
    %i[configure locks locks= hold].each { |name| assert_respond_to MistriLocks, name }
  end
end
