# frozen_string_literal: true

# include MistriLocks::Job on Debian's ActiveJob 6.1.
#
# With a real `sidekiq` process (Debian's ruby-sidekiq 6.4, concurrency 5,
# ActiveJob's Sidekiq adapter) against the throwaway redis-server, leases on
# Redis: ten jobs of one key (wait: and :retry), kill -9 of the worker, stop
# by job id from this process, from Python and from the CLI, a lease broken
# with `mistri-locks break`.
#
# In this process (perform_now; ActiveJob's :test adapter records what
# retry_job enqueues): a stale fence refused by fence_check in the job's
# ActiveRecord transaction on Postgres, :discard, :raise, :retry's
# attempts, limit: 2, bad input, events, stop_holder, and ActiveJob::Continuable.
#
# ActiveJob::Continuable does not exist in Rails 6.1. The module below is a
# stand-in that follows Rails 8.1's documented contract as far as
# MistriLocks::Job uses it: `step(name) { |step| ... }` with a cursor
# (step.cursor, step.advance!), checkpoint! between steps and step.checkpoint!
# inside them, which interrupts the job (interrupt!(reason:), raising
# ActiveJob::Continuation::Interrupt) when `queue_adapter.stopping?` says so;
# an interrupted job is enqueued again (retry_job, resume_options) with its
# progress in the payload ("continuation") and resumes from its cursor.
#
# Run in a process of its own (bindings/ruby/test.sh): ActiveJob, Sidekiq
# and ActiveRecord stay out of the main suite's heap.

require_relative "test_helper"
require "logger"
require "active_record"
require "mistri_locks/integrations/active_job"

# --- the Continuable stand-in (see above) --------------------------------
module ActiveJob
  class Continuation
    class Interrupt < StandardError; end

    # One step's cursor.
    class Step
      attr_reader :cursor

      def initialize(job, cursor)
        @job = job
        @cursor = cursor
      end

      def advance!(from: nil)
        @cursor = (from || @cursor || 0) + 1
        @job.continuation["cursor"] = @cursor
      end

      def checkpoint! = @job.checkpoint!
    end
  end

  module Continuable
    def self.included(base)
      base.prepend(Resume)
    end

    # Rails resumes after `resume_options` (default wait: 5 s); 0 here.
    module Resume
      def perform(*args)
        super
      rescue ActiveJob::Continuation::Interrupt
        retry_job(wait: 0)
      end
    end

    def continuation = (@continuation ||= { "completed" => [], "cursor" => nil })

    def step(name)
      return if continuation["completed"].include?(name.to_s)

      checkpoint! unless continuation["completed"].empty? # between steps
      yield ActiveJob::Continuation::Step.new(self, continuation["cursor"])
      continuation["completed"] << name.to_s
      continuation["cursor"] = nil
    end

    def checkpoint!
      interrupt!(reason: :stopping) if queue_adapter.respond_to?(:stopping?) && queue_adapter.stopping?
    end

    def interrupt!(reason:)
      @interrupted_because = reason
      raise ActiveJob::Continuation::Interrupt, "Interrupted (#{reason})"
    end

    def serialize = super.merge("continuation" => continuation)

    def deserialize(job_data)
      super
      @continuation = job_data["continuation"]
    end
  end
end

require_relative "scripts/job_support"

