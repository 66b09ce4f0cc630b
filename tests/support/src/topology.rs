//! Throwaway Redis topologies on loopback for tests: a [`RedisCluster`]
//! (masters, optionally with replicas) and a [`RedisSentinels`] set (a
//! master, a replica and three sentinels). Every process binds 127.0.0.1
//! on free ports, keeps nothing on disk but its own temporary folder, dies
//! with the test thread that started it (`PR_SET_PDEATHSIG`), and is
//! stopped on drop.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Starts a topology on a helper thread that then parks for the life of
/// the process: the nodes die with that thread (`PR_SET_PDEATHSIG`), so
/// with the process, not with the test thread that asked first. For
/// suites whose tests only share a topology (namespaces apart) and never
/// fail it over.
fn started_for_process<T: Send + Sync + 'static>(
    cell: &'static OnceLock<T>,
    start: fn() -> T,
) -> &'static T {
    cell.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(start());
            loop {
                std::thread::park();
            }
        });
        rx.recv().expect("topology started")
    })
}

/// `n` distinct free loopback ports.
fn free_ports(n: usize) -> Vec<u16> {
    // Hold every listener until all are chosen, so no port repeats.
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

fn spawn(args: &[String], dir: &PathBuf) -> Child {
    let mut cmd = Command::new("redis-server");
    cmd.args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe and touches no memory of ours;
        // it runs in the child between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
    }
    cmd.spawn()
        .expect("redis-server not runnable (install it: apt-get install redis-server)")
}

