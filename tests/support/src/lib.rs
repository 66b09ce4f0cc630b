//! Test helpers shared by the workspace's test suites and benchmarks.
//!
//! [`RedisServer`] starts a real `redis-server` bound to 127.0.0.1 on a free
//! port, with no persistence, in its own temporary directory, and stops it
//! on drop. The server is also told to die with the thread that started it
//! (`PR_SET_PDEATHSIG`), so a test killed outright leaves nothing behind.
//! [`PgServer`] and [`PgBouncer`] do the same for PostgreSQL (initdb into a
//! temporary folder; as the `postgres` user when run as root) and for a
//! PgBouncer in transaction pooling mode; [`PgClient`] is a minimal std-only
//! client for them (the benchmark's baselines, tests that read tables).

mod pg_client;
mod server_process;
pub use pg_client::{Notification, PgClient, Rows};
mod postgres;
pub use postgres::{pg_bindir, PgAuth, PgBouncer, PgConfig, PgServer};
pub mod history;
mod proxy;
pub use proxy::Proxy;
mod mariadb;
pub use mariadb::{
    mariadb_program, MariaDbClient, MariaDbRow, MariaDbServer, MARIADB_DATABASE, MARIADB_PASSWORD,
    MARIADB_USER,
};
mod fault_server;
pub use fault_server::FaultServer;
mod topology;
pub use topology::{command_on, RedisCluster, RedisSentinels};

