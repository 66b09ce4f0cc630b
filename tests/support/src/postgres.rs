//! Throwaway PostgreSQL servers and PgBouncers on loopback, for tests and
//! benchmarks: [`PgServer`] (initdb into a temporary folder, the
//! postmaster on a free 127.0.0.1 port) and [`PgBouncer`] (transaction
//! pooling in front of one).
//!
//! - **Binaries**: Debian puts the server's binaries where
//!   `pg_config --bindir` says (`/usr/lib/postgresql/15/bin`), not on PATH;
//!   `PG_BINDIR` overrides. `pgbouncer` is looked up on PATH and in
//!   `/usr/sbin`. Install both with `bash scripts/setup`.
//! - **Root**: `initdb` and `postgres` refuse to run as root (CI runs as
//!   root). Then every server process runs as the `postgres` user (the
//!   Debian package creates it): the temporary folder is handed to it and
//!   the processes are spawned with its uid and gid (what
//!   `runuser -u postgres --` does, without a `runuser` process in between,
//!   so the postmaster is our own child). As any other user they run as
//!   that user.
//! - **Lifetime**: the postmaster (and pgbouncer) is spawned directly (not
//!   through `pg_ctl`, which would detach it) and told to die with the
//!   thread that started it (`PR_SET_PDEATHSIG`), so a test killed outright
//!   leaves nothing behind; its backends notice their postmaster's death
//!   and exit too. [`Drop`] (also while a panicking test unwinds) stops the
//!   server and removes the folder. The process handling (spawn, readiness
//!   deadline, freeze, shutdown, kill) is `server_process`'s, shared with
//!   the other harnesses; this module says what is PostgreSQL's.
//! - **Settings**: trust auth on the unix socket (inside the temporary
//!   folder) and, unless [`PgConfig::password`] is set, over TCP;
//!   `fsync=off` and `full_page_writes=off` for speed; `synchronous_commit`
//!   stays on, so a commit has reached the kernel when it returns and
//!   survives [`PgServer::restart`] and [`PgServer::crash_restart`] (not a
//!   machine crash).
//!
//! SQL from the tests goes through `psql` (from the same bindir) over the
//! unix socket, with a wall-clock deadline: [`PgServer::sql`].

use crate::server_process::{
    client_output, first_success, free_port, fresh_folder, percent_encode, retry_for, run_within,
    Kind, ServerProcess,
};
use std::ffi::CString;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// How long a server gets to come up (initdb excluded) or go down; the
/// postmaster and its backends die of SIGTERM with the test's thread.
const POSTGRES: Kind = Kind {
    name: "postgres",
    install: "bash scripts/setup",
    start_within: Duration::from_secs(30),
    stop_within: Duration::from_secs(10),
    poll: Duration::from_millis(10),
    death_signal: libc::SIGTERM,
};
/// The same for pgbouncer.
const PGBOUNCER: Kind = Kind {
    name: "pgbouncer",
    ..POSTGRES
};
/// Default deadline of [`PgServer::sql`].
const SQL_WITHIN: Duration = Duration::from_secs(20);

/// How TCP clients authenticate when a password is set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PgAuth {
    /// `scram-sha-256` (the password is stored as a SCRAM secret).
    #[default]
    ScramSha256,
    /// `md5` (the password is stored as an MD5 hash).
    Md5,
}

/// What to start.
#[derive(Clone, Debug, Default)]
pub struct PgConfig {
    /// A password for the `postgres` user, required over TCP (the unix
    /// socket stays trust, for [`PgServer::sql`]).
    pub password: Option<String>,
    /// How TCP clients prove the password (only with `password`).
    pub auth: PgAuth,
    /// Extra `-c name=value` settings for the postmaster.
    pub settings: Vec<(String, String)>,
}

/// The user the server processes run as, when we are root.
#[derive(Clone, Copy)]
struct RunAs {
    uid: u32,
    gid: u32,
}