# ------------------------------------------------------------ real Sidekiq
class JobSidekiqTest < Minitest::Test
  TTL = JobTiming::TTL
  TICK = JobTiming::TICK

  def setup
    @backend = JobBackend.redis
    @locks = @backend[:handle]
    @queue = "aj-#{SecureRandom.hex(4)}"
    @witness = File.join(TestLocal.dir, "witness-#{SecureRandom.hex(4)}")
  end

  def show(lines) = lines.map { |l| l.join(" ") }.join("\n")

  def assert_serial(lines)
    running = 0
    lines.each do |mark, _jid, _, _|
      running += 1 if mark == "+"
      running -= 1 if %w[- x].include?(mark)
      assert_operator running, :<=, 1, "two performers at once:\n#{show(lines)}"
    end
  end

  def ten_of_one_key(job, handoff)
    n = 10
    run = 3 * TTL
    SidekiqProcess.run(queue: @queue, **@backend.except(:handle)) do
      ids = Array.new(n) { job.set(queue: @queue).perform_later("t", @witness, run).job_id }
      lines = wait_witness(@witness, n * (run + handoff) + TTL, "ten jobs done") { |l| l.count { |m, *| m == "-" } == n }
      assert_serial(lines)
      assert_equal ids.sort, lines.select { |m, *| m == "-" }.map { |l| l[1] }.sort, "all ten complete, each once"
      # A lost run (a slow acquire on a busy machine leaves little of the
      # ttl) stops at its checkpoint ("x") and is retried: every run ends.
      assert_equal lines.count { |m, *| m == "+" }, lines.count { |m, *| %w[- x].include?(m) }, show(lines)
    end
  end

  # The line hands over on release (pushed) or within a tick (polled).
  def test_ten_jobs_of_one_key_with_wait_never_overlap_and_all_complete
    ten_of_one_key(WaitingSerialJob, TICK + 0.1)
  end

  # A conflict re-enqueues after backoff (ttl/2); the scheduler polls every 0.1 s.
  def test_ten_jobs_of_one_key_with_retry_never_overlap_and_all_complete
    ten_of_one_key(RetryingSerialJob, (TTL / 2) + 0.2 + TICK)
  end

  def test_kill_9_mid_perform_frees_the_key_for_the_next_job_within_ttl_and_a_tick
    ttl = 1.0
    heartbeat = 0.25
    env = { "JOB_TTL" => ttl.to_s, "JOB_HEARTBEAT" => heartbeat.to_s }
    backend = @backend.except(:handle)
    SidekiqProcess.run(queue: "#{@queue}-next", env: env, **backend) do
      doomed = SidekiqProcess.new(queue: "#{@queue}-doomed", env: env, **backend)
      begin
        LongJob.set(queue: "#{@queue}-doomed").perform_later("k9", @witness, 60)
        wait_witness(@witness, SidekiqProcess::BOOT_BOUND, "the doomed job started") { |l| l.any? { |m, *| m == "+" } }
        NextJob.set(queue: "#{@queue}-next").perform_later("k9", @witness, 0)
        # NextJob's before_perform writes "w" just before it joins the lease's line.
        wait_witness(@witness, SidekiqProcess::BOOT_BOUND, "the next job waits") { |l| l.any? { |m, *| m == "w" } }
        sleep heartbeat # it is in the line now
        killed_at = Witness.now
        doomed.kill9
      ensure
        doomed.stop
      end
      lines = wait_witness(@witness, ttl + (2 * heartbeat) + 1, "the next job ran") { |l| l.count { |m, *| m == "+" } == 2 }
      started = lines.select { |m, *| m == "+" }.last[3]
      assert_operator started - killed_at, :<=, ttl + (2 * heartbeat),
                      "the next job performs within ttl + a tick of the kill (a second tick: its witness write):\n#{show(lines)}"
      assert_operator started, :>, killed_at
      refute(lines.any? { |m, jid, *| m == "-" && jid == lines.first[1] }, "the killed job never ended")
    end
  end

  def run_python_stop(jid)
    root = File.expand_path("../../..", __dir__)
    venv = File.join(root, "bindings/python/.venv/bin/python")
    python = File.executable?(venv) ? venv : "python3"
    lib = File.join(ENV["CARGO_TARGET_DIR"] || File.join(root, "target"), "debug", "libmistri_locks.so")
    out = IO.popen({ "MISTRI_LOCKS_LIB" => lib }, [python, File.join(Subprocess::SCRIPTS, "job_stop.py"),
                                                    @backend[:url], @backend[:namespace], jid], err: %i[child out], &:read)
    assert $?.success?, "job_stop.py: #{out}"
    # With the venv bindings/python/test.sh builds (scripts/test runs it
    # first), the stop goes through the Python extension itself.
    assert_equal "Python extension", out.strip if python == venv
    out.strip
  end

  def test_stop_by_job_id_from_ruby_python_and_the_cli_interrupts_and_is_not_retried
    SidekiqProcess.run(queue: @queue, **@backend.except(:handle)) do
      jobs = %w[ruby python cli].to_h { |via| [via, LongJob.set(queue: @queue).perform_later(via, @witness, 60).job_id] }
      wait_witness(@witness, SidekiqProcess::BOOT_BOUND, "three jobs started") { |l| l.count { |m, *| m == "+" } == 3 }
      stops = {}
      assert MistriLocks::Job.stop(jobs["ruby"], locks: @locks)
      stops["ruby"] = Witness.now
      used = run_python_stop(jobs["python"])
      stops["python"] = Witness.now
      cli = [cli_path, "stop", MistriLocks::Job.stop_key(jobs["cli"]), "--url", @backend[:url], "--namespace", @backend[:namespace]]
      out = IO.popen(cli, err: %i[child out], &:read)
      assert $?.success?, "mistri-locks stop: #{out}"
      stops["cli"] = Witness.now
      lines = wait_witness(@witness, TICK + 1, "three stops") { |l| l.count { |m, *| m == "x" } == 3 }
      jobs.each do |via, jid|
        x = lines.find { |m, id, *| m == "x" && id == jid }
        assert_equal "stopped", x[2], "#{via}: Interrupted(:stopped)"
        # One tick of the hold's poll (a push is faster), plus the push's
        # round trips: the time is taken when the stop has returned.
        assert_operator x[3] - stops[via], :<=, TICK + 0.5, "#{via} (#{used if via == "python"}): within a tick"
      end
      sleep TTL + 0.3 # a retry would run after backoff (ttl/2) and a poll
      assert_equal 3, Witness.read(@witness).count { |m, *| m == "+" }, "not retried"
      %w[ruby python cli].each { |via| refute @locks.held?("long:#{via}"), "#{via}: released" }
    end
  end

  def test_a_lease_broken_with_the_cli_interrupts_as_lost_and_the_job_is_retried
    SidekiqProcess.run(queue: @queue, **@backend.except(:handle)) do
      jid = LongJob.set(queue: @queue).perform_later("lost", @witness, 60).job_id
      wait_witness(@witness, SidekiqProcess::BOOT_BOUND, "started") { |l| l.any? { |m, *| m == "+" } }
      out = IO.popen([cli_path, "break", "long:lost", "--yes", "--url", @backend[:url], "--namespace", @backend[:namespace]],
                     err: %i[child out], &:read)
      assert $?.success?, "mistri-locks break: #{out}"
      # Lost at the next renewal (a heartbeat); retried after backoff (ttl/2) and a poll.
      lines = wait_witness(@witness, TICK + (TTL / 2) + 0.2 + TICK + 1, "retried") { |l| l.count { |m, *| m == "+" } == 2 }
      assert_equal [jid, "lost"], lines.find { |m, *| m == "x" }[1, 2], show(lines)
      assert_equal [jid, jid], lines.select { |m, *| m == "+" }.map { |l| l[1] }, "the same job, retried"
      MistriLocks::Job.stop(jid, locks: @locks) # end the retried run
      wait_witness(@witness, TICK + 1, "stopped") { |l| l.count { |m, *| m == "x" } == 2 }
    end
  end
