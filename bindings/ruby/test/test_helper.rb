# frozen_string_literal: true

# Shared by every test file: the extension, a throwaway redis-server, a
# throwaway PostgreSQL and a throwaway MariaDB on free loopback ports (each started once, on first
# use, stopped at exit), and the backend factories the contract suite is
# parametrized over.

$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "mistri_locks"
require "minitest/autorun"
require "securerandom"
require "socket"
require "rbconfig"
require "timeout"
require "tmpdir"
require "fileutils"

module Clock
  def self.now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

# A redis-server for this test run, with a tiny RESP client for raw commands
# (to act behind the adapters' backs, as another client would).
module TestRedis
  @server = nil

  class << self
    def port
      start unless @server
      @port
    end

    def url = "redis://127.0.0.1:#{port}/0"

    def command(*args)
      TCPSocket.open("127.0.0.1", port) do |s|
        s.write("*#{args.size}\r\n" + args.map { |a| "$#{a.to_s.bytesize}\r\n#{a}\r\n" }.join)
        read_reply(s)
      end
    end

    private

    def read_reply(sock)
      line = sock.gets("\r\n").chomp("\r\n")
      case line[0]
      when "+" then line[1..]
      when ":" then Integer(line[1..])
      when "-" then raise "redis error: #{line[1..]}"
      when "$"
        n = Integer(line[1..])
        n.negative? ? nil : sock.read(n + 2)[0, n]
      when "*" then Array.new(Integer(line[1..])) { read_reply(sock) }
      else raise "unexpected reply #{line.inspect}"
      end
    end

    def start
      3.times do
        probe = TCPServer.new("127.0.0.1", 0)
        @port = probe.addr[1]
        probe.close
        pid = spawn("redis-server", "--port", @port.to_s, "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no", out: File::NULL, err: File::NULL)
        if up?
          @server = pid
          owner = Process.pid
          at_exit do
            # Forked children run at_exit too: only the starter stops it.
            next unless Process.pid == owner

            Process.kill("TERM", pid)
            Process.wait(pid)
          end
          return
        end
        Process.kill("KILL", pid) rescue nil # rubocop:disable Style/RescueModifier
        Process.wait(pid)
      end
      raise "could not start redis-server"
    end

    def up?
      deadline = Clock.now + 10
      while Clock.now < deadline
        begin
          @server = true # let #port answer while probing
          return true if command("PING") == "PONG"
        rescue SystemCallError, IOError
          sleep 0.02
        ensure
          @server = nil
        end
      end
      false
    end
  end
end

# A PostgreSQL for this test run: tests/support/throwaway_postgres.py
# (initdb as the postgres user when root, pg_ctl on a free loopback port),
# stopped and removed at exit by the process that started it.
module TestPostgres
  SCRIPT = File.expand_path("../../../tests/support/throwaway_postgres.py", __dir__)

  class << self
    def url
      start unless @url
      @url
    end

    # Runs +sql+ with psql as the superuser (in +database+); the unaligned output.
    def psql(positional = nil, sql: positional, database: "mistri")
      port = url[%r{:(\d+)/}, 1]
      out = IO.popen(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", port,
                      "-U", "postgres", "-d", database, "-c", sql], err: %i[child out], &:read)
      raise "psql failed: #{out}" unless $?.success?

      out.strip
    end

    private

    def start
      dir = File.join(Dir.tmpdir, "mistri-rb-pg-#{Process.pid}-#{SecureRandom.hex(4)}")
      url = IO.popen(["python3", SCRIPT, "start", dir], &:read).strip
      raise "could not start PostgreSQL (scripts/setup installs postgresql)" unless $?.success? && !url.empty?

      owner = Process.pid
      at_exit { system("python3", SCRIPT, "stop", dir) if Process.pid == owner }
      @url = url
    end
  end
end

# A MariaDB for this test run: tests/support/throwaway_mariadb.py
# (mariadb-install-db, mariadbd on a free loopback port, user `mistri` with a
# password), started on first use, killed and removed at exit by the process
# that started it.
module TestMariadb
  SCRIPT = File.expand_path("../../../tests/support/throwaway_mariadb.py", __dir__)

  class << self
    def url
      start unless @url
      @url
    end

    private

    def start
      dir = File.join(Dir.tmpdir, "mistri-rb-mariadb-#{Process.pid}-#{SecureRandom.hex(4)}")
      url = IO.popen(["python3", SCRIPT, "start", dir], &:read).strip
      raise "could not start MariaDB (scripts/setup installs mariadb-server)" unless $?.success? && !url.empty?

      owner = Process.pid
      at_exit { system("python3", SCRIPT, "stop", dir) if Process.pid == owner }
      @url = url
    end
  end
