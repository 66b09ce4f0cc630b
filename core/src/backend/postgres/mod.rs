//! [`Postgres`]: leases and flags in tables of a PostgreSQL database (the
//! one a Rails or Django fleet already runs), shared by every process that
//! speaks the protocol in `docs/PROTOCOL.md` ("Postgres").
//!
//! - **Tables** in one schema (`schema=` in the URL, default
//!   `mistri_locks`): `leases` (one row per exclusive lease or per slot of
//!   an N-holder lease), `fences` (the per-key counter, shared by both),
//!   `flags`, `queue` (waiting lines), `fence_seen` (fencing at the
//!   resource), `meta` (the schema version). The namespace is a column, so
//!   several namespaces share the tables. [`sql`] has every statement.
//! - **Rows, not advisory locks**: every operation is ONE statement (most
//!   a call of a function installed with the schema) on any pooled
//!   connection, with no session state, so it works unchanged through
//!   PgBouncer's transaction pooling. The database clock
//!   (`clock_timestamp()`) decides expiry; fences are `max(counter + 1,
//!   database clock in µs)`.
//! - **Schema** created on first use, in one transaction serialized by a
//!   transaction-scoped advisory lock (`CREATE … IF NOT EXISTS`, `CREATE OR
//!   REPLACE FUNCTION`), versioned in `meta` (a newer version is refused);
//!   [`Postgres::schema_sql`] prints it for teams whose app role may not
//!   run DDL.
//! - **The client**: `postgres-protocol` (the codec alone) over std sockets
//!   driven here ([`conn`]), each call with a wall-clock deadline: no
//!   runtime, no thread, nothing that breaks `fork`.
//! - **Push** ([`crate::contract::push`]): `set_flag`, `release` and
//!   `break_lease` call `pg_notify` inside their statement, to the flag's
//!   channel / the head waiting line's channel only (a slot's release:
//!   the first `free` lines', schema version 3; names derived from an
//!   md5 of namespace, key and line: [`sql::channel`]). A process whose
//!   holds watch stop keys or whose lines wait keeps one direct connection
//!   per adapter on a listener thread ([`listener`]) `LISTEN`ing to exactly
//!   those channels. `listen=off` (a transaction pooler: `LISTEN` cannot
//!   work there) turns it off, and the tick is the floor; `listen_host` /
//!   `listen_port` point it at a direct connection instead.
//!
//! Connections: a small pool; a forked child drops the inherited ones
//! (closing its copies of the sockets, writing nothing) and opens its own.
//! A connection that saw an I/O error or a timeout is dropped, never
//! reused.

pub(crate) mod conn;
mod listener;
mod ops;
pub(crate) mod sql;
pub(crate) mod url;

use crate::error::{Error, Result};
use crate::runtime::fork::ForkLocal;
use crate::runtime::pool::IdlePool;
use conn::{Conn, Row, ServerError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use url::PgConfig;

pub use url::DEFAULT_SCHEMA;

/// Connect, read and write timeout of every operation (as on Redis).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The statements with the schema filled in, built once per adapter.
pub(crate) struct Statements {
    pub(crate) acquire: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) break_lease: String,
    pub(crate) leave_queue: String,
    pub(crate) held: String,
    pub(crate) expires_in: String,
    pub(crate) info: String,
    pub(crate) list_leases: String,
    pub(crate) list_flags: String,
    pub(crate) list_queues: String,
    pub(crate) set_flag: String,
    pub(crate) flag: String,
    pub(crate) clear_flag: String,
    pub(crate) beat: String,
    pub(crate) read_version: String,
    pub(crate) schema: String,
}

impl Statements {
    fn new(schema: &str) -> Statements {
        let s = |sql: &str| sql::in_schema(sql, schema);
        Statements {
            acquire: s(sql::ACQUIRE),
            renew: s(sql::RENEW),
            release: s(sql::RELEASE),
            break_lease: s(sql::BREAK),
            leave_queue: s(sql::LEAVE_QUEUE),
            held: s(sql::HELD),
            expires_in: s(sql::EXPIRES_IN),
            info: s(sql::INFO),
            list_leases: s(sql::LIST_LEASES),
            list_flags: s(sql::LIST_FLAGS),
            list_queues: s(ops::LIST_QUEUES),
            set_flag: s(sql::SET_FLAG),
            flag: s(sql::FLAG),
            clear_flag: s(sql::CLEAR_FLAG),
            beat: s(sql::BEAT),
            read_version: s(sql::READ_VERSION),
            schema: s(sql::SCHEMA),
        }
    }
}

