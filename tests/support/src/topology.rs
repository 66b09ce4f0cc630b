//! Throwaway Redis topologies on loopback for tests: a [`RedisCluster`]
//! (masters, optionally with replicas) and a [`RedisSentinels`] set (a
//! master, its replicas and three sentinels). Every process binds 127.0.0.1
//! on free ports, keeps nothing on disk but its own temporary folder, dies
//! with the test thread that started it (`PR_SET_PDEATHSIG`), and is
//! stopped on drop.

use crate::server_process::ServerProcess;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
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

/// A `redis-server` with `args`, in `dir`, not waited for (the topology
/// waits for its nodes together).
fn spawn(args: &[String], dir: &PathBuf) -> ServerProcess {
    let mut cmd = Command::new("redis-server");
    cmd.args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut process = ServerProcess::new(&crate::REDIS);
    process
        .spawn(cmd, None, |_| true)
        .unwrap_or_else(|e| panic!("{e}"));
    process
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
    process: ServerProcess,
    port: u16,
}

impl Node {
    fn pause(&self, on: bool) {
        if on {
            self.process.freeze();
        } else {
            self.process.thaw();
        }
    }

    fn stop(&mut self) {
        self.process.kill();
    }
}

/// A cluster node as `CLUSTER NODES` shows it: its port, its master's port
/// if it is a replica, and the slot ranges it serves.
type NodeView = (u16, Option<u16>, Vec<(u16, u16)>);

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
                let node_dir = node_dir(&dir, format!("node-{port}"));
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
                    "--repl-diskless-sync-delay",
                    "0",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                Node {
                    process: spawn(&args, &node_dir),
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
        for node in &cluster.nodes {
            wait_until(Duration::from_secs(20), "replica in sync", || {
                let info = command_on(node.port, "INFO replication");
                info.contains("role:master") || info.contains("master_link_status:up")
            });
        }
        cluster
    }

    /// `CLUSTER NODES` as seen by the first live node, for every node that
    /// is not failed.
    fn view(&self) -> Vec<NodeView> {
        let reply = self
            .nodes
            .iter()
            .map(|n| command_on(n.port, "CLUSTER NODES"))
            .find(|r| r.contains("myself"))
            .unwrap_or_default();
        let port_of = |addr: &str| -> Option<u16> {
            addr.split('@').next()?.rsplit(':').next()?.parse().ok()
        };
        let ids: Vec<(String, u16)> = reply
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some((
                    f.first()?.trim_start_matches('$').to_string(),
                    port_of(f.get(1)?)?,
                ))
            })
            .collect();
        reply
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                // A node others only suspect (`fail?`) still counts.
                let gone = f
                    .get(2)
                    .is_some_and(|flags| flags.split(',').any(|x| x == "fail" || x == "noaddr"));
                if f.len() < 8 || gone {
                    return None;
                }
                let port = port_of(f[1])?;
                let master = ids.iter().find(|(id, _)| id == f[3]).map(|(_, p)| *p);
                let ranges = f[8..]
                    .iter()
                    .filter(|r| !r.starts_with('['))
                    .filter_map(|r| {
                        let (a, b) = r.split_once('-').unwrap_or((r, r));
                        Some((a.parse().ok()?, b.parse().ok()?))
                    })
                    .collect();
                Some((port, master, ranges))
            })
            .collect()
    }

    /// The ports of the masters that serve slots now (as the first live
    /// node sees it).
    pub fn master_ports(&self) -> Vec<u16> {
        self.view()
            .into_iter()
            .filter(|(_, m, r)| m.is_none() && !r.is_empty())
            .map(|(p, _, _)| p)
            .collect()
    }

    /// The port of the master that serves `slot` now.
    pub fn owner_of(&self, slot: u16) -> Option<u16> {
        self.view()
            .into_iter()
            .find(|(_, m, r)| m.is_none() && r.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .map(|(p, _, _)| p)
    }

    /// The ports of the live replicas of the master on `port`.
    pub fn replicas_of(&self, port: u16) -> Vec<u16> {
        self.view()
            .into_iter()
            .filter(|(_, m, _)| *m == Some(port))
            .map(|(p, _, _)| p)
            .collect()
    }

    /// The port of a replica of the master on `port`, once one is in sync
    /// with it. Panics after 20 s.
    pub fn replica_in_sync(&self, port: u16) -> u16 {
        let mut found = 0;
        wait_until(Duration::from_secs(20), "a replica in sync", || {
            found = self
                .replicas_of(port)
                .into_iter()
                .find(|r| command_on(*r, "INFO replication").contains("master_link_status:up"))
                .unwrap_or(0);
            found != 0
        });
        found
    }

    /// Waits until every live node agrees that the node on `port` is a
    /// master serving slots (after a `CLUSTER FAILOVER` or the death of its
    /// master), and the cluster is ok. Panics after `limit`.
    pub fn wait_promoted(&self, port: u16, limit: Duration) {
        wait_until(limit, "replica promoted", || {
            self.nodes.iter().all(|n| {
                let nodes = command_on(n.port, "CLUSTER NODES");
                if nodes.is_empty() {
                    return true; // a dead node has no say
                }
                let info = command_on(n.port, "CLUSTER INFO");
                info.contains("cluster_state:ok")
                    && nodes.lines().any(|l| {
                        let f: Vec<&str> = l.split_whitespace().collect();
                        f.len() > 8
                            && f[1].starts_with(&format!("127.0.0.1:{port}@"))
                            && f[2].contains("master")
                    })
            })
        });
    }

    /// `CLUSTER FAILOVER` on the replica on `port` (a coordinated manual
    /// failover: its master stops taking writes until the replica has
    /// everything, then they swap roles); waits until every node agrees.
    pub fn failover(&self, replica: u16) {
        let reply = command_on(replica, "CLUSTER FAILOVER");
        assert!(reply.starts_with("+OK"), "CLUSTER FAILOVER: {reply}");
        self.wait_promoted(replica, Duration::from_secs(20));
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

    /// Freezes (`true`: SIGSTOP) or thaws (`false`: SIGCONT) the node on
    /// `port`: its connections stay open, it answers nothing meanwhile.
    pub fn pause(&self, port: u16, on: bool) {
        if let Some(node) = self.nodes.iter().find(|n| n.port == port) {
            node.pause(on);
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

/// A master, its replicas (two by default), and three sentinels watching
/// it as [`RedisSentinels::SERVICE`] (quorum 2, down after 1 s).
///
/// With two replicas the master a failover promotes has a replica again
/// as soon as the sentinels re-point the other one (part of the failover
/// itself), not only when the old master comes back and is re-pointed
/// (8 s or more after a `SENTINEL FAILOVER`: a sentinel waits that long
/// before it corrects a node that still says it is a master). Data nodes
/// start a full resync at once (`repl-diskless-sync-delay 0`; the default
/// waits 5 s for more replicas), so `WAIT` is answered again within a
/// second or so of the promotion.
pub struct RedisSentinels {
    master: Node,
    replicas: Vec<Node>,
    sentinels: Vec<Node>,
    dir: PathBuf,
}

impl RedisSentinels {
    /// The service name the sentinels monitor.
    pub const SERVICE: &'static str = "mymaster";

    /// Starts a master, two replicas and the sentinels, and waits until
    /// every sentinel sees every replica. Panics (a test helper) if that
    /// fails.
    pub fn start() -> RedisSentinels {
        Self::start_with(2)
    }

    /// [`RedisSentinels::start`] with `replicas` replicas (at least one).
    pub fn start_with(replicas: usize) -> RedisSentinels {
        assert!(replicas >= 1, "a failover needs a replica");
        let dir = temp_dir("mistri-sentinel");
        let ports = free_ports(1 + replicas + 3);
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
                "--repl-diskless-sync-delay",
                "0",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        };
        let master = Node {
            process: spawn(
                &base(ports[0]),
                &node_dir(&dir, format!("master-{}", ports[0])),
            ),
            port: ports[0],
        };
        let replica_nodes: Vec<Node> = ports[1..=replicas]
            .iter()
            .map(|&port| {
                let mut args = base(port);
                args.extend([
                    "--replicaof".into(),
                    "127.0.0.1".into(),
                    ports[0].to_string(),
                ]);
                Node {
                    process: spawn(&args, &node_dir(&dir, format!("replica-{port}"))),
                    port,
                }
            })
            .collect();
        let mut set = RedisSentinels {
            master,
            replicas: replica_nodes,
            sentinels: Vec::new(),
            dir,
        };
        for r in &set.replicas {
            wait_until(Duration::from_secs(20), "replica in sync", || {
                command_on(r.port, "INFO replication").contains("master_link_status:up")
            });
        }
        // The sentinels start once every replica is in sync: a sentinel
        // learns the replicas from the master's `INFO`, which it sends as
        // it connects and then every 10 s, so a replica not attached yet at
        // its first look waited for the second (a sentinel once missed the
        // 20 s bound here on a loaded machine). Now the first look finds
        // them; the bound is three of those periods.
        let dir = &set.dir;
        let sentinels = ports[1 + replicas..]
            .iter()
            .map(|&port| {
                let d = node_dir(dir, format!("sentinel-{port}"));
                let conf = d.join("sentinel.conf");
                std::fs::write(
                    &conf,
                    format!(
                        "port {port}\nbind 127.0.0.1\ndir {}\n\
                         sentinel monitor {} 127.0.0.1 {} 2\n\
                         sentinel down-after-milliseconds {} 1000\n\
                         sentinel failover-timeout {} 5000\n\
                         sentinel parallel-syncs {} {replicas}\n",
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
                    process: spawn(&args, &d),
                    port,
                }
            })
            .collect();
        set.sentinels = sentinels;
        for s in &set.sentinels {
            wait_until(Duration::from_secs(30), "sentinel", || {
                let known = command_on(s.port, &format!("SENTINEL REPLICAS {}", Self::SERVICE));
                set.replicas
                    .iter()
                    .all(|r| known.contains(&r.port.to_string()))
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

    /// The ports of the first master and of its first replica.
    pub fn data_ports(&self) -> (u16, u16) {
        (self.master.port, self.replicas[0].port)
    }

    /// The ports of every data node: the first master, then its replicas.
    pub fn all_data_ports(&self) -> Vec<u16> {
        std::iter::once(&self.master)
            .chain(&self.replicas)
            .map(|n| n.port)
            .collect()
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
        for node in std::iter::once(&mut self.master).chain(self.replicas.iter_mut()) {
            if node.port == port {
                node.stop();
            }
        }
    }

    /// Freezes (`true`: SIGSTOP) or thaws (`false`: SIGCONT) the data node
    /// on `port`.
    pub fn pause(&self, port: u16, on: bool) {
        for node in std::iter::once(&self.master).chain(self.replicas.iter()) {
            if node.port == port {
                node.pause(on);
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
        for node in self.replicas.iter_mut() {
            node.stop();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A node's own directory under `dir`, created.
fn node_dir(dir: &Path, name: String) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).expect("node dir");
    d
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
        assert_ne!(new_master, master);
        assert!(sentinels.all_data_ports().contains(&new_master));
    }
}