end

# ----------------------------------------------------------- in this process
class JobInProcessTest < Minitest::Test
  TTL = 2
  HEARTBEAT = 0.1

  class Recorded < ActiveJob::Base
    include MistriLocks::Job
    self.queue_adapter = :test
    holds_lease key: ->(id) { "rec:#{id}" }, ttl: 2, heartbeat: 0.1, on_conflict: :discard
    class << self
      attr_accessor :ran
    end

    def perform(_id)
      self.class.ran << lease.fence
    end
  end

  def setup
    @locks = Backends::Local.new.locks
    MistriLocks.locks = @locks
    @other = @locks.new_owner
    Recorded.ran = []
    @log = StringIO.new
    ActiveJob::Base.logger = Logger.new(@log)
    @events = []
    @subscriber = ActiveSupport::Notifications.subscribe(MistriLocks::Job::EVENT) { |*a| @events << a.last }
  end

  def teardown
    ActiveSupport::Notifications.unsubscribe(@subscriber)
    ActiveJob::Base.logger = Logger.new(nil)
    MistriLocks.locks = nil
  end

  def job_class(base = ActiveJob::Base, &block)
    Class.new(base) do
      include MistriLocks::Job
      self.queue_adapter = :test
      def self.name = "TestJob"
      class_eval(&block) if block
    end
  end

  def test_the_lease_is_held_for_perform_only_and_events_are_emitted
    job = job_class do
      holds_lease key: ->(id) { "only:#{id}" }, ttl: TTL, heartbeat: HEARTBEAT
      def perform(_id) = (@seen = [lease.class, MistriLocks.locks.held?("only:1"), lease.key])
      attr_reader :seen
    end
    j = job.new(1)
    refute @locks.held?("only:1")
    j.perform_now
    assert_equal [MistriLocks::Hold, true, "only:1"], j.seen
    refute @locks.held?("only:1"), "released after perform"
    assert_nil j.lease
    assert_equal %i[acquired released], @events.map { |e| e[:event] }
    assert_equal({ key: "only:1", job_id: j.job_id, job_class: "TestJob" }, @events[0].slice(:key, :job_id, :job_class))
    assert_equal :released, @events[1][:outcome]
  end

  # The lease starts in one native call (MistriLocks._job_hold) with the
  # hold options the class built once: its holder is the handle's label and
  # the job's class, and it carries the job's stop key, as before.
  def test_the_lease_names_the_label_the_class_and_the_stop_key
    job = job_class do
      holds_lease key: ->(id) { "who:#{id}" }, ttl: TTL, heartbeat: HEARTBEAT
      def perform(id) = (@info = MistriLocks.locks.info("who:#{id}"))
      attr_reader :info
    end
    options = job.mistri_lease.hold_options
    assert_instance_of MistriLocks::JobHoldOptions, options
    label = @locks.label
    @locks.label = "web-7"
    begin
      j = job.new(1).tap(&:perform_now)
      k = job.new(2).tap(&:perform_now)
    ensure
      @locks.label = label
    end
    assert_equal ["web-7 TestJob", MistriLocks::Job.stop_key(j.job_id)], j.info.values_at(:holder, :stop_key)
    assert_equal MistriLocks::Job.stop_key(k.job_id), k.info[:stop_key]
    assert_same options, job.mistri_lease.hold_options, "built once, when the class declared its lease"
    assert_equal 2, @events.count { |e| e[:event] == :released }
  end

  # ActiveJob leases on MySQL (issue 41), on a throwaway MariaDB: the lease
  # is held in the database for perform (another connection sees it and its
  # fence), released after, and a job whose key another process holds there
  # is discarded.
  def test_a_job_holds_its_lease_on_mysql
    mysql = Backends::Mysql.new
    MistriLocks.locks = mysql.locks
    other = mysql.owner
    job = job_class do
      holds_lease key: ->(id) { "my:#{id}" }, ttl: TTL, heartbeat: HEARTBEAT, on_conflict: :discard
      class << self
        attr_accessor :other, :seen
      end
      def perform(id) = (self.class.seen << [self.class.other.held?("my:#{id}"), lease.fence])
    end
    job.other = other
    job.seen = []
    job.perform_now(1)
    held, fence = job.seen.fetch(0)
    assert held, "another connection sees the lease during perform"
    assert_operator fence, :>, 0
    refute other.held?("my:1"), "released after perform"
    assert other.acquire("my:1", ttl: 5)
    job.perform_now(1)
    assert_equal 1, job.seen.size, "discarded while held elsewhere"
    assert_match(/discarded .* held elsewhere/, @log.string)
    assert other.release("my:1")
  end

  def test_require_mistri_locks_loads_neither_activejob_nor_sidekiq
    script = 'require "mistri_locks"; a = [defined?(ActiveJob), defined?(::Sidekiq)]; ' \
             'MistriLocks::Job.stop_key("x"); b = [defined?(ActiveJob), defined?(::Sidekiq)]; ' \
             'require "mistri_locks/integrations/sidekiq"; print [a, b, defined?(::Sidekiq::Worker)].inspect'
    out = IO.popen([RbConfig.ruby, "-I", Subprocess::LIB, "-e", script], err: %i[child out], &:read)
    assert_equal '[[nil, nil], [nil, nil], "constant"]', out, "Job loads neither; the Sidekiq integration loads Sidekiq"
  end

  def test_a_subclass_inherits_the_options_with_its_own_default_key
    base = job_class { holds_lease ttl: 7, heartbeat: 1 }
    report = Class.new(base) { def self.name = "ReportJob" }
    mail = Class.new(base) { def self.name = "MailJob" }
    assert_equal "ReportJob", report.mistri_lease.key_for([])
    assert_equal "MailJob", mail.mistri_lease.key_for([])
    assert_equal 7, mail.mistri_lease.ttl
    plain = Class.new(job_class) { def self.name = "PlainJob" }
    assert_equal "PlainJob", plain.mistri_lease.key_for([]), "no holds_lease anywhere: the class's own name"
  end

  def test_discard_drops_the_job_and_logs_it
    assert @other.acquire("rec:7", ttl: 5)
    Recorded.perform_now(7)
    assert_empty Recorded.ran
    assert_match(/discarded .* held elsewhere/, @log.string)
    assert_equal [:conflict], @events.map { |e| e[:event] }
    assert_empty Recorded.queue_adapter.enqueued_jobs
  end

  def test_raise_raises_conflict
    job = job_class do
      holds_lease key: "fixed", ttl: TTL, heartbeat: HEARTBEAT, on_conflict: :raise
      def perform = flunk("ran without the lease")
    end
    assert @other.acquire("fixed", ttl: 5)
    e = assert_raises(MistriLocks::Job::Conflict) { job.perform_now }
    assert_equal "fixed", e.key
  end

  def test_retry_reenqueues_with_backoff_counting_attempts_then_gives_up
    job = job_class do
      holds_lease key: "busy", ttl: TTL, heartbeat: HEARTBEAT, on_conflict: :retry, attempts: 3, backoff: ->(n) { n * 10 }
      def perform = flunk("ran without the lease")
    end
    assert @other.acquire("busy", ttl: 5)
    first = job.new
    before = Time.now.to_f
    first.perform_now
    queued = job.queue_adapter.enqueued_jobs
    assert_equal 1, queued.size
    assert_in_delta before + 10, queued[0][:at], 2
    assert_equal 1, first.serialize["mistri_lease_attempts"]
    # The retried job comes back with its count: attempt 2 waits 20 s, attempt 3 gives up.
    second = job.new
    second.deserialize(first.serialize)
    second.perform_now
    assert_in_delta Time.now.to_f + 20, job.queue_adapter.enqueued_jobs.last[:at], 2
    third = job.new
    third.deserialize(second.serialize)
    e = assert_raises(MistriLocks::Job::Conflict) { third.perform_now }
    assert_equal 3, e.attempts
    assert_equal [1, 2, 3], @events.map { |ev| ev[:attempts] }
  end

  def test_wait_uses_the_leases_line
    job = job_class do
      holds_lease key: "line", ttl: TTL, heartbeat: HEARTBEAT, wait: 5, on_conflict: :raise
      def perform = (@fence = lease.fence)
      attr_reader :fence
    end
    hold = @other.hold("line", ttl: TTL, heartbeat: HEARTBEAT)
    j = job.new
    t = Thread.new { j.perform_now }
    sleep 0.3
    assert t.alive?, "waiting in the line"
    hold.release
    assert t.join(HEARTBEAT + 1), "released: the waiter takes the lease at once (pushed, or within a tick)"
    assert_operator j.fence, :>, hold.fence
  end

  def test_limit_2_lets_two_perform_at_once
    gate = Queue.new
    inside = Queue.new
    job = job_class do
      holds_lease key: "pair", ttl: TTL, heartbeat: HEARTBEAT, limit: 2, on_conflict: :discard
      define_method(:perform) do
        inside << job_id
        gate.pop
      end
    end
    threads = Array.new(2) { Thread.new { job.perform_now } }
    2.times { Timeout.timeout(5) { inside.pop } }
    third = job.new
    third.perform_now # discarded: both slots taken
    assert inside.empty?, "a third performer got in"
    assert_match(/discarded .*#{third.job_id}/, @log.string)
    2.times { gate << :go }
    threads.each(&:join)
    assert_equal 2, @events.count { |e| e[:event] == :acquired }
    gate << :go
    job.perform_now # a slot is free again
    assert_equal 3, @events.count { |e| e[:event] == :acquired }
  end

  def test_bad_input_is_refused_at_class_load
    e = assert_raises(ArgumentError) { job_class { holds_lease key: "k", tll: 3 } }
    assert_match(/unknown lease option :tll/, e.message)
    # The numbers and policies are the core's to check (JobOptions): its
    # words, with the class's name.
    e = assert_raises(ArgumentError) { job_class { holds_lease attempts: 0, backoff: -1 } }
    assert_match(/attempts must be an integer >= 1, got 0|backoff must be seconds >= 0/, e.message)
    assert_match(/heartbeat must be a finite number/, assert_raises(ArgumentError) { job_class { holds_lease heartbeat: Float::NAN } }.message)
    assert_match(/ttl must be a finite number of seconds > 0/, assert_raises(ArgumentError) { job_class { holds_lease ttl: 0 } }.message)
    assert_match(/ttl must be a finite number of seconds > 0/, assert_raises(ArgumentError) { job_class { holds_lease ttl: -1 } }.message)
    assert_match(/ttl must be a number/, assert_raises(ArgumentError) { job_class { holds_lease ttl: "60" } }.message)
    assert_match(/limit must be an integer >= 1/, assert_raises(ArgumentError) { job_class { holds_lease limit: 0 } }.message)
    assert_match(/on_conflict must be one of/, assert_raises(ArgumentError) { job_class { holds_lease on_conflict: :wait } }.message)
    # The key lambda against perform, whichever comes first.
    e = assert_raises(ArgumentError) do
      job_class do
        def perform(account_id, day) = [account_id, day]
        holds_lease key: ->(account_id) { "report:#{account_id}" }
      end
    end
    assert_match(/key lambda takes 1 argument\(s\), but perform takes 2/, e.message)
    assert_raises(ArgumentError) do
      job_class do
        holds_lease key: ->(a, b, c) { "#{a}#{b}#{c}" }
        def perform(account_id) = account_id
      end
    end
    job_class do # a lambda taking perform's optional argument too is fine
      holds_lease key: ->(id, _day = nil) { "ok:#{id}" }
      def perform(id, day = nil) = [id, day]
    end
    assert_raises(TypeError) { MistriLocks::Job.stop_key(42) }
    assert_raises(ArgumentError) { MistriLocks::Job.stop_key("") }
    assert_equal "job:abc:stop", MistriLocks::Job.stop_key("abc")
  end

  def test_a_raising_key_lambda_fails_that_job_only
    job = job_class do
      holds_lease key: ->(id) { id.zero? ? raise(KeyError, "no account 0") : "acct:#{id}" }, ttl: TTL, heartbeat: HEARTBEAT
      def perform(id) = (@done = id)
      attr_reader :done
    end
    assert_raises(KeyError) { job.perform_now(0) }
    assert_equal 5, job.new(5).tap(&:perform_now).done, "the next job runs"
  end

  def test_stop_holder_stops_whatever_job_holds_a_key
    started = Queue.new
    job = job_class do
      holds_lease key: "report:42", ttl: TTL, heartbeat: HEARTBEAT
      define_method(:perform) do
        started << true
        loop do
          lease.checkpoint!
          sleep HEARTBEAT / 4
        end
      end
    end
    j = job.new
    t = Thread.new { j.perform_now }
    Timeout.timeout(5) { started.pop }
    assert_equal [MistriLocks::Job.stop_key(j.job_id)], MistriLocks::Job.stop_holder("report:42", locks: @other)
    assert t.join(HEARTBEAT + 1), "stopped within a tick"
    assert_equal :stopped, @events.find { |e| e[:event] == :interrupted }[:reason]
    assert_match(/stopped, not retried/, @log.string)
    assert_equal [], MistriLocks::Job.stop_holder("report:42", locks: @other), "nobody holds it now"
  end

  def test_a_job_without_checkpoints_reads_the_signal
    job = job_class do
      holds_lease key: "sig", ttl: TTL, heartbeat: HEARTBEAT
      def perform
        reasons = Queue.new
        lease.signal.on_abort { |r| reasons << r }
        MistriLocks::Job.stop(job_id)
        @reason = Timeout.timeout(5) { reasons.pop }
        @stopping = stopping?
      end
      attr_reader :reason, :stopping
    end
    j = job.new.tap(&:perform_now)
    assert_match(/stop flag "job:#{j.job_id}:stop" raised/, j.reason)
    assert_equal :stopped, j.stopping
  end

  # Fencing at the resource: a stale performer's write is refused by
  # fence_check inside the job's own ActiveRecord transaction.
  class Report < ActiveRecord::Base
    self.table_name = "mistri_job_reports"
  end

  def test_a_stale_fence_is_refused_by_fence_check_in_the_jobs_transaction
    port = Integer(TestPostgres.url[%r{:(\d+)/}, 1])
    ActiveRecord::Base.establish_connection(adapter: "postgresql", host: "127.0.0.1", port: port,
                                            database: "mistri", username: "postgres")
    ActiveRecord::Base.connection.execute("CREATE TABLE IF NOT EXISTS mistri_job_reports (id bigint PRIMARY KEY, body text)")
    ns = "mistri:test:#{SecureRandom.hex(6)}"
    pg = MistriLocks::Postgres.new(url: TestPostgres.url, namespace: ns)
    MistriLocks.locks = pg
    id = rand(1 << 40)
    write = lambda do |fence, body|
      Report.transaction do
        Report.connection.select_value(Report.sanitize_sql_array(["SELECT mistri_locks.fence_check(?, ?)", "report:#{id}", fence]))
        Report.find_or_initialize_by(id: id).update!(body: body)
      end
    end
    paused = Queue.new
    resume = Queue.new
    job = job_class do
      holds_lease key: ->(rid) { "report:#{rid}" }, ttl: TTL, heartbeat: HEARTBEAT, on_lost: :discard
      define_method(:perform) do |_rid|
        write.call(lease.fence, "first")
        paused << lease.fence
        resume.pop # a pause (GC, a stuck call) without a checkpoint
        write.call(lease.fence, "stale")
      end
    end
    t = Thread.new do
      Thread.current.report_on_exception = false # its error is asserted below
      job.perform_now(id)
    end
    fence = Timeout.timeout(10) { paused.pop }
    assert pg.break_lease("report:#{id}")
    other = pg.new_owner
    assert other.acquire("report:#{id}", ttl: 5)
    assert_operator other.fence("report:#{id}"), :>, fence
    write.call(other.fence("report:#{id}"), "newer holder")
    resume << :go
    e = assert_raises(ActiveRecord::StatementInvalid) { t.value }
    assert_match(/stale fence/, e.message)
    assert_equal "newer holder", Report.find(id).body, "the stale write rolled back"
  ensure
    ActiveRecord::Base.remove_connection
  end

  # --- Continuable (the stand-in at the top of this file) ---

  def continuable_job
    job_class do
      include ActiveJob::Continuable
      holds_lease key: "steps", ttl: TTL, heartbeat: HEARTBEAT
      class << self
        attr_accessor :seen, :broken
      end

      def perform
        step(:items) do |s|
          ((s.cursor || 0)...6).each do |i|
            self.class.seen << i
            yield_to_test(i)
            s.advance!(from: i)
            s.checkpoint!
          end
        end
        step(:finish) { self.class.seen << :done }
      end

      def yield_to_test(i) = (self.class.broken.call(self, i) if self.class.broken)
    end
  end

  def test_continuable_a_lost_lease_interrupts_at_the_checkpoint_and_resumes_from_the_cursor
    job = continuable_job
    job.seen = []
    job.broken = lambda do |j, i|
      next unless i == 2

      MistriLocks.locks.new_owner.break_lease("steps")
      Timeout.timeout(5) { sleep HEARTBEAT / 4 until j.stopping? } # lost at the next renewal
    end
    first = job.new
    first.perform_now
    assert_equal [0, 1, 2], job.seen, "interrupted at the checkpoint after item 2"
    assert_equal :lost, @events.find { |e| e[:event] == :interrupted }[:reason]
    queued = job.queue_adapter.enqueued_jobs
    assert_equal 1, queued.size, "resumed the Continuable way (enqueued again)"
    job.broken = nil
    again = job.new
    again.deserialize(first.serialize)
    again.perform_now
    assert_equal [0, 1, 2, 3, 4, 5, :done], job.seen, "resumed from the cursor"
  end

  def test_continuable_a_stop_interrupts_and_is_not_resumed
    job = continuable_job
    job.seen = []
    job.broken = lambda do |j, i|
      next unless i == 1

      MistriLocks::Job.stop(j.job_id)
      Timeout.timeout(5) { sleep HEARTBEAT / 4 until j.stopping? }
    end
    job.perform_now
    assert_equal [0, 1], job.seen
    assert_empty job.queue_adapter.enqueued_jobs, "a stopped job is not resumed"
    assert_equal :stopped, @events.find { |e| e[:event] == :interrupted }[:reason]
  end
end