use server_process::{first_success, free_port, fresh_folder, retry_for, Kind, ServerProcess};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How a `redis-server` process is run (nothing is persisted: a stop is
/// SIGKILL, with nothing to wait for).
pub(crate) const REDIS: Kind = Kind {
    name: "redis-server",
    install: "install it: apt-get install redis-server",
    start_within: Duration::from_secs(10),
    stop_within: Duration::from_secs(10),
    poll: Duration::from_millis(5),
    death_signal: libc::SIGTERM,
};

/// A running throwaway `redis-server`.
pub struct RedisServer {
    process: ServerProcess,
    port: u16,
    dir: PathBuf,
    config: RedisConfig,
}

/// What to start.
#[derive(Default, Clone)]
pub struct RedisConfig {
    /// `requirepass`, if any.
    pub password: Option<String>,
    /// Serve TLS only (no plain port), with a fresh certificate for 127.0.0.1
    /// from a throwaway CA, made by the `openssl` command; see
    /// [`RedisServer::ca_file`].
    pub tls: bool,
}

impl RedisServer {
    /// Starts a server with default settings. Panics (it is a test helper)
    /// if `redis-server` is missing or won't come up.
    pub fn start() -> RedisServer {
        Self::start_with(RedisConfig::default())
    }

    /// Starts a server with `config`.
    pub fn start_with(config: RedisConfig) -> RedisServer {
        first_success(5, "redis-server", || Self::try_start(&config))
    }

    fn try_start(config: &RedisConfig) -> Result<RedisServer, String> {
        let port = free_port();
        let dir = fresh_folder(&std::env::temp_dir(), "mistri-redis", port)?;
        // From here on, `server`'s Drop removes the folder on failure.
        let mut server = RedisServer {
            process: ServerProcess::new(&REDIS),
            port,
            dir,
            config: config.clone(),
        };
        if config.tls {
            make_certificate(&server.dir)?;
        }
        server.spawn()?;
        Ok(server)
    }

    /// Starts `redis-server` on `self.port`, in `self.dir` (which holds
    /// the certificate for TLS), and waits for it to answer.
    fn spawn(&mut self) -> Result<(), String> {
        let (port, dir, config) = (self.port, &self.dir, &self.config);
        // A TLS server is judged ready by its log: start from an empty one.
        let _ = std::fs::remove_file(dir.join("redis.log"));
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "yes",
            ])
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(pass) = &config.password {
            cmd.args(["--requirepass", pass]);
        }
        if config.tls {
            cmd.args(["--port", "0", "--tls-port", &port.to_string()])
                .args(["--tls-auth-clients", "no"])
                .arg("--tls-cert-file")
                .arg(dir.join("cert.pem"))
                .arg("--tls-key-file")
                .arg(dir.join("key.pem"))
                .arg("--tls-ca-cert-file")
                .arg(dir.join("ca.pem"));
        }
        cmd.arg("--logfile").arg(dir.join("redis.log"));
        let log = dir.join("redis.log");
        self.process
            .spawn(cmd, Some(&log), |_| ping(port, config, &log))
    }

    /// The port it listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/0` (`rediss://` for TLS), with the password
    /// if one is set.
    pub fn url(&self) -> String {
        let scheme = if self.config.tls { "rediss" } else { "redis" };
        match &self.config.password {
            Some(p) => format!("{scheme}://:{p}@127.0.0.1:{}/0", self.port),
            None => format!("{scheme}://127.0.0.1:{}/0", self.port),
        }
    }

    /// The throwaway CA (PEM) that signed a TLS server's certificate: a
    /// client that trusts it verifies the server.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// Sends one raw command line (not for TLS servers) (inline protocol) and returns the raw
    /// reply; for tests that poke at keys behind the library's back.
    pub fn command(&self, line: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut req = String::new();
        if let Some(p) = &self.config.password {
            req.push_str(&format!("AUTH {p}\r\n"));
        }
        req.push_str(line);
        req.push_str("\r\nQUIT\r\n");
        s.write_all(req.as_bytes()).expect("write");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        let out = match &self.config.password {
            Some(_) => out.strip_prefix("+OK\r\n").unwrap_or(&out),
            None => &out,
        };
        // The last reply is QUIT's.
        out.strip_suffix("+OK\r\n").unwrap_or(out).to_owned()
    }

    /// The server's process id (panics if it is stopped).
    pub fn pid(&self) -> u32 {
        self.process.pid().expect("server is running")
    }

    /// Stops the server process with SIGSTOP (returns once every thread
    /// shows stopped): connections stay open, the kernel still accepts and
    /// buffers, nothing answers. Its clock (and so key expiry) keeps
    /// running.
    pub fn freeze(&self) {
        self.process.freeze();
    }

    /// Resumes a frozen server (SIGCONT); it then serves what was buffered.
    pub fn thaw(&self) {
        self.process.thaw();
    }

    /// Kills the server (SIGKILL) and starts a fresh one on the same port,
    /// with the same settings and no data (nothing is persisted). Retries
    /// the bind for up to 5 s. Panics if it won't come back.
    pub fn restart(&mut self) {
        self.restart_after(Duration::ZERO);
    }

    /// [`RedisServer::restart`] with the port left dead for `downtime`
    /// between the kill and the new start (connections are refused then).
    pub fn restart_after(&mut self, downtime: Duration) {
        self.process.kill();
        std::thread::sleep(downtime);
        retry_for(Duration::from_secs(5), Duration::from_millis(20), || {
            self.spawn()
        })
        .unwrap_or_else(|e| panic!("redis-server did not come back on port {}: {e}", self.port));
    }

    /// Stops the server (SIGKILL for speed: nothing is persisted).
    pub fn stop(&mut self) {
        self.process.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether the server on `port` answers PING (a TLS server: whether its
/// `log` says it is ready).
fn ping(port: u16, config: &RedisConfig, log: &Path) -> bool {
    if config.tls {
        // No TLS client here: trust the server's own word.
        return std::fs::read_to_string(log)
            .is_ok_and(|log| log.contains("Ready to accept connections"));
    }
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut req = String::new();
    if let Some(p) = &config.password {
        req.push_str(&format!("AUTH {p}\r\n"));
    }
    req.push_str("PING\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut got = String::new();
    while !got.contains("PONG") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    true
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A throwaway CA (`ca.pem`) and a server certificate for 127.0.0.1 signed
/// by it (`cert.pem`, `key.pem`), made with the `openssl` command.
pub(crate) fn make_certificate(dir: &std::path::Path) -> Result<(), String> {
    let run = |args: &[&str]| -> Result<(), String> {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("openssl not runnable (apt-get install openssl): {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("openssl {args:?} failed: {status}"))
        }
    };
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n")
        .map_err(|e| e.to_string())?;
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=mistri test CA",
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca.pem",
    ])?;
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "key.pem",
        "-out",
        "server.csr",
    ])?;
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca-key.pem",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "cert.pem",
    ])
}

/// Threads of this process right now (Linux: entries of /proc/self/task).
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A key unique to this call, so tests sharing a backend never collide.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