/// A Postgres backend. Cheap to share: wrap it in [`crate::Locks`] once
/// and clone that.
///
/// # Examples
/// ```no_run
/// use mistri_locks::{Locks, Postgres};
/// let pg = Postgres::open("postgres://app@127.0.0.1/app", "mistri:locks")?;
/// let locks = Locks::new(pg);
/// # Ok::<(), mistri_locks::Error>(())
/// ```
pub struct Postgres {
    pub(crate) cfg: PgConfig,
    pub(crate) namespace: String,
    /// `host:port` or the socket path, for messages; never the password.
    pub(crate) addr: String,
    pub(crate) timeout: Duration,
    pool: IdlePool<Conn>,
    /// The watchers of this adapter's listener (one per process).
    pub(crate) push: ForkLocal<Arc<crate::contract::push::Registry>>,
    pub(crate) sql: Statements,
    /// The schema was found (or made) at this client's version.
    ready: AtomicBool,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres")
            .field("addr", &self.addr)
            .field("schema", &self.cfg.schema)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Postgres {
    /// An adapter for `url` (`postgres://user:password@host:port/dbname?…`,
    /// libpq's conventions plus `schema=`, `listen=off`, `listen_host=`,
    /// `listen_port=`; see `docs/PROTOCOL.md`), or a libpq key/value
    /// connection string (`host=h dbname=app user=u`), with keys under
    /// `namespace`.
    ///
    /// Connects lazily: an unreachable server is reported by the first
    /// operation, as [`Error::Connection`]; the schema is created (or
    /// checked) by the first operation too.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad URL (naming the part, the password
    /// masked) or another backend's URL (naming the schemes this takes and
    /// pointing to `open`); [`Error::InvalidArgument`] for an empty namespace.
    pub fn open(url: &str, namespace: &str) -> Result<Postgres> {
        Self::with_timeout(url, namespace, DEFAULT_TIMEOUT)
    }

    /// [`Postgres::open`] with another per-operation timeout than
    /// [`DEFAULT_TIMEOUT`].
    ///
    /// # Errors
    /// As [`Postgres::open`], and [`Error::InvalidArgument`] for a zero
    /// timeout.
    pub fn with_timeout(url: &str, namespace: &str, timeout: Duration) -> Result<Postgres> {
        // Another backend's URL: name ours and point to open.
        crate::backend::check_family(url, crate::backend::Family::Postgres)?;
        Self::with_schema(url, namespace, timeout, None)
    }

    /// [`Postgres::with_timeout`] with the tables in `schema` (None: the
    /// URL's `schema=`, else [`url::DEFAULT_SCHEMA`]); what
    /// [`crate::backend::open_with`] passes a typed `schema` option through,
    /// so no face writes it into the URL.
    ///
    /// # Errors
    /// As [`Postgres::with_timeout`], and [`Error::Config`] for a bad
    /// schema name; [`Error::InvalidArgument`] for a schema the URL names
    /// too.
    pub(crate) fn with_schema(
        url: &str,
        namespace: &str,
        timeout: Duration,
        schema: Option<&str>,
    ) -> Result<Postgres> {
        crate::args::check_namespace(namespace)?;
        crate::args::check_duration("timeout", timeout)?;
        let mut cfg = url::parse(url)?;
        if let Some(schema) = schema {
            url::check_schema(schema)?;
            // Both ways: which one the caller meant is not ours to guess.
            if cfg.schema_named {
                return Err(Error::InvalidArgument(format!(
                    "schema {schema:?} given twice: the URL has schema= too; give it once"
                )));
            }
            cfg.schema = schema.to_owned();
        }
        if cfg.ssl != url::SslMode::Disable {
            // rustls needs a process-wide provider; another library may
            // have installed one already, which is just as good.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        Ok(Postgres {
            addr: cfg.target.describe(),
            sql: Statements::new(&cfg.schema),
            cfg,
            namespace: namespace.to_owned(),
            timeout,
            pool: IdlePool::default(),
            push: crate::contract::push::fork_local_registry(),
            ready: AtomicBool::new(false),
        })
    }

    /// The full idempotent DDL of `schema` (what the first operation runs
    /// when the tables are missing; `mistri-locks schema` prints it).
    ///
    /// # Errors
    /// [`Error::Config`] when `schema` is not a plain lower-case identifier.
    pub fn schema_sql(schema: &str) -> Result<String> {
        url::check_schema(schema)?;
        Ok(sql::in_schema(sql::SCHEMA, schema))
    }

    /// The key namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The schema the tables are in.
    pub fn schema(&self) -> &str {
        &self.cfg.schema
    }

