//! [`MySql`]: leases and flags in tables of a MySQL or MariaDB database
//! (the one a Rails, Laravel or Django fleet already runs). See
//! `docs/MYSQL.md`.
//!
//! - **Tables** with a prefix (`prefix=` in the URL, default `mistri_`):
//!   `leases` (one row per exclusive lease or per slot), `fences` (the
//!   per-key counter), `flags`, `queue` (waiting lines), `fence_seen`,
//!   `meta` (the schema version); all InnoDB. The namespace is a column.
//!   [`sql`] has every statement.
//! - **Rows, not `GET_LOCK`**: every operation is one `CALL` of a
//!   procedure (one short transaction) or one autocommit statement, or the
//!   beat's one short transaction, on any pooled connection, with no
//!   session state (no `@variables`, no `LAST_INSERT_ID`, no `GET_LOCK`
//!   but the schema's one-time creation). The database clock decides
//!   expiry; fences are `GREATEST(counter + 1, database clock in µs)`.
//! - **Deadlocks** (1213, also a Galera certification failure) and lock
//!   wait timeouts (1205) roll the transaction back; the call is tried
//!   again within its deadline (a refused try, never an error to the user
//!   while time is left).
//! - **No listener**: MySQL has no LISTEN/NOTIFY. The push of the other
//!   backends is a poll here ([`poller`]): while the process watches a stop
//!   flag or waits in a line, one connection on the listener's thread asks
//!   every 200 ms, in ONE query for all of them, which flags are raised and
//!   which lines may take their lease; the heartbeat's one batched
//!   statement per tick reads the flags too.
//! - **The client** ([`conn`]): the MySQL protocol driven by hand over std
//!   sockets, each call with a wall-clock deadline; a connection that saw
//!   an I/O error or a timeout is dropped, never reused; an idle pooled
//!   one the server closed (restart, `wait_timeout`) is noticed before use.

pub(crate) mod conn;
mod ops;
mod poller;
pub(crate) mod sql;
pub(crate) mod url;

