# frozen_string_literal: true

# A Ruby host's signals during renewals, acquires and releases (issue 30):
# with a SIGCHLD handler installed (as Unicorn, Resque and every
# pre-forking server do), a thread sends SIGCHLD at its own process every
# millisecond while holds renew on a short heartbeat and the main thread
# acquires, reads and releases in a loop, on Redis, Sentinel, Cluster and
# Postgres. A socket read with a timeout that a handled signal interrupts
# fails with EINTR (signal(7)); nothing may fail: no error, no hold lost,
# every release finds its lease. The library's threads block host signals
# (runtime/thread.rs), a host thread's Redis round trip holds them off and
# Postgres reads retry (runtime/eintr.rs).
#
# Sentinel and Cluster are started here (one master and one sentinel;
# three masters), on free loopback ports, stopped at exit.

require_relative "test_helper"

# Throwaway Redis topologies for this file: Sentinel and Cluster.
module TestTopology
  class << self
    def sentinel_url
      @sentinel_url ||= start_sentinel
    end

    def cluster_url
      @cluster_url ||= start_cluster
    end

    private

    def free_port
      probe = TCPServer.new("127.0.0.1", 0)
      probe.addr[1]
    ensure
      probe&.close
    end

    def dir
      @dir ||= Dir.mktmpdir("mistri-rb-topology").tap do |d|
        owner = Process.pid
        at_exit do
          next unless Process.pid == owner

          (@pids || []).each do |pid|
            Process.kill("TERM", pid)
            Process.wait(pid)
          rescue SystemCallError
            nil
          end
          FileUtils.rm_rf(d)
        end
      end
    end

    def server(*args, name:)
      path = File.join(dir, name)
      FileUtils.mkdir_p(path)
      pid = spawn("redis-server", *args, chdir: path, out: File::NULL, err: File::NULL)
      (@pids ||= []) << pid
      pid
    end

    def base(port) = ["--port", port.to_s, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]

    def command(port, *args)
      TCPSocket.open("127.0.0.1", port) do |s|
        s.write("*#{args.size}\r\n" + args.map { |a| "$#{a.to_s.bytesize}\r\n#{a}\r\n" }.join)
        s.readpartial(65_536)
      end
    rescue SystemCallError, IOError, EOFError
      ""
    end

    def wait_until(what, limit: 20)
      deadline = Clock.now + limit
      until yield
        raise "#{what}: not within #{limit} s" if Clock.now > deadline

        sleep 0.05
      end
    end

    def start_sentinel
      master = free_port
      sentinel = free_port
      server(*base(master), name: "master-#{master}")
      wait_until("master up") { command(master, "PING").include?("PONG") }
      conf = File.join(dir, "sentinel-#{sentinel}.conf")
      File.write(conf, "port #{sentinel}\nbind 127.0.0.1\ndir #{dir}\n" \
                       "sentinel monitor mymaster 127.0.0.1 #{master} 1\n")
      server(conf, "--sentinel", name: "sentinel-#{sentinel}")
      wait_until("sentinel knows the master") do
        command(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster").include?(master.to_s)
      end
      "redis+sentinel://127.0.0.1:#{sentinel}/mymaster/0"
    end

    def start_cluster
      nodes = Array.new(3) { [free_port, free_port] }
      nodes.each do |port, bus|
        server(*base(port), "--cluster-port", bus.to_s, "--cluster-enabled", "yes",
               "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000", name: "node-#{port}")
      end
      nodes.each { |port, _| wait_until("node up") { command(port, "PING").include?("PONG") } }
      ok = system("redis-cli", "--cluster", "create", *nodes.map { |port, _| "127.0.0.1:#{port}" },
                  "--cluster-replicas", "0", "--cluster-yes", out: File::NULL, err: File::NULL, in: File::NULL)
      raise "redis-cli --cluster create failed" unless ok

      nodes.each do |port, _|
        wait_until("cluster_state:ok") { command(port, "CLUSTER", "INFO").include?("cluster_state:ok") }
      end
      "redis+cluster://#{nodes.map { |port, _| "127.0.0.1:#{port}" }.join(',')}"
    end
  end
end

class HostSignalTest < Minitest::Test
  # Rounds of acquire / held? / release / hold-release on the main thread.
  ROUNDS = 150
  # Holds renewing meanwhile, each every HEARTBEAT seconds: with a TTL of
  # TTL seconds, a renewal failing for TTL - HEARTBEAT loses the hold.
  HOLDS = 4
  TTL = 1
  HEARTBEAT = 0.05

  def test_redis = storm(MistriLocks::Redis.new(url: TestRedis.url, namespace: namespace))
  def test_sentinel = storm(MistriLocks.open(TestTopology.sentinel_url, namespace: namespace))
  def test_cluster = storm(MistriLocks.open(TestTopology.cluster_url, namespace: namespace))
  def test_postgres = storm(MistriLocks::Postgres.new(url: TestPostgres.url, namespace: namespace))

  private

  def namespace = "mistri:signal:#{SecureRandom.hex(6)}"

  def storm(locks)
    locks.held?("warm-up") # connect before the storm: startup is not the point
    heard = 0
    previous = trap("CHLD") { heard += 1 }
    stop = false
    sent = 0
    sender = Thread.new do
      # Bounded: ends when told, or after a minute of signals at the latest.
      60_000.times do
        break if stop

        Process.kill("CHLD", Process.pid)
        sent += 1
        sleep 0.001
      end
    end
    holds = Array.new(HOLDS) { |i| locks.hold("renewing:#{i}", ttl: TTL, heartbeat: HEARTBEAT) }
    failures = []
    ROUNDS.times do |round|
      key = "round:#{round % 7}"
      failures << "acquire #{key} (round #{round})" unless locks.acquire(key, ttl: 5) == true
      failures << "held? #{key} (round #{round})" unless locks.held?(key) == true
      failures << "release #{key} (round #{round})" unless locks.release(key) == true
      hold = locks.hold("held:#{round % 5}", ttl: TTL, heartbeat: HEARTBEAT)
      outcome = hold&.release_outcome
      failures << "hold release #{outcome.inspect} (round #{round})" unless outcome == :released
    rescue MistriLocks::Error => e
      failures << "round #{round}: #{e.class}: #{e.message}"
    end
    lost = holds.count(&:lost?)
    outcomes = holds.map(&:release_outcome)
    stop = true
    sender.join
    assert_operator heard, :>, 0, "no SIGCHLD was handled: the test tested nothing"
    assert_empty failures.first(10), "#{failures.size} failures in #{ROUNDS} rounds while #{sent} SIGCHLD were sent"
    assert_equal 0, lost, "holds lost while renewing under SIGCHLD"
    assert_equal [:released] * HOLDS, outcomes
  ensure
    stop = true
    sender&.join
    trap("CHLD", previous || "DEFAULT")
  end
end