/// Sends one inline command to 127.0.0.1:`port` and returns the raw reply
/// (a bulk reply's body, or the status/error line).
pub fn command_on(port: u16, line: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(format!("{line}\r\n").as_bytes()).is_err() {
        return String::new();
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        if reply_complete(&got) {
            break;
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn reply_complete(got: &[u8]) -> bool {
    let text = String::from_utf8_lossy(got);
    let Some(first_end) = text.find("\r\n") else {
        return false;
    };
    match text.as_bytes()[0] {
        b'$' => {
            let len: i64 = text[1..first_end].parse().unwrap_or(-1);
            len < 0 || text.len() >= first_end + 2 + len as usize + 2
        }
        b'*' => text.ends_with("\r\n") && text.matches("\r\n").count() > 1,
        _ => true,
    }
}

fn wait_until(limit: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if ready() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what} not ready within {limit:?}");
}

fn temp_dir(kind: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(crate::unique(kind));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// One node of a topology.
struct Node {
    child: Child,
    port: u16,
}

impl Node {
    fn stop(&mut self) {
        // SAFETY: kill takes no pointers; the pid is our own child's.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGCONT) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Redis Cluster on loopback: `masters` masters covering all 16,384
/// slots, each with `replicas` replicas.
pub struct RedisCluster {
    nodes: Vec<Node>,
    dir: PathBuf,
}

impl RedisCluster {
    /// Starts the nodes, joins them into a cluster with
    /// `redis-cli --cluster create`, and waits for `cluster_state:ok`.
    /// Panics (a test helper) if that fails.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        let count = masters * (1 + replicas);
        let dir = temp_dir("mistri-cluster");
        // Each node needs a client port and a cluster bus port.
        let ports = free_ports(count * 2);
        let nodes: Vec<Node> = (0..count)
            .map(|i| {
                let (port, bus) = (ports[2 * i], ports[2 * i + 1]);
                let node_dir = dir.join(format!("node-{port}"));
                std::fs::create_dir_all(&node_dir).expect("node dir");
                let args: Vec<String> = [
                    "--port",
                    &port.to_string(),
                    "--cluster-port",
                    &bus.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "1000",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                Node {
                    child: spawn(&args, &node_dir),
                    port,
                }
            })
            .collect();
        let cluster = RedisCluster { nodes, dir };
        for node in &cluster.nodes {
            wait_until(Duration::from_secs(10), "cluster node", || {
                command_on(node.port, "PING").starts_with("+PONG")
            });
        }
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli runs");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        for node in &cluster.nodes {
            wait_until(Duration::from_secs(20), "cluster_state:ok", || {
                command_on(node.port, "CLUSTER INFO").contains("cluster_state:ok")
            });
        }
        cluster
    }

    /// One 3-master cluster for the whole test process (see
    /// [`started_for_process`]); never dropped, its folder is left in the
    /// temporary directory.
    pub fn shared() -> &'static RedisCluster {
        static CELL: OnceLock<RedisCluster> = OnceLock::new();
        started_for_process(&CELL, || RedisCluster::start(3, 0))
    }

    /// The client ports of every node (masters first, as created).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…` with every node as a
    /// seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Sends one command to the node on `port`.
    pub fn command(&self, port: u16, line: &str) -> String {
        command_on(port, line)
    }

    /// Kills the node on `port` (SIGKILL).
    pub fn kill(&mut self, port: u16) {
        if let Some(node) = self.nodes.iter_mut().find(|n| n.port == port) {
            node.stop();
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.stop();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A master, a replica of it, and three sentinels watching it as
/// [`RedisSentinels::SERVICE`] (quorum 2, down after 1 s).
pub struct RedisSentinels {
    master: Node,
    replica: Node,
    sentinels: Vec<Node>,
    dir: PathBuf,
}

impl RedisSentinels {
    /// The service name the sentinels monitor.
    pub const SERVICE: &'static str = "mymaster";

    /// Starts them and waits until every sentinel sees the master and its
    /// replica. Panics (a test helper) if that fails.
    pub fn start() -> RedisSentinels {
        let dir = temp_dir("mistri-sentinel");
        let ports = free_ports(5);
        let base = |port: u16| -> Vec<String> {
            [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        };
        let node_dir = |name: String| {
            let d = dir.join(name);
            std::fs::create_dir_all(&d).expect("node dir");
            d
        };
        let master = Node {
            child: spawn(&base(ports[0]), &node_dir(format!("master-{}", ports[0]))),
            port: ports[0],
        };
        let mut replica_args = base(ports[1]);
        replica_args.extend([
            "--replicaof".into(),
            "127.0.0.1".into(),
            ports[0].to_string(),
        ]);
        let replica = Node {
            child: spawn(&replica_args, &node_dir(format!("replica-{}", ports[1]))),
            port: ports[1],
        };
        let sentinels = ports[2..]
            .iter()
            .map(|&port| {
                let d = node_dir(format!("sentinel-{port}"));
                let conf = d.join("sentinel.conf");
                std::fs::write(
                    &conf,
                    format!(
                        "port {port}\nbind 127.0.0.1\ndir {}\n\
                         sentinel monitor {} 127.0.0.1 {} 2\n\
                         sentinel down-after-milliseconds {} 1000\n\
                         sentinel failover-timeout {} 5000\n\
                         sentinel parallel-syncs {} 1\n",
                        d.display(),
                        Self::SERVICE,
                        ports[0],
                        Self::SERVICE,
                        Self::SERVICE,
                        Self::SERVICE
                    ),
                )
                .expect("sentinel.conf");
                let args = vec![conf.display().to_string(), "--sentinel".to_string()];
                Node {
                    child: spawn(&args, &d),
                    port,
                }
            })
            .collect();
        let set = RedisSentinels {
            master,
            replica,
            sentinels,
            dir,
        };
        wait_until(Duration::from_secs(20), "replica in sync", || {
            command_on(set.replica.port, "INFO replication").contains("master_link_status:up")
        });
        for s in &set.sentinels {
            wait_until(Duration::from_secs(20), "sentinel", || {
                let replicas = command_on(s.port, &format!("SENTINEL REPLICAS {}", Self::SERVICE));
                replicas.contains(&set.replica.port.to_string())
            });
        }
        set
    }

    /// One set for the whole test process, never failed over (see
    /// [`started_for_process`]).
    pub fn shared() -> &'static RedisSentinels {
        static CELL: OnceLock<RedisSentinels> = OnceLock::new();
        started_for_process(&CELL, RedisSentinels::start)
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster/0`.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .sentinels
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+sentinel://{}/{}/0", seeds.join(","), Self::SERVICE)
    }

    /// The port of the node the sentinels currently name as the master.
    pub fn master_port(&self) -> u16 {
        let reply = command_on(
            self.sentinels[0].port,
            &format!("SENTINEL GET-MASTER-ADDR-BY-NAME {}", Self::SERVICE),
        );
        reply
            .lines()
            .filter_map(|l| l.parse::<u16>().ok())
            .next()
            .unwrap_or(self.master.port)
    }

    /// The ports of the first master and of its replica.
    pub fn data_ports(&self) -> (u16, u16) {
        (self.master.port, self.replica.port)
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|n| n.port).collect()
    }

    /// Sends one command to 127.0.0.1:`port`.
    pub fn command(&self, port: u16, line: &str) -> String {
        command_on(port, line)
    }

    /// Asks the sentinels for a failover and waits until they name the
    /// other data node as the master. Returns the new master's port.
    pub fn failover(&self) -> u16 {
        let before = self.master_port();
        // A sentinel refuses (NOGOODSLAVE) until it has fresh INFO from the
        // replica, which it asks for every few seconds: ask again until then.
        wait_until(
            Duration::from_secs(30),
            "SENTINEL FAILOVER accepted",
            || {
                command_on(
                    self.sentinels[0].port,
                    &format!("SENTINEL FAILOVER {}", Self::SERVICE),
                )
                .starts_with("+OK")
            },
        );
        wait_until(Duration::from_secs(30), "failover", || {
            self.master_port() != before
        });
        self.master_port()
    }

    /// Kills the data node on `port` (SIGKILL).
    pub fn kill(&mut self, port: u16) {
        for node in [&mut self.master, &mut self.replica] {
            if node.port == port {
                node.stop();
            }
        }
    }
}

impl Drop for RedisSentinels {
    fn drop(&mut self) {
        for node in self.sentinels.iter_mut() {
            node.stop();
        }
        self.master.stop();
        self.replica.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_and_a_sentinel_set_come_up_and_answer() {
        let cluster = RedisCluster::start(3, 0);
        assert_eq!(cluster.ports().len(), 3);
        let info = cluster.command(cluster.ports()[0], "CLUSTER INFO");
        assert!(info.contains("cluster_known_nodes:3"), "{info}");
        assert!(cluster.url().starts_with("redis+cluster://127.0.0.1:"));

        let sentinels = RedisSentinels::start();
        let (master, replica) = sentinels.data_ports();
        assert_eq!(sentinels.master_port(), master);
        assert!(sentinels
            .command(replica, "INFO replication")
            .contains("role:slave"));
        let new_master = sentinels.failover();
        assert_eq!(new_master, replica);
    }
}