    /// The per-operation timeout: every operation's wall-clock bound.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The `LISTEN` channel of the flag `key` (what `set_flag` notifies).
    pub fn flag_channel(&self, key: &str) -> String {
        sql::channel('r', &self.namespace, key, None)
    }

    /// The `LISTEN` channel of the waiting line `line` of `key`.
    pub fn line_channel(&self, key: &str, line: &str) -> String {
        sql::channel('n', &self.namespace, key, Some(line))
    }

    /// A pooled connection (and `true`), or a new one connected by
    /// `deadline`.
    fn checkout(&self, deadline: Instant) -> Result<(Conn, bool)> {
        if let Some(con) = self.pool.take("", 0) {
            return Ok((con, true));
        }
        Ok((Conn::connect(&self.cfg, &self.cfg.target, deadline)?, false))
    }

    fn checkin(&self, con: Conn) {
        if !con.broken {
            self.pool.put("", 0, con);
        }
    }

    /// Runs `sql` with `params` on a pooled connection by `deadline`
    /// (capped by the timeout), making the schema first if needed. A
    /// connection that timed out or failed is dropped.
    pub(crate) fn run_by(
        &self,
        sql: &str,
        params: &[Option<&str>],
        deadline: Instant,
    ) -> Result<Vec<Row>> {
        let deadline = deadline.min(Instant::now() + self.timeout);
        // No time left: fail before a pooled connection is spent on it.
        Conn::left(deadline, &self.addr)?;
        let (mut con, pooled) = self.checkout(deadline)?;
        if !self.ready.load(Ordering::Acquire) {
            self.ensure_schema(&mut con, deadline)?;
        }
        let mut reply = con.query(sql, params, deadline);
        let ended = match &reply {
            // The server had already ended this idle pooled connection (a
            // restart, a terminated backend): the write failed, or its
            // FATAL error was the first reply, written before our
            // statement was read. Either way the statement did not run:
            // once more on a fresh connection, within the same deadline.
            Err(Error::Connection(_)) => con.unsent,
            Ok(Err(e)) => e.fatal() && e.first,
            _ => false,
        };
        if pooled && ended {
            con = Conn::connect(&self.cfg, &self.cfg.target, deadline)?;
            reply = con.query(sql, params, deadline);
        }
        let reply = reply?;
        self.checkin(con);
        reply.map_err(|e| e.into_error(&self.addr))
    }

    /// [`Postgres::run_by`] within the timeout.
    pub(crate) fn run(&self, sql: &str, params: &[Option<&str>]) -> Result<Vec<Row>> {
        self.run_by(sql, params, Instant::now() + self.timeout)
    }

    /// Finds the schema at this client's version, or makes it.
    fn ensure_schema(&self, con: &mut Conn, deadline: Instant) -> Result<()> {
        match con.query(&self.sql.read_version, &[], deadline)? {
            Ok(rows) => match version_of(&rows) {
                Some(v) if v == sql::VERSION => {}
                Some(v) if v > sql::VERSION => return Err(self.newer(v)),
                _ => self.make_schema(con, deadline)?,
            },
            // No schema or no table yet.
            Err(ServerError { code, .. }) if code == "3F000" || code == "42P01" => {
                self.make_schema(con, deadline)?;
            }
            Err(e) => return Err(e.into_error(&self.addr)),
        }
        self.ready.store(true, Ordering::Release);
        Ok(())
    }

    fn make_schema(&self, con: &mut Conn, deadline: Instant) -> Result<()> {
        match con.simple(&self.sql.schema, deadline)? {
            Ok(_) => Ok(()),
            Err(e) if e.code == "MLV01" => Err(Error::Config(e.message)),
            Err(e) => {
                // The failed transaction is rolled back by the server; the
                // connection is idle again (but drop it: simplest).
                con.broken = true;
                let hint = if e.code == "42501" {
                    " (this role may not create it: run the DDL of `mistri-locks schema` as an owner)"
                } else {
                    ""
                };
                Err(Error::Config(format!(
                    "cannot create the mistri_locks schema {:?} on Postgres at {}: {} (SQLSTATE {}){hint}",
                    self.cfg.schema, self.addr, e.message, e.code
                )))
            }
        }
    }

    fn newer(&self, v: i64) -> Error {
        Error::Config(format!(
            "the mistri_locks schema {:?} on Postgres at {} is at version {v}, newer than this client's {}: upgrade mistri_locks",
            self.cfg.schema,
            self.addr,
            sql::VERSION
        ))
    }
}

fn version_of(rows: &[Row]) -> Option<i64> {
    rows.first()?.first()?.as_deref()?.parse().ok()
}