end

# A scratch folder for Local database files, removed at exit.
module TestLocal
  def self.dir
    @dir ||= begin
      dir = Dir.mktmpdir("mistri-rb-local")
      at_exit { FileUtils.rm_rf(dir) }
      dir
    end
  end
end

# One backend per test: fresh state, and "other owners" that behave like
# other processes.
module Backends
  class Memory
    def initialize = (@first = MistriLocks::Memory.new)
    def locks = @first
    def owner = @first.new_owner
    def delete_lease(key) = @first.break_lease(key) || raise("no lease on #{key}")
  end

  class Redis
    def initialize
      # One server per run; a fresh namespace per test keeps tests apart.
      @namespace = "mistri:test:#{SecureRandom.hex(6)}"
      @first = owner
    end

    def locks = @first
    def owner = MistriLocks::Redis.new(url: TestRedis.url, namespace: @namespace)

    def delete_lease(key)
      TestRedis.command("DEL", "#{@namespace}:lease:{#{key}}") == 1 || raise("no lease on #{key}")
    end
  end

  class Local
    def initialize
      # A fresh database file per test, in one scratch folder per run.
      @path = File.join(TestLocal.dir, "#{SecureRandom.hex(6)}.db")
      @first = owner
    end

    def locks = @first
    def owner = MistriLocks::Local.new(path: @path)
    def delete_lease(key) = owner.break_lease(key) || raise("no lease on #{key}")
  end

  class Postgres
    def initialize
      # One server per run; a fresh namespace per test keeps tests apart.
      @namespace = "mistri:test:#{SecureRandom.hex(6)}"
      @first = owner
    end

    def locks = @first
    def owner = MistriLocks::Postgres.new(url: TestPostgres.url, namespace: @namespace)
    def delete_lease(key) = owner.break_lease(key) || raise("no lease on #{key}")
  end

  class Mysql
    def initialize
      # One server per run; a fresh namespace per test keeps tests apart.
      @namespace = "mistri:test:#{SecureRandom.hex(6)}"
      @first = owner
    end

    def locks = @first
    def owner = MistriLocks.open(TestMariadb.url, namespace: @namespace)
    def delete_lease(key) = owner.break_lease(key) || raise("no lease on #{key}")
  end

  # Adding a backend is one line here.
  FACTORIES = {
    "Memory" => -> { Memory.new },
    "Redis" => -> { Redis.new },
    "Local" => -> { Local.new },
    "Postgres" => -> { Postgres.new },
    "Mysql" => -> { Mysql.new },
  }.freeze

  # Defines one Minitest class per backend, named "#{backend}#{suffix}",
  # running the tests of +mod+ (which call #backend).
  def self.parametrize(mod, suffix, factories: FACTORIES, &extra)
    factories.each do |name, factory|
      klass = Class.new(Minitest::Test) do
        include mod
        define_method(:backend) { @backend ||= factory.call }
        define_method(:backend_name) { name }
        class_eval(&extra) if extra
      end
      Object.const_set("#{name}#{suffix}", klass)
    end
  end
end

# A duck-typed signal (like Mistri::AbortSignal): remembers the call, the
# thread it came on and when.
class DuckSignal
  attr_reader :reason, :thread, :at, :calls

  def initialize
    @calls = 0
    @queue = Queue.new
  end

  def abort!(reason = nil)
    @calls += 1
    @reason = reason
    @thread = Thread.current
    @at = Clock.now
    @queue << true
  end

  def wait(timeout)
    Timeout.timeout(timeout) { @queue.pop }
    true
  rescue Timeout::Error
    false
  end
end

# Runs a Ruby script in a subprocess with the extension on its load path.
module Subprocess
  LIB = File.expand_path("../lib", __dir__)
  SCRIPTS = File.expand_path("scripts", __dir__)

  def self.command(script, *args)
    [RbConfig.ruby, "-I", LIB, File.join(SCRIPTS, script), *args.map(&:to_s)]
  end

  # Kills a child that is still running (one that missed a signal a test
  # sent it) and waits for it, so a failing test fails instead of hanging.
  def self.reap(wait_thread)
    return unless wait_thread&.alive?

    Process.kill("KILL", wait_thread.pid) rescue nil # rubocop:disable Style/RescueModifier
    wait_thread.join(5)
  end
end