fn run_as() -> Option<RunAs> {
    // SAFETY: geteuid takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    static POSTGRES: OnceLock<RunAs> = OnceLock::new();
    Some(*POSTGRES.get_or_init(|| {
        let name = CString::new("postgres").expect("no NUL");
        // SAFETY: `name` is a valid NUL-terminated string that outlives the
        // call; getpwnam returns NULL or a pointer to a static record,
        // which is copied out at once, before anything else here could
        // call getpwnam again (this runs once, under the OnceLock).
        let pw = unsafe { libc::getpwnam(name.as_ptr()) };
        assert!(
            !pw.is_null(),
            "running as root, but there is no `postgres` user to run the server as \
             (install the server: bash scripts/setup, or apt-get install postgresql)"
        );
        // SAFETY: `pw` is non-null and points to a valid passwd record.
        let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
        RunAs { uid, gid }
    }))
}

/// The folder of the server binaries (`initdb`, `postgres`, `psql`).
pub fn pg_bindir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("PG_BINDIR") {
            return PathBuf::from(dir);
        }
        if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
            let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if out.status.success() && dir.join("postgres").exists() {
                return dir;
            }
        }
        // Debian's layout, newest first, when pg_config is absent.
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|p| p.join("postgres").exists())
            .collect();
        found.sort();
        found.pop().unwrap_or_else(|| {
            panic!(
                "PostgreSQL server binaries not found (pg_config --bindir, /usr/lib/postgresql/*/bin); \
                 install them: bash scripts/setup (apt-get install postgresql)"
            )
        })
    })
    .clone()
}

/// A temporary folder the server user can use: under `TMPDIR` unless we
/// are root and that is not reachable by others, then under `/tmp`.
fn make_base(prefix: &str, port: u16, owner: Option<RunAs>) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let mut parent = std::env::temp_dir();
    if owner.is_some() {
        let reachable = std::fs::metadata(&parent)
            .map(|m| m.permissions().mode() & 0o001 != 0)
            .unwrap_or(false);
        if !reachable {
            parent = PathBuf::from("/tmp");
        }
    }
    let base = fresh_folder(&parent, prefix, port).expect("create temporary folder");
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    if let Some(o) = owner {
        std::os::unix::fs::chown(&base, Some(o.uid), Some(o.gid)).expect("chown to postgres");
    }
    base
}

/// A command that runs as the server user (when root) in `dir`.
fn command(program: &Path, dir: &Path) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(program);
    cmd.current_dir(dir).stdin(Stdio::null());
    if let Some(o) = run_as() {
        // std drops the supplementary groups (setgroups(0)) before setuid.
        cmd.uid(o.uid).gid(o.gid);
        cmd.env("USER", "postgres").env("HOME", dir);
    }
    cmd
}

/// A running throwaway PostgreSQL server.
pub struct PgServer {
    process: ServerProcess,
    port: u16,
    base: PathBuf,
    config: PgConfig,
}

impl PgServer {
    /// Starts a server with trust auth. Panics (a test helper) if the
    /// binaries are missing or it won't come up.
    pub fn start() -> PgServer {
        Self::start_with(PgConfig::default())
    }

    /// Starts a server whose TCP clients must give `password` (as
    /// `postgres`), proven by `auth`.
    pub fn with_password_auth(password: &str, auth: PgAuth) -> PgServer {
        Self::start_with(PgConfig {
            password: Some(password.to_owned()),
            auth,
            ..PgConfig::default()
        })
    }

    /// Starts a server with `config`.
    pub fn start_with(config: PgConfig) -> PgServer {
        first_success(3, "a PostgreSQL server", || Self::try_start(&config))
    }

    fn try_start(config: &PgConfig) -> Result<PgServer, String> {
        let port = free_port();
        let owner = run_as();
        let base = make_base("mistri-pg", port, owner);
        let mut server = PgServer {
            process: ServerProcess::new(&POSTGRES),
            port,
            base,
            config: config.clone(),
        };
        // On failure, `server`'s Drop removes the folder.
        server.initdb()?;
        server.spawn()?;
        if let Some(password) = &config.password {
            let encryption = match config.auth {
                PgAuth::ScramSha256 => "scram-sha-256",
                PgAuth::Md5 => "md5",
            };
            let quoted = password.replace('\'', "''");
            server.try_sql(
                &format!(
                    "SET password_encryption = '{encryption}'; \
                     ALTER USER postgres PASSWORD '{quoted}';"
                ),
                SQL_WITHIN,
            )?;
        }
        Ok(server)
    }