use crate::error::{Error, Result};
use crate::runtime::fork::ForkLocal;
use crate::runtime::pool::IdlePool;
use conn::{Conn, Row, ServerError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use url::MyConfig;

pub use url::DEFAULT_PREFIX;

/// Connect, read and write timeout of every operation (as on Postgres).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// A MySQL / MariaDB backend. Cheap to share: wrap it in [`crate::Locks`]
/// once and clone that.
///
/// # Examples
/// ```no_run
/// use mistri_locks::Locks;
/// let locks = Locks::open("mysql://app:secret@127.0.0.1:3306/app")?;
/// # Ok::<(), mistri_locks::Error>(())
/// ```
pub struct MySql {
    pub(crate) cfg: MyConfig,
    pub(crate) namespace: String,
    /// `host:port`, for messages; never the password.
    pub(crate) addr: String,
    pub(crate) timeout: Duration,
    pool: IdlePool<Conn>,
    /// The watchers of this adapter's poller (one per process).
    pub(crate) push: ForkLocal<Arc<crate::contract::push::Registry>>,
    /// The schema was found (or made) at this client's version.
    ready: AtomicBool,
}

impl std::fmt::Debug for MySql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySql")
            .field("addr", &self.addr)
            .field("prefix", &self.cfg.prefix)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl MySql {
    /// An adapter for `url` (`mysql://user:password@host:port/database?…`
    /// or `mariadb://…`), with keys under `namespace`. Connects lazily:
    /// the first operation connects, checks the server's settings and
    /// makes (or checks) the tables.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad URL or another backend's URL;
    /// [`Error::InvalidArgument`] for an empty namespace, a zero timeout
    /// or an unknown option.
    pub fn open(url: &str, namespace: &str) -> Result<MySql> {
        crate::backend::check_family(url, crate::backend::Family::MySql)?;
        Self::with_timeout(url, namespace, DEFAULT_TIMEOUT)
    }

    /// [`MySql::open`] with another per-operation timeout.
    ///
    /// # Errors
    /// As [`MySql::open`].
    pub fn with_timeout(url: &str, namespace: &str, timeout: Duration) -> Result<MySql> {
        crate::args::check_namespace(namespace)?;
        crate::args::check_duration("timeout", timeout)?;
        let cfg = url::parse(url)?;
        if cfg.ssl != url::SslMode::Disabled {
            // rustls needs a process-wide provider; another library may
            // have installed one already, which is just as good.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        Ok(MySql {
            addr: cfg.describe(),
            cfg,
            namespace: namespace.to_owned(),
            timeout,
            pool: IdlePool::default(),
            push: crate::contract::push::fork_local_registry(),
            ready: AtomicBool::new(false),
        })
    }

    /// The full DDL for `prefix`: the tables and procedures, statements
    /// separated by lines of `$$` (for teams whose app user may not run
    /// DDL; `DELIMITER $$` in the `mysql` client).
    ///
    /// # Errors
    /// [`Error::Config`] for a bad prefix.
    pub fn schema_sql(prefix: &str) -> Result<String> {
        url::check_prefix(prefix)?;
        let mut out = Vec::new();
        for table in sql::TABLES {
            out.push(sql::with_prefix(table, prefix));
        }
        for (name, body) in sql::PROCEDURES {
            out.push(format!(
                "DROP PROCEDURE IF EXISTS {}",
                sql::with_prefix(name, prefix)
            ));
            out.push(sql::with_prefix(body, prefix));
        }
        out.push(sql::with_prefix(&Self::version_upsert(), prefix));
        Ok(out.join("\n$$\n") + "\n$$\n")
    }

    fn version_upsert() -> String {
        format!(
            "INSERT INTO @Pmeta (id, version) VALUES (1, {v}) ON DUPLICATE KEY UPDATE version = GREATEST(version, {v})",
            v = sql::VERSION
        )
    }

    /// The key namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The table prefix.
    pub fn prefix(&self) -> &str {
        &self.cfg.prefix
    }

    /// `sql` with this adapter's prefix.
    pub(crate) fn p(&self, sql: &str) -> String {
        sql::with_prefix(sql, &self.cfg.prefix)
    }

    /// A pooled connection that is still open (and `true`), or a new one
    /// connected and checked by `deadline`.
    fn checkout(&self, deadline: Instant) -> Result<Conn> {
        while let Some(mut con) = self.pool.take("", 0) {
            if con.alive() {
                return Ok(con);
            }
        }
        let mut con = Conn::connect(&self.cfg, deadline)?;
        self.check_session(&mut con, deadline)?;
        Ok(con)
    }

    fn checkin(&self, con: Conn) {
        if !con.broken {
            self.pool.put("", 0, con);
        }
    }

    /// Runs `sql` on a pooled connection by `deadline` (capped by the
    /// timeout), making the schema first if needed. A deadlock or lock
    /// wait timeout is tried again while time is left; a connection that
    /// timed out or failed is dropped.
    pub(crate) fn run_by(&self, sql: &str, deadline: Instant) -> Result<Vec<Row>> {
        let deadline = deadline.min(Instant::now() + self.timeout);
        conn::left(deadline, &self.addr)?;
        let mut con = self.checkout(deadline)?;
        if !self.ready.load(Ordering::Acquire) {
            self.ensure_schema(&mut con, deadline)?;
        }
        let mut pause = Duration::from_millis(1);
        loop {
            match con.query(sql, deadline) {
                Ok(Ok(rows)) => {
                    self.checkin(con);
                    return Ok(rows);
                }
                // The write failed: the server never got it. Once more on
                // a fresh connection, within the same deadline.
                Err(Error::Connection(_)) if con.unsent => {
                    con = Conn::connect(&self.cfg, deadline)?;
                    self.check_session(&mut con, deadline)?;
                    match con.query(sql, deadline)? {
                        Ok(rows) => {
                            self.checkin(con);
                            return Ok(rows);
                        }
                        Err(e) => return Err(self.failed(con, e, deadline)),
                    }
                }
                Err(e) => return Err(e),
                Ok(Err(e)) if e.retryable() => {
                    // Rolled back (a batch that stopped at the error may
                    // have left its transaction open: end it).
                    if !matches!(con.query("ROLLBACK", deadline), Ok(Ok(_))) {
                        con.broken = true;
                    }
                    let jitter = u64::from(getrandom::u32().unwrap_or(0) % 4);
                    let nap = pause + Duration::from_millis(jitter);
                    if Instant::now() + nap >= deadline || con.broken {
                        return Err(Error::Connection(format!(
                            "MySQL at {} kept refusing with deadlocks until the deadline: {} ({})",
                            self.addr, e.message, e.code
                        )));
                    }
                    std::thread::sleep(nap);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Ok(Err(e)) => return Err(self.failed(con, e, deadline)),
            }
        }
    }

    /// A server error: the transaction a batch may have left open is
    /// rolled back, the connection pooled if still whole.
    fn failed(&self, mut con: Conn, e: ServerError, deadline: Instant) -> Error {
        if matches!(con.query("ROLLBACK", deadline), Ok(Ok(_))) {
            self.checkin(con);
        }
        e.into_error(&self.addr)
    }

    /// [`MySql::run_by`] within the timeout.
    pub(crate) fn run(&self, sql: &str) -> Result<Vec<Row>> {
        self.run_by(sql, Instant::now() + self.timeout)
    }

    /// The session settings the statements rely on, read once per new
    /// connection (one round trip): refused when they break the promise.
    fn check_session(&self, con: &mut Conn, deadline: Instant) -> Result<()> {
        let rows = con
            .query(
                "SHOW VARIABLES WHERE Variable_name IN ('read_only', 'super_read_only', \
                 'innodb_read_only', 'autocommit', 'tx_isolation', 'transaction_isolation', \
                 'log_bin', 'binlog_format')",
                deadline,
            )?
            .map_err(|e| e.into_error(&self.addr))?;
        let value_of = |name: &str| {
            rows.iter()
                .find(|r| r.first().and_then(|c| c.as_deref()) == Some(name))
                .and_then(|r| r.get(1).cloned().flatten())
                .map(|v| v.to_ascii_uppercase())
        };
        let statement_binlog = matches!(value_of("log_bin").as_deref(), Some("ON" | "1"))
            && value_of("binlog_format").as_deref() == Some("STATEMENT");
        for row in &rows {
            let (Some(Some(name)), Some(Some(value))) = (row.first(), row.get(1)) else {
                continue;
            };
            let value = value.to_ascii_uppercase();
            let why = match (name.as_str(), value.as_str()) {
                ("binlog_format", _) if statement_binlog => "binlog_format is STATEMENT with the binary log on: InnoDB refuses the procedures' READ COMMITTED writes under it; use ROW or MIXED".to_owned(),
                ("read_only" | "super_read_only" | "innodb_read_only", "ON" | "1") => format!(
                    "{name} is ON: this server takes no writes (a replica, or a demoted primary); point the URL at the primary"
                ),
                ("autocommit", "OFF" | "0") => "autocommit is OFF for new sessions (init_connect or the server's default): the single statements would leave transactions open; set autocommit=1".to_owned(),
                ("tx_isolation" | "transaction_isolation", "READ-UNCOMMITTED") => format!(
                    "{name} is READ-UNCOMMITTED: the procedures must not read uncommitted rows; use REPEATABLE-READ or READ-COMMITTED"
                ),
                _ => continue,
            };
            con.broken = true;
            return Err(Error::Config(format!("MySQL at {}: {why}", self.addr)));
        }
        Ok(())
    }

    /// Finds the schema at this client's version, or makes it.
    fn ensure_schema(&self, con: &mut Conn, deadline: Instant) -> Result<()> {
        match con.query(&self.p(sql::READ_VERSION), deadline)? {
            Ok(rows) => match version_of(&rows) {
                Some(v) if v == sql::VERSION => {}
                Some(v) if v > sql::VERSION => return Err(self.newer(v)),
                _ => self.make_schema(con, deadline)?,
            },
            // No table yet.
            Err(ServerError { code: 1146, .. }) => self.make_schema(con, deadline)?,
            Err(e) => return Err(e.into_error(&self.addr)),
        }
        self.check_engines(con, deadline)?;
        self.ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Makes (or upgrades) the schema under a named lock (`GET_LOCK`, held
    /// for this one-time step only; the connection is dropped after).
    fn make_schema(&self, con: &mut Conn, deadline: Instant) -> Result<()> {
        let secs = conn::left(deadline, &self.addr)?.as_secs().max(1);
        // 53 characters whatever the database's name (MySQL refuses lock
        // names over 64).
        let lock = format!(
            "CONCAT('mistri_locks:', SHA1(CONCAT(DATABASE(), '/', {})))",
            sql::hex(self.cfg.prefix.as_bytes())
        );
        let got = con
            .query(&format!("SELECT GET_LOCK({lock}, {secs})"), deadline)?
            .map_err(|e| e.into_error(&self.addr))?;
        // The lock is the session's: this connection is not pooled again.
        con.broken = true;
        if version_of(&got) != Some(1) {
            return Err(Error::Connection(format!(
                "MySQL at {}: another process held the schema lock until the deadline",
                self.addr
            )));
        }
        let ddl_error = |e: ServerError| {
            let hint = if matches!(e.code, 1142 | 1044 | 1227 | 1370) {
                " (this user may not create it: run the DDL of MySql::schema_sql as an owner)"
            } else {
                ""
            };
            Error::Config(format!(
                "cannot create the mistri_locks tables (prefix {:?}) on MySQL at {}: {} ({}){hint}",
                self.cfg.prefix, self.addr, e.message, e.code
            ))
        };
        for table in sql::TABLES {
            con.query(&self.p(table), deadline)?.map_err(ddl_error)?;
        }
        let found = match con.query(&self.p(sql::READ_VERSION), deadline)? {
            Ok(rows) => version_of(&rows),
            Err(e) => return Err(e.into_error(&self.addr)),
        };
        match found {
            Some(v) if v > sql::VERSION => return Err(self.newer(v)),
            Some(v) if v == sql::VERSION => return Ok(()),
            _ => {}
        }
        for (name, body) in sql::PROCEDURES {
            con.query(
                &format!("DROP PROCEDURE IF EXISTS {}", self.p(name)),
                deadline,
            )?
            .map_err(ddl_error)?;
            con.query(&self.p(body), deadline)?.map_err(ddl_error)?;
        }
        con.query(&self.p(&Self::version_upsert()), deadline)?
            .map_err(ddl_error)?;
        Ok(())
    }

    /// Every table of the prefix must be InnoDB (`enforce_storage_engine`
    /// or a missing `NO_ENGINE_SUBSTITUTION` can swap it silently).
    fn check_engines(&self, con: &mut Conn, deadline: Instant) -> Result<()> {
        let prefix = &self.cfg.prefix;
        let rows = con
            .query(
                &format!(
                    "SELECT TABLE_NAME, ENGINE FROM information_schema.TABLES \
                     WHERE TABLE_SCHEMA = DATABASE() AND LEFT(TABLE_NAME, {}) = '{prefix}'",
                    prefix.len()
                ),
                deadline,
            )?
            .map_err(|e| e.into_error(&self.addr))?;
        for row in &rows {
            let engine = row.get(1).cloned().flatten().unwrap_or_default();
            if !engine.eq_ignore_ascii_case("InnoDB") {
                let table = row.first().cloned().flatten().unwrap_or_default();
                return Err(Error::Config(format!(
                    "MySQL at {}: table {table} uses the {engine} engine, not InnoDB: row locks and crash recovery are InnoDB's (ALTER TABLE {table} ENGINE=InnoDB)",
                    self.addr
                )));
            }
        }
        Ok(())
    }

    fn newer(&self, v: i64) -> Error {
        Error::Config(format!(
            "the mistri_locks tables (prefix {:?}) on MySQL at {} are at version {v}, newer than this client's {}: upgrade mistri_locks",
            self.cfg.prefix,
            self.addr,
            sql::VERSION
        ))
    }
}

fn version_of(rows: &[Row]) -> Option<i64> {
    rows.first()?.first()?.as_deref()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the beat relies on: each statement of a multi-statement batch
    /// reads the database clock anew (the `UPDATE` after the locking read
    /// sees the time after the locks), and a connection the server closed
    /// while idle is noticed before reuse.
    #[test]
    fn a_batch_reads_the_clock_per_statement_and_closed_connections_are_noticed() {
        let server = mistri_locks_testkit::MariaDbServer::start();
        let cfg = url::parse(&server.url()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut con = Conn::connect(&cfg, deadline).unwrap();
        let rows = con
            .query(
                &format!("SELECT {n}; DO SLEEP(0.3); SELECT {n}", n = sql::NOW_US),
                deadline,
            )
            .unwrap()
            .unwrap();
        let us: Vec<i64> = rows
            .iter()
            .map(|r| r[0].as_deref().unwrap().parse().unwrap())
            .collect();
        assert_eq!(us.len(), 2, "{rows:?}");
        assert!(us[1] - us[0] >= 300_000, "{us:?}");
        // Within one statement the clock is the statement's start.
        let rows = con
            .query(
                &format!("SELECT {n}, SLEEP(0.3), {n}", n = sql::NOW_US),
                deadline,
            )
            .unwrap()
            .unwrap();
        assert_eq!(rows[0][0], rows[0][2], "{rows:?}");
        assert!(con.alive());
        let id = con
            .query("SELECT CONNECTION_ID()", deadline)
            .unwrap()
            .unwrap();
        server.sql(&format!("KILL CONNECTION {}", id[0][0].as_deref().unwrap()));
        let gone = Instant::now() + Duration::from_secs(10);
        while con.alive() && Instant::now() < gone {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!con.alive(), "a killed connection still looks alive");
    }
}
