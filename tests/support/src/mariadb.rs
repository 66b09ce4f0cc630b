//! A throwaway MariaDB server on loopback, for tests and benchmarks:
//! [`MariaDbServer`] (`mariadb-install-db` into a temporary folder, then
//! `mariadbd` on a free 127.0.0.1 port).
//!
//! - **Binaries**: Debian's `mariadb-server` and `mariadb-client` (10.11 on
//!   bookworm) put `mariadbd` in `/usr/sbin` and `mariadb-install-db` and
//!   `mariadb` in `/usr/bin`; they are looked up on PATH and there, and
//!   `MARIADB_BINDIR` overrides. Install them with `bash scripts/setup`.
//!   Every program gets `--no-defaults`: no `/etc/mysql` file or `~/.my.cnf`
//!   changes what the tests see.
//! - **Root**: `mariadbd` refuses to run as root unless told
//!   `--user=root`, which it then does without changing its uid. That is
//!   chosen over the `mysql` user because a change of credentials clears
//!   `PR_SET_PDEATHSIG` (below). As any other user it runs as that user.
//! - **Lifetime**: `mariadbd` is one process (threads, no children),
//!   spawned directly and told to die with the thread that started it
//!   (`PR_SET_PDEATHSIG`, SIGKILL), so a test killed outright leaves no
//!   server behind. [`Drop`] (also while a panicking test unwinds) kills it
//!   and removes the folder. The process handling (spawn, readiness
//!   deadline, freeze, shutdown, kill) is `server_process`'s, shared with
//!   the other harnesses; this module says what is MariaDB's.
//! - **Accounts**: `root` has no password and is reached over the unix
//!   socket inside the temporary folder ([`MariaDbServer::sql`]); the
//!   clients under test get a database `mistri` and a user `mistri` with a
//!   password, over TCP ([`MariaDbServer::url`]), holding every privilege
//!   on that database and none beyond it (no PROCESS, no CONNECTION ADMIN).
//! - **Settings** (each keeps or drops one promise):
//!   - `innodb_flush_log_at_trx_commit=2`: a commit has written its redo
//!     log to the kernel (not fsynced) when it returns, so it survives
//!     [`MariaDbServer::restart`] and [`MariaDbServer::crash_restart`] (a
//!     SIGKILL of the process), not a crash of the machine. (`0` would
//!     lose up to a second of commits to a SIGKILL; `1` adds an fsync per
//!     commit, which only a machine crash needs.)
//!   - `innodb_doublewrite=0`: torn pages come only from a machine crash.
//!   - `skip-log-bin`, `performance_schema=OFF`, a 32 MiB buffer pool, a
//!     16 MiB redo log, ibdata1 grown 8 MiB at a time: speed and size; no
//!     promise involved.
//!   - `max_connections=1000` (the default is 151): the study runs 200
//!     polling processes at once.
//!   - `character_set_server=utf8mb4`, `skip-name-resolve`,
//!     `bind_address=127.0.0.1`.
//! - **Folder**: under `/dev/shm` where it is writable (fsync is free on a
//!   tmpfs; see `scratch_parent`), else the temp dir; about 35 MB each. A
//!   folder left by a process that is gone (killed before Drop) is removed
//!   by the next start.
//!
//! SQL from the tests goes through the `mariadb` client over the unix
//! socket as root, with a wall-clock deadline: [`MariaDbServer::sql`].

use crate::server_process::{
    client_output, first_success, free_port, fresh_folder, log_tail, percent_encode, retry_for,
    run_within, Kind, ServerProcess,
};
use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long `mariadb-install-db`, or a start, or a stop may take;
/// `mariadbd` dies of SIGKILL with the test's thread.
const MARIADBD: Kind = Kind {
    name: "mariadbd",
    install: "bash scripts/setup",
    start_within: Duration::from_secs(60),
    stop_within: Duration::from_secs(20),
    poll: Duration::from_millis(10),
    death_signal: libc::SIGKILL,
};
/// Default deadline of [`MariaDbServer::sql`].
const SQL_WITHIN: Duration = Duration::from_secs(20);

/// The database, user and password the URL carries.
pub const MARIADB_DATABASE: &str = "mistri";
/// See [`MARIADB_DATABASE`].
pub const MARIADB_USER: &str = "mistri";
/// See [`MARIADB_DATABASE`]; it has a character a URL must percent-encode.
pub const MARIADB_PASSWORD: &str = "pw:mistri/41";