    fn data_dir(&self) -> PathBuf {
        self.base.join("data")
    }

    fn initdb(&self) -> Result<(), String> {
        let mut cmd = command(&pg_bindir().join("initdb"), &self.base);
        cmd.arg("-D")
            .arg(self.data_dir())
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8"])
            .args(["--locale=C", "--no-sync", "--no-instructions"]);
        match run_within(cmd, Duration::from_secs(120))? {
            (true, _, _) => {}
            (false, out, err) => return Err(format!("initdb failed: {out}{err}")),
        }
        let method = match (&self.config.password, self.config.auth) {
            (None, _) => "trust",
            (Some(_), PgAuth::ScramSha256) => "scram-sha-256",
            (Some(_), PgAuth::Md5) => "md5",
        };
        let hba = format!(
            "local all all trust\n\
             host all all 127.0.0.1/32 {method}\n\
             host all all ::1/128 {method}\n"
        );
        std::fs::write(self.data_dir().join("pg_hba.conf"), hba)
            .map_err(|e| format!("write pg_hba.conf: {e}"))
    }

    /// Spawns the postmaster on `self.port` and waits until it accepts
    /// connections.
    fn spawn(&mut self) -> Result<(), String> {
        let data = self.data_dir();
        // A postmaster that was killed leaves its pid file; ours is gone
        // (we waited for it), so the file is stale.
        let _ = std::fs::remove_file(data.join("postmaster.pid"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.base.join("postgres.log"))
            .map_err(|e| format!("open log: {e}"))?;
        if let Some(o) = run_as() {
            let _ = std::os::unix::fs::chown(self.base.join("postgres.log"), Some(o.uid), None);
        }
        let mut cmd = command(&pg_bindir().join("postgres"), &self.base);
        cmd.arg("-D")
            .arg(&data)
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", self.base.display()))
            .args(["-c", "fsync=off"])
            .args(["-c", "full_page_writes=off", "-c", "shared_buffers=32MB"])
            .args([
                "-c",
                "max_connections=200",
                "-c",
                "log_min_messages=warning",
            ])
            .args(["-c", "logging_collector=off"]);
        for (name, value) in &self.config.settings {
            cmd.arg("-c").arg(format!("{name}={value}"));
        }
        let err_log = log.try_clone().map_err(|e| e.to_string())?;
        cmd.stdout(log).stderr(err_log);
        let port = self.port;
        self.process
            .spawn(cmd, Some(&self.base.join("postgres.log")), |pid| {
                pid_file_ready(&data, pid) && TcpStream::connect(("127.0.0.1", port)).is_ok()
            })
    }

    /// The port it listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`, with the password if
    /// one is set.
    pub fn url(&self) -> String {
        match &self.config.password {
            Some(p) => format!(
                "postgres://postgres:{}@127.0.0.1:{}/postgres",
                percent_encode(p),
                self.port
            ),
            None => format!("postgres://postgres@127.0.0.1:{}/postgres", self.port),
        }
    }

    /// The folder holding the unix socket (`.s.PGSQL.PORT`); libpq-style
    /// URLs reach it as `postgres://postgres@/postgres?host=DIR&port=PORT`.
    pub fn socket_dir(&self) -> PathBuf {
        self.base.clone()
    }

    /// The password set for `postgres`, if any.
    pub fn password(&self) -> Option<&str> {
        self.config.password.as_deref()
    }

    /// The postmaster's process id (panics if it is stopped).
    pub fn pid(&self) -> u32 {
        self.process.pid().expect("server is running")
    }

    /// The server's processes: the postmaster first, then its live
    /// children (backends and auxiliary processes), read from /proc.
    pub fn pids(&self) -> Vec<i32> {
        self.process.pids()
    }

    /// Runs `sql` with psql over the unix socket (as `postgres`, trust)
    /// and returns its unaligned, tuples-only output (`|`-separated
    /// columns, one row a line). Panics on an SQL error or after 20 s.
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql, SQL_WITHIN)
            .unwrap_or_else(|e| panic!("psql failed: {e}"))
    }

    /// [`PgServer::sql`] returning the error (psql's stderr, or the
    /// deadline passing) instead of panicking.
    pub fn try_sql(&self, sql: &str, within: Duration) -> Result<String, String> {
        let mut cmd = Command::new(pg_bindir().join("psql"));
        cmd.current_dir(&self.base)
            .stdin(Stdio::null())
            .arg("-h")
            .arg(&self.base)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
            ])
            .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .env("PGCONNECT_TIMEOUT", "5")
            .env_remove("PGPASSWORD")
            .env_remove("PGSERVICE");
        client_output(cmd, within)
    }

    /// Stops the postmaster and every backend with SIGSTOP: connections
    /// stay open, the kernel still accepts and buffers, nothing answers.
    /// Its clock keeps running. No-op if already frozen.
    pub fn freeze(&mut self) {
        self.process.freeze();
    }

    /// Resumes a frozen server (SIGCONT, the backends first); it then
    /// serves what was buffered.
    pub fn thaw(&mut self) {
        self.process.thaw();
    }

    /// Whether [`PgServer::freeze`] is in force.
    pub fn is_frozen(&self) -> bool {
        self.process.is_frozen()
    }

    /// Stops the server (fast shutdown: open connections are closed) and
    /// starts it again on the same port with the same data. Panics if it
    /// won't come back.
    pub fn restart(&mut self) {
        self.restart_after(Duration::ZERO);
    }

    /// [`PgServer::restart`] with the port left dead for `downtime` in
    /// between (connections are refused then).
    pub fn restart_after(&mut self, downtime: Duration) {
        self.process.shutdown(libc::SIGINT);
        std::thread::sleep(downtime);
        self.respawn();
    }

    /// Kills the server as a crash would (SIGKILL to the postmaster and
    /// every backend) and starts it again on the same port; it recovers
    /// committed data from its WAL.
    pub fn crash_restart(&mut self) {
        // Backends of a killed postmaster exit on their own; kill() makes
        // sure.
        self.process.kill();
        self.respawn();
    }

    fn respawn(&mut self) {
        retry_for(POSTGRES.start_within, Duration::from_millis(50), || {
            self.spawn()
        })
        .unwrap_or_else(|e| panic!("postgres did not come back on port {}: {e}", self.port));
    }

    /// Stops the server (immediate shutdown: SIGQUIT, without waiting for
    /// a checkpoint) and removes its folder. Idempotent; Drop calls it.
    pub fn stop(&mut self) {
        self.process.shutdown(libc::SIGQUIT);
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `postmaster.pid` in `data` names `pid` and says `ready`.
fn pid_file_ready(data: &Path, pid: u32) -> bool {
    let Ok(text) = std::fs::read_to_string(data.join("postmaster.pid")) else {
        return false;
    };
    let lines: Vec<&str> = text.lines().collect();
    lines.first().map(|l| l.trim()) == Some(&pid.to_string())
        && lines.get(7).map(|l| l.trim()) == Some("ready")
}

/// A throwaway PgBouncer in `pool_mode = transaction` in front of a
/// [`PgServer`], on its own free loopback port: session state (LISTEN,
/// advisory locks, prepared statements across transactions) does not
/// survive between transactions through it, as with a production pooler.
pub struct PgBouncer {
    process: ServerProcess,
    port: u16,
    base: PathBuf,
    password: Option<String>,
}

impl PgBouncer {
    /// Starts one in front of `server` (every database name is forwarded
    /// to it), with a small server pool (5 connections). Panics if
    /// pgbouncer is missing or won't come up.
    pub fn start(server: &PgServer) -> PgBouncer {
        Self::start_with_pool(server, 5)
    }

    /// [`PgBouncer::start`] with `pool_size` server connections per
    /// user and database.
    pub fn start_with_pool(server: &PgServer, pool_size: u32) -> PgBouncer {
        first_success(3, "pgbouncer", || Self::try_start(server, pool_size))
    }

    fn try_start(server: &PgServer, pool_size: u32) -> Result<PgBouncer, String> {
        let port = free_port();
        let owner = run_as();
        let base = make_base("mistri-pgbouncer", port, owner);
        let mut bouncer = PgBouncer {
            process: ServerProcess::new(&PGBOUNCER),
            port,
            base,
            password: server.password().map(str::to_owned),
        };
        let (auth_type, secret) = match server.password() {
            // pgbouncer 1.18 does SCRAM to both sides from a plain-text
            // userlist entry.
            Some(p) => ("scram-sha-256", p.replace('"', "\"\"")),
            None => ("trust", String::new()),
        };
        let server_password = match server.password() {
            Some(p) => format!(" password={}", p.replace('\'', "\\'")),
            None => String::new(),
        };
        let ini = format!(
            "[databases]\n\
             * = host=127.0.0.1 port={pg_port}{server_password}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = {auth_type}\n\
             auth_file = {base}/userlist.txt\n\
             pool_mode = transaction\n\
             default_pool_size = {pool_size}\n\
             max_client_conn = 500\n\
             ignore_startup_parameters = extra_float_digits,search_path,options\n\
             logfile = {base}/pgbouncer.log\n\
             pidfile =\n\
             admin_users = postgres\n\
             server_check_delay = 0\n",
            pg_port = server.port(),
            base = bouncer.base.display(),
        );
        let files = [
            ("pgbouncer.ini", ini),
            ("userlist.txt", format!("\"postgres\" \"{secret}\"\n")),
        ];
        for (name, text) in files {
            let path = bouncer.base.join(name);
            std::fs::write(&path, text).map_err(|e| format!("write {name}: {e}"))?;
            if let Some(o) = owner {
                let _ = std::os::unix::fs::chown(&path, Some(o.uid), Some(o.gid));
            }
        }
        let mut cmd = command(&pgbouncer_binary(), &bouncer.base);
        cmd.arg(bouncer.base.join("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let log = bouncer.base.join("pgbouncer.log");
        bouncer.process.spawn(cmd, Some(&log), |_| {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        })?;
        Ok(bouncer)
    }

    /// The port it listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres` for the bouncer's
    /// port (with the server's password, if any).
    pub fn url(&self) -> String {
        match &self.password {
            Some(p) => format!(
                "postgres://postgres:{}@127.0.0.1:{}/postgres",
                percent_encode(p),
                self.port
            ),
            None => format!("postgres://postgres@127.0.0.1:{}/postgres", self.port),
        }
    }

    /// Runs `sql` with psql through the bouncer (TCP); output as
    /// [`PgServer::sql`]. Panics on error or after 20 s.
    pub fn sql(&self, sql: &str) -> String {
        let mut cmd = Command::new(pg_bindir().join("psql"));
        cmd.current_dir(&self.base)
            .stdin(Stdio::null())
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", "postgres"])
            .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .env("PGCONNECT_TIMEOUT", "5");
        match &self.password {
            Some(p) => cmd.env("PGPASSWORD", p),
            None => cmd.env_remove("PGPASSWORD"),
        };
        client_output(cmd, SQL_WITHIN).unwrap_or_else(|e| panic!("psql via pgbouncer failed: {e}"))
    }

    /// Stops it (SIGINT: immediate shutdown) and removes its folder.
    pub fn stop(&mut self) {
        self.process.shutdown(libc::SIGINT);
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn pgbouncer_binary() -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin")])
        .map(|d| d.join("pgbouncer"))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!("pgbouncer not found (install it: bash scripts/setup, or apt-get install pgbouncer)")
        })
}
