# frozen_string_literal: true

# MistriLocks::Sidekiq::ServerMiddleware on plain Sidekiq jobs (no
# ActiveJob): a real `sidekiq` process (Debian's ruby-sidekiq 6.4,
# concurrency 5) against the throwaway redis-server, with the Local
# backend (a database file both processes open) holding the leases, and
# Postgres for one stop.
# Run in a process of its own (bindings/ruby/test.sh).

require_relative "test_helper"
require_relative "scripts/job_support"
require "mistri_locks/integrations/sidekiq"

class SidekiqMiddlewareTest < Minitest::Test
  TTL = JobTiming::TTL
  TICK = JobTiming::TICK

  def setup
    @backend = JobBackend.local
    @queue = "sk-#{SecureRandom.hex(4)}"
    @witness = File.join(TestLocal.dir, "witness-#{SecureRandom.hex(4)}")
  end

  # No two performers overlap: "+" (after acquire) and "-" (before release)
  # lines never nest.
  def assert_serial(lines)
    running = 0
    lines.each do |mark, jid, _, _|
      running += 1 if mark == "+"
      running -= 1 if %w[- x].include?(mark)
      assert_operator running, :<=, 1, "two performers at once (#{jid}):\n#{lines.map { |l| l.join(" ") }.join("\n")}"
    end
  end

  def test_ten_jobs_of_one_key_never_overlap_and_all_complete_with_retry
    n = 10
    run = 3 * TTL
    SidekiqProcess.run(queue: @queue, **@backend.except(:handle)) do
      jids = Array.new(n) { Sidekiq::Client.push("class" => SidekiqSerialJob, "queue" => @queue, "args" => ["k", @witness, run]) }
      # Each hand-off: the retry's backoff (ttl/2) plus two scheduler polls
      # (0.1 s) and a tick; each run 3 × ttl.
      bound = n * (run + (TTL / 2) + 0.2 + TICK) + TTL
      lines = wait_witness(@witness, bound, "ten jobs done") { |l| l.count { |m, *| m == "-" } == n }
      assert_serial(lines)
      assert_equal jids.sort, lines.select { |m, *| m == "-" }.map { |l| l[1] }.sort, "each job once"
      # A run may be lost (on a busy machine, a slow first acquire leaves
      # little of the ttl): it stops at its checkpoint ("x") and is retried.
      # Every run ends, one way or the other.
      assert_equal lines.count { |m, *| m == "+" }, lines.count { |m, *| %w[- x].include?(m) }, "every run ended"
    end
  end

  def test_stop_by_jid_interrupts_a_plain_sidekiq_job_and_it_is_not_retried
    stop_by_jid
  end

  # The same on Postgres (the stop arrives by LISTEN/NOTIFY, the tick the floor).
  def test_stop_by_jid_on_postgres
    @backend = JobBackend.postgres
    stop_by_jid
  end

  def stop_by_jid
    SidekiqProcess.run(queue: @queue, **@backend.except(:handle)) do
      jid = Sidekiq::Client.push("class" => SidekiqSerialJob, "queue" => @queue, "args" => ["stop", @witness, 60])
      wait_witness(@witness, SidekiqProcess::BOOT_BOUND, "job started") { |l| l.any? { |m, *| m == "+" } }
      stopped_at = Witness.now
      assert MistriLocks::Job.stop(jid, locks: @backend[:handle])
      lines = wait_witness(@witness, TICK + 0.5, "stopped") { |l| l.any? { |m, *| m == "x" } }
      x = lines.find { |m, *| m == "x" }
      assert_equal [jid, "stopped"], x[1, 2]
      assert_operator x[3] - stopped_at, :<=, TICK + 0.5, "within a tick plus the I/O"
      # A retry would come after backoff (ttl/2) and a poll.
      sleep TTL + 0.3
      assert_equal 1, Witness.read(@witness).count { |m, *| m == "+" }, "a stopped job is not retried"
      refute @backend[:handle].held?("sk:stop"), "the lease was released"
      assert @backend[:handle].flag?(MistriLocks::Job.stop_key(jid)), "the flag stays up for its ttl"
    end
  end

  def test_bad_mistri_lease_is_refused_when_the_class_loads
    job = Class.new { include Sidekiq::Worker }
    e = assert_raises(ArgumentError) { job.sidekiq_options(mistri_lease: { key: "k", tll: 3 }) }
    assert_match(/unknown lease option :tll/, e.message)
    # Finding 8's hole is not here: a job watches job:<jid>:stop, and a
    # stop_key option is refused, not ignored.
    e = assert_raises(ArgumentError) { job.sidekiq_options(mistri_lease: { key: "k", stop_key: "k:halt" }) }
    assert_match(/unknown lease option :stop_key/, e.message)
    e = assert_raises(ArgumentError) { job.sidekiq_options(mistri_lease: { key: ->(a, b) { "#{a}#{b}" } }) }
    assert_match(/one argument \(the job's args Array\)/, e.message)
    e = assert_raises(ArgumentError) { job.sidekiq_options(mistri_lease: { key: "k", ttl: 0 }) }
    assert_match(/ttl must be a finite number of seconds > 0/, e.message) # the core's words
    e = assert_raises(ArgumentError) { job.sidekiq_options(mistri_lease: { key: "k", on_conflict: :skip }) }
    assert_match(/on_conflict must be one of :retry, :discard, :raise/, e.message)
    job.sidekiq_options(mistri_lease: { key: ->(args) { "ok:#{args[0]}" } }, queue: "q")
    assert_equal "q", job.get_sidekiq_options["queue"]
    refute job.get_sidekiq_options.key?("mistri_lease"), "the options stay out of the job payload"
    assert_equal "ok:1", job.mistri_lease.key_for([1])
    base = Class.new do
      include Sidekiq::Worker
      def self.name = "BaseWorker"
    end
    base.sidekiq_options(mistri_lease: { ttl: 9 })
    child = Class.new(base) { def self.name = "ChildWorker" }
    assert_equal ["ChildWorker", 9], [child.mistri_lease.key_for([]), child.mistri_lease.ttl], "inherited, its own default key"
    assert_nil Class.new { include Sidekiq::Worker }.mistri_lease, "no mistri_lease: the middleware passes it through"
  end

  def test_a_raising_key_lambda_fails_that_job_not_the_worker
    job = Class.new do
      include Sidekiq::Worker
      sidekiq_options mistri_lease: { key: ->(args) { raise KeyError, "no account #{args[0]}" } }
    end
    middleware = MistriLocks::Sidekiq::ServerMiddleware.new
    MistriLocks.locks = @backend[:handle]
    ran = false
    assert_raises(KeyError) { middleware.call(job.new, { "jid" => "j1", "class" => "X", "args" => [7] }, "q") { ran = true } }
    refute ran
    # A job class without mistri_lease passes through.
    plain = Class.new { include Sidekiq::Worker }
    assert_equal :ok, middleware.call(plain.new, { "jid" => "j2", "args" => [] }, "q") { :ok }
  ensure
    MistriLocks.locks = nil
  end

  # Finding 6 (the Ruby side): the lease backend refuses connections when
  # the job starts. The job fails with MistriLocks::ConnectionError and a
  # warning in Sidekiq's log, lands in the retry set with that error, and
  # runs once a redis-server listens again.
  def test_a_backend_down_at_start_puts_the_job_in_the_retry_set_and_it_runs_on_retry
    probe = TCPServer.new("127.0.0.1", 0)
    port = probe.addr[1]
    probe.close
    server = nil
    SidekiqProcess.run(queue: @queue, **@backend.except(:handle),
                       env: { "MISTRI_JOB_DOWN_URL" => "redis://127.0.0.1:#{port}/0" }) do |worker|
      jid = Sidekiq::Client.push("class" => SidekiqDownJob, "queue" => @queue, "args" => ["a", @witness])
      require "sidekiq/api"
      entry = nil
      deadline = Clock.now + SidekiqProcess::BOOT_BOUND
      until (entry = Sidekiq::RetrySet.new.find_job(jid))
        raise Minitest::Assertion, "not in the retry set:\n#{File.read(worker.log)}" if Clock.now > deadline

        sleep 0.05
      end
      assert_equal "MistriLocks::ConnectionError", entry["error_class"]
      assert_match(/cannot reach Redis/, entry["error_message"])
      assert_match(/WARN.*lease backend is unreachable at start/, File.read(worker.log))
      assert_empty Witness.read(@witness), "it did not run without its lease"
      server = spawn("redis-server", "--port", port.to_s, "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", out: File::NULL, err: File::NULL)
      up = Witness.now
      # Sidekiq's retry: sidekiq_retry_in (1 s) + rand(10) × (count + 1)
      # s of jitter, found by the scheduler's poll (0.1 s).
      lines = wait_witness(@witness, 1 + 9 + 0.1 + 1, "ran on retry") { |l| l.any? { |m, *| m == "+" } }
      assert_equal 1, lines.size, lines.inspect
      mark, ran_jid, fence, at = lines[0]
      assert_equal ["+", jid], [mark, ran_jid]
      assert_operator Integer(fence), :>, 0
      assert_operator at, :>=, up
      assert_nil Sidekiq::RetrySet.new.find_job(jid), "out of the retry set"
    end
  ensure
    if server
      Process.kill("TERM", server)
      Process.wait(server)
    end
  end
end