/// The folder of a MariaDB program, or a panic that says how to install it.
pub fn mariadb_program(name: &str) -> PathBuf {
    static DIRS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    let dirs = DIRS.get_or_init(|| {
        let mut dirs: Vec<PathBuf> = std::env::var_os("MARIADB_BINDIR")
            .map(PathBuf::from)
            .into_iter()
            .collect();
        if let Some(path) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&path));
        }
        dirs.extend(["/usr/sbin", "/usr/bin"].map(PathBuf::from));
        dirs
    });
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "{name} not found (MARIADB_BINDIR, PATH, /usr/sbin, /usr/bin); install it: \
                 bash scripts/setup (apt-get install mariadb-server mariadb-client)"
            )
        })
}

fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Where the temporary folders go: `/dev/shm` (a tmpfs, where an fsync
/// costs nothing: `mariadb-install-db` takes 0.6 s there and 3.5 s on this
/// machine's disk) when it is a writable folder, else the temp dir.
/// `MARIADB_SCRATCH` overrides. A commit still reaches the kernel before it
/// returns, so what a SIGKILL of the server may not lose it does not.
fn scratch_parent() -> PathBuf {
    if let Some(dir) = std::env::var_os("MARIADB_SCRATCH") {
        return PathBuf::from(dir);
    }
    let parent = scratch_dir();
    sweep_leftovers(&parent);
    parent
}

/// Removes `mistri-mariadb-PID-PORT` folders under `parent` whose process
/// is gone (a test killed before Drop: its server died with it, the
/// folder stayed, in memory on a tmpfs). Once per process.
fn sweep_leftovers(parent: &Path) {
    static SWEPT: OnceLock<()> = OnceLock::new();
    SWEPT.get_or_init(|| {
        let Ok(entries) = std::fs::read_dir(parent) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(rest) = name
                .to_str()
                .and_then(|n| n.strip_prefix("mistri-mariadb-"))
            else {
                continue;
            };
            let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
}

fn scratch_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let probe = shm.join(format!("mistri-mariadb-probe-{}", std::process::id()));
    // A container's /dev/shm may be 64 MiB; a server takes about 35 MB.
    if available_bytes(shm) >= 1 << 30 && std::fs::create_dir(&probe).is_ok() {
        let _ = std::fs::remove_dir(&probe);
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// Bytes free for an unprivileged user under `dir` (0 if unknown).
fn available_bytes(dir: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return 0;
    };
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and outlives the call; `st` is a
    // valid, writable statvfs.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    // The field types are narrower than u64 on some targets.
    #[allow(clippy::useless_conversion)]
    let (blocks, size) = (u64::from(st.f_bavail), u64::from(st.f_frsize));
    blocks.saturating_mul(size)
}

/// A MariaDB program with no option files read and no client variables
/// from the environment.
fn program(name: &str, dir: &Path) -> Command {
    let mut cmd = Command::new(mariadb_program(name));
    cmd.arg("--no-defaults")
        .current_dir(dir)
        .stdin(Stdio::null())
        .env_remove("MYSQL_PWD")
        .env_remove("MYSQL_HOST")
        .env_remove("MYSQL_TCP_PORT")
        .env_remove("MYSQL_UNIX_PORT");
    cmd
}

/// A running throwaway MariaDB server (module header).
pub struct MariaDbServer {
    process: ServerProcess,
    port: u16,
    base: PathBuf,
    /// Serves TLS too (`start_tls`): a certificate for 127.0.0.1 from a
    /// throwaway CA in the folder.
    tls: bool,
    install_took: Duration,
    start_took: Duration,
}

impl MariaDbServer {
    /// Installs a fresh data folder and starts a server on it, with the
    /// `mistri` database and user. Panics (a test helper) if the binaries
    /// are missing or it won't come up.
    pub fn start() -> MariaDbServer {
        Self::start_with(false)
    }

    /// [`MariaDbServer::start`] with TLS offered too (plain connections
    /// still work): a server certificate for 127.0.0.1 signed by a
    /// throwaway CA ([`MariaDbServer::ca_file`]), made by `openssl`.
    pub fn start_tls() -> MariaDbServer {
        Self::start_with(true)
    }

    /// The throwaway CA of a [`MariaDbServer::start_tls`] server.
    pub fn ca_file(&self) -> PathBuf {
        self.base.join("ca.pem")
    }

    fn start_with(tls: bool) -> MariaDbServer {
        first_success(3, "a MariaDB server", || Self::try_start(tls))
    }

    fn try_start(tls: bool) -> Result<MariaDbServer, String> {
        let port = free_port();
        let base = fresh_folder(&scratch_parent(), "mistri-mariadb", port)?;
        // From here on, `server`'s Drop removes the folder on failure.
        let mut server = MariaDbServer {
            process: ServerProcess::new(&MARIADBD),
            port,
            base,
            tls,
            install_took: Duration::ZERO,
            start_took: Duration::ZERO,
        };
        std::fs::create_dir(server.base.join("tmp")).map_err(|e| format!("create tmp: {e}"))?;
        let began = Instant::now();
        server.install()?;
        server.install_took = began.elapsed();
        if tls {
            crate::make_certificate(&server.base)?;
        }
        let began = Instant::now();
        server.spawn()?;
        server.start_took = began.elapsed();
        let quoted = MARIADB_PASSWORD.replace('\\', "\\\\").replace('\'', "\\'");
        server.try_sql_in(
            None,
            &format!(
                "CREATE DATABASE {MARIADB_DATABASE} CHARACTER SET utf8mb4; \
                 CREATE USER '{MARIADB_USER}'@'%' IDENTIFIED BY '{quoted}'; \
                 GRANT ALL ON {MARIADB_DATABASE}.* TO '{MARIADB_USER}'@'%'"
            ),
            SQL_WITHIN,
        )?;
        Ok(server)
    }

    /// `mariadb-install-db` into `base/data`: the system tables, `root`
    /// with no password, no test database.
    fn install(&self) -> Result<(), String> {
        let mut cmd = program("mariadb-install-db", &self.base);
        cmd.arg(format!("--datadir={}", self.data_dir().display()))
            .args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ])
            .args(Self::innodb_settings());
        if is_root() {
            cmd.arg("--user=root");
        }
        match run_within(cmd, MARIADBD.start_within)? {
            (true, _, _) => Ok(()),
            (false, out, err) => Err(format!("mariadb-install-db failed: {err}{out}")),
        }
    }

    /// Settings `mariadb-install-db` and `mariadbd` must agree on (the
    /// system tablespace and redo log are made by the first).
    fn innodb_settings() -> [&'static str; 6] {
        [
            "--innodb-buffer-pool-size=32M",
            // ibdata1 grows 8 MiB at a time, not 64: a server takes ~35 MB.
            "--innodb-autoextend-increment=8",
            "--innodb-log-file-size=16M",
            "--innodb-data-file-path=ibdata1:4M:autoextend",
            "--innodb-flush-log-at-trx-commit=2",
            "--innodb-doublewrite=0",
        ]
    }

    /// Starts `mariadbd` on the data folder and waits for its greeting.
    fn spawn(&mut self) -> Result<(), String> {
        let mut cmd = program("mariadbd", &self.base);
        cmd.arg(format!("--datadir={}", self.data_dir().display()))
            .arg(format!("--socket={}", self.socket_path().display()))
            .arg(format!(
                "--pid-file={}",
                self.base.join("mariadbd.pid").display()
            ))
            .arg(format!(
                "--log-error={}",
                self.base.join("error.log").display()
            ))
            .arg(format!("--tmpdir={}", self.base.join("tmp").display()))
            .arg(format!("--port={}", self.port))
            .args([
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--skip-log-bin",
                "--performance-schema=OFF",
                "--max-connections=1000",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_general_ci",
            ])
            .args(Self::innodb_settings())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.tls {
            for (option, file) in [
                ("ssl-ca", "ca.pem"),
                ("ssl-cert", "cert.pem"),
                ("ssl-key", "key.pem"),
            ] {
                cmd.arg(format!("--{option}={}", self.base.join(file).display()));
            }
        }
        if is_root() {
            // mariadbd keeps its credentials (`--user` names the current
            // user), so PR_SET_PDEATHSIG is not cleared later.
            cmd.arg("--user=root");
        }
        let port = self.port;
        self.process
            .spawn(cmd, Some(&self.base.join("error.log")), |_| {
                Self::greets(port)
            })
    }

    /// Whether the port answers with a protocol-10 handshake (mariadbd
    /// opens its port only once it is ready to serve).
    fn greets(port: u16) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut head = [0u8; 5];
        s.read_exact(&mut head).is_ok() && head[4] == 10
    }

    /// The last 2,000 bytes of the server's error log.
    pub fn log_tail(&self) -> String {
        log_tail(&self.base.join("error.log"))
    }

    fn data_dir(&self) -> PathBuf {
        self.base.join("data")
    }

    /// The unix socket root's [`MariaDbServer::sql`] goes through.
    pub fn socket_path(&self) -> PathBuf {
        self.base.join("mariadbd.sock")
    }

    /// The temporary folder (data, socket, log); gone after stop.
    pub fn dir(&self) -> PathBuf {
        self.base.clone()
    }

    /// How long the first start took: `mariadb-install-db`, then
    /// `mariadbd` until it greeted.
    pub fn startup(&self) -> (Duration, Duration) {
        (self.install_took, self.start_took)
    }

    /// The port it listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `mysql://mistri:PASSWORD@127.0.0.1:PORT/mistri` (the password
    /// percent-encoded).
    pub fn url(&self) -> String {
        format!(
            "mysql://{MARIADB_USER}:{}@127.0.0.1:{}/{MARIADB_DATABASE}",
            percent_encode(MARIADB_PASSWORD),
            self.port
        )
    }

    /// The server's process id (panics if it is stopped).
    pub fn pid(&self) -> u32 {
        self.process.pid().expect("server is running")
    }

    /// Runs `sql` (one or more `;`-separated statements) with the `mariadb`
    /// client over the unix socket, as root, in the `mistri` database, and
    /// returns its batch output without column names: tab-separated
    /// columns, one row a line. Panics on an SQL error or after 20 s.
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql, SQL_WITHIN)
            .unwrap_or_else(|e| panic!("mariadb client failed: {e}"))
    }

    /// [`MariaDbServer::sql`] returning the error (the client's stderr, or
    /// the deadline passing) instead of panicking.
    pub fn try_sql(&self, sql: &str, within: Duration) -> Result<String, String> {
        self.try_sql_in(Some(MARIADB_DATABASE), sql, within)
    }

    /// [`MariaDbServer::try_sql`] with statements ended by `delimiter`
    /// instead of `;`, for bodies of stored procedures (which hold `;`).
    pub fn try_sql_delimited(
        &self,
        sql: &str,
        delimiter: &str,
        within: Duration,
    ) -> Result<String, String> {
        self.run_client(Some(MARIADB_DATABASE), sql, Some(delimiter), within)
    }

    fn try_sql_in(&self, db: Option<&str>, sql: &str, within: Duration) -> Result<String, String> {
        self.run_client(db, sql, None, within)
    }

    fn run_client(
        &self,
        db: Option<&str>,
        sql: &str,
        delimiter: Option<&str>,
        within: Duration,
    ) -> Result<String, String> {
        let mut cmd = program("mariadb", &self.base);
        if let Some(d) = delimiter {
            cmd.arg(format!("--delimiter={d}"));
        }
        cmd.arg(format!("--socket={}", self.socket_path().display()))
            .args([
                "--protocol=SOCKET",
                "--user=root",
                "--batch",
                "--skip-column-names",
            ])
            .args(["--connect-timeout=5", "--execute", sql]);
        if let Some(db) = db {
            cmd.arg(format!("--database={db}"));
        }
        client_output(cmd, within)
    }

    /// Stops the server with SIGSTOP (every thread): connections stay
    /// open, the kernel still accepts and buffers, nothing answers. Its
    /// clock keeps running. Returns once every thread shows stopped.
    pub fn freeze(&mut self) {
        self.process.freeze();
    }

    /// Resumes a frozen server (SIGCONT); it then serves what was buffered.
    pub fn thaw(&mut self) {
        self.process.thaw();
    }

    /// Whether [`MariaDbServer::freeze`] is in force.
    pub fn is_frozen(&self) -> bool {
        self.process.is_frozen()
    }

    /// A normal shutdown (SIGTERM: connections are closed, InnoDB flushes)
    /// and a start on the same port with the same data. Panics if it won't
    /// come back.
    pub fn restart(&mut self) {
        self.restart_after(Duration::ZERO);
    }

    /// [`MariaDbServer::restart`] with the port left dead for `downtime`
    /// in between (connections are refused then).
    pub fn restart_after(&mut self, downtime: Duration) {
        self.process.shutdown(libc::SIGTERM);
        std::thread::sleep(downtime);
        self.respawn();
    }

    /// Killed as a crash would (SIGKILL) and started again on the same
    /// port and data folder; InnoDB recovers committed transactions from
    /// its redo log.
    pub fn crash_restart(&mut self) {
        self.process.kill();
        self.respawn();
    }

    fn respawn(&mut self) {
        retry_for(MARIADBD.start_within, Duration::from_millis(50), || {
            self.spawn()
        })
        .unwrap_or_else(|e| panic!("mariadbd did not come back on port {}: {e}", self.port));
    }

    /// Kills the server (SIGKILL: its data is thrown away) and removes its
    /// folder. Idempotent; Drop calls it.
    pub fn stop(&mut self) {
        self.process.kill();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

impl Drop for MariaDbServer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl crate::FaultServer for MariaDbServer {
    const KEEPS_DATA: bool = true;
    fn start() -> Self {
        MariaDbServer::start()
    }
    fn port(&self) -> u16 {
        MariaDbServer::port(self)
    }
    fn url(&self) -> String {
        MariaDbServer::url(self)
    }
    fn stop(&mut self) {
        MariaDbServer::stop(self);
    }
    fn freeze(&mut self) {
        MariaDbServer::freeze(self);
    }
    fn thaw(&mut self) {
        MariaDbServer::thaw(self);
    }
    fn restart_after(&mut self, downtime: Duration) {
        MariaDbServer::restart_after(self, downtime);
    }
    fn crash_restart(&mut self) {
        MariaDbServer::crash_restart(self);
    }
}

/// A minimal MySQL-protocol client for benchmarks' baselines and tests
/// that need a session of their own (`GET_LOCK`, a hand-written `UPDATE`):
/// the handshake for a user with NO password (create one with
/// [`MariaDbServer::sql`]), then `COM_QUERY` with text results (also the
/// client of `examples/mariadb_poll.rs`); std only, blocking, no deadline
/// beyond the socket timeouts given. A server error is `"CODE: message"`
/// (e.g. `1317: Query execution was interrupted`).
pub struct MariaDbClient {
    s: TcpStream,
    id: u64,
}

/// One row of a [`MariaDbClient`] result: text cells, `None` for NULL.
pub type MariaDbRow = Vec<Option<String>>;

impl MariaDbClient {
    /// Logs `user` (no password) in to the `mistri` database on `port`.
    pub fn connect(port: u16, user: &str) -> Result<MariaDbClient, String> {
        let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        let timeout = Some(Duration::from_secs(30));
        s.set_read_timeout(timeout).map_err(|e| e.to_string())?;
        let (_, hello) = client_read(&mut s)?;
        if hello.first() != Some(&10) {
            return Err(format!("not a protocol-10 greeting: {hello:?}"));
        }
        // The server version (NUL-ended), then the connection id.
        let nul = hello[1..]
            .iter()
            .position(|&b| b == 0)
            .ok_or("bad greeting")?
            + 1;
        let id_bytes: [u8; 4] = hello
            .get(nul + 1..nul + 5)
            .and_then(|b| b.try_into().ok())
            .ok_or("short greeting")?;
        let id = u64::from(u32::from_le_bytes(id_bytes));
        // PROTOCOL_41 | SECURE_CONNECTION | CONNECT_WITH_DB | PLUGIN_AUTH
        // | TRANSACTIONS | LONG_PASSWORD | MULTI_STATEMENTS | MULTI_RESULTS
        let caps: u32 = 0x200 | 0x8000 | 0x8 | 0x80000 | 0x2000 | 0x1 | 0x10000 | 0x20000;
        let mut p = Vec::new();
        p.extend_from_slice(&caps.to_le_bytes());
        p.extend_from_slice(&(16u32 << 20).to_le_bytes());
        p.push(45); // utf8mb4_general_ci
        p.extend_from_slice(&[0; 23]);
        p.extend_from_slice(user.as_bytes());
        p.push(0);
        p.push(0); // empty auth response
        p.extend_from_slice(MARIADB_DATABASE.as_bytes());
        p.extend_from_slice(b"\0mysql_native_password\0");
        client_write(&mut s, 1, &p)?;
        let (_, ok) = client_read(&mut s)?;
        match ok.first() {
            Some(0) => Ok(MariaDbClient { s, id }),
            _ => Err(format!("login refused: {}", String::from_utf8_lossy(&ok))),
        }
    }

    /// The server's id of this connection (`CONNECTION_ID()`, what
    /// `KILL QUERY` takes), from the greeting.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Runs `sql` (statements separated by `;` allowed): the rows of every
    /// result, or the server's error as `"CODE: message"`.
    pub fn query(&mut self, sql: &str) -> Result<Vec<MariaDbRow>, String> {
        let mut p = vec![3u8];
        p.extend_from_slice(sql.as_bytes());
        client_write(&mut self.s, 0, &p)?;
        let mut rows = Vec::new();
        loop {
            let (_, first) = client_read(&mut self.s)?;
            let status = match first.first() {
                Some(0) => {
                    let mut at = 1;
                    client_lenenc(&first, &mut at).ok_or("bad OK")?;
                    client_lenenc(&first, &mut at).ok_or("bad OK")?;
                    client_status(&first, at)
                }
                Some(0xff) => return Err(client_error(&first)),
                _ => {
                    let mut at = 0;
                    let columns = client_lenenc(&first, &mut at).ok_or("bad column count")?;
                    for _ in 0..columns {
                        client_read(&mut self.s)?;
                    }
                    client_read(&mut self.s)?; // EOF
                    loop {
                        let (_, p) = client_read(&mut self.s)?;
                        match p.first() {
                            Some(0xfe) if p.len() < 9 => break client_status(&p, 3),
                            Some(0xff) => return Err(client_error(&p)),
                            _ => {}
                        }
                        let mut at = 0;
                        let mut row = Vec::new();
                        for _ in 0..columns {
                            if p.get(at) == Some(&0xfb) {
                                at += 1;
                                row.push(None);
                                continue;
                            }
                            let n = client_lenenc(&p, &mut at).ok_or("bad row")? as usize;
                            let cell = p.get(at..at + n).ok_or("short row")?;
                            row.push(Some(String::from_utf8_lossy(cell).into_owned()));
                            at += n;
                        }
                        rows.push(row);
                    }
                }
            };
            if status & 0x0008 == 0 {
                return Ok(rows);
            }
        }
    }
}

/// An ERR packet as `"CODE: message"` (after the code, `#` and the
/// five-character SQL state).
fn client_error(p: &[u8]) -> String {
    let code = u16::from_le_bytes([
        p.get(1).copied().unwrap_or(0),
        p.get(2).copied().unwrap_or(0),
    ]);
    format!(
        "{code}: {}",
        String::from_utf8_lossy(p.get(9..).unwrap_or(&[]))
    )
}

fn client_status(p: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([
        p.get(at).copied().unwrap_or(0),
        p.get(at + 1).copied().unwrap_or(0),
    ])
}

fn client_lenenc(p: &[u8], at: &mut usize) -> Option<u64> {
    let first = *p.get(*at)?;
    *at += 1;
    let width = match first {
        0..=0xfa => return Some(u64::from(first)),
        0xfc => 2,
        0xfd => 3,
        0xfe => 8,
        _ => return None,
    };
    let mut v = 0u64;
    for i in 0..width {
        v |= u64::from(*p.get(*at + i)?) << (8 * i);
    }
    *at += width;
    Some(v)
}

fn client_read(s: &mut TcpStream) -> Result<(u8, Vec<u8>), String> {
    let mut head = [0u8; 4];
    s.read_exact(&mut head).map_err(|e| e.to_string())?;
    let len = usize::from(head[0]) | usize::from(head[1]) << 8 | usize::from(head[2]) << 16;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).map_err(|e| e.to_string())?;
    Ok((head[3], body))
}

fn client_write(s: &mut TcpStream, seq: u8, body: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let len = u32::try_from(body.len()).map_err(|_| "too long")?;
    let mut out = len.to_le_bytes()[..3].to_vec();
    out.push(seq);
    out.extend_from_slice(body);
    s.write_all(&out).map_err(|e| e.to_string())
}
