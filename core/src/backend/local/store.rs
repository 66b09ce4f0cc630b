//! The database: its schema, the connection pool, the clocks (boot id,
//! monotonic ns), holder descriptions, and the lease SQL.

use super::bells::bells_dir_of;
use super::bells::bucket_of;
use super::bells::line_bucket_of;
use super::bells::ring;
use super::bells::Bell;
use super::place::config_err;
use super::place::default_path;
use super::place::prepare;
use crate::contract::adapter::{Lease, Renewal, Renewed};
use crate::contract::info::{from_unix_millis, unpack_label, HolderInfo, Identity, LeaseInfo};
use crate::contract::push::Registry;
use crate::error::{Error, Result};
use crate::runtime::fork::ForkLocal;
use crate::runtime::token::mint_token;
use parking_lot::Mutex;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a writer waits for another process's transaction.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Expired rows are pruned after this many writes on a connection.
pub const PRUNE_EVERY: u32 = 256;
pub(crate) const MAX_IDLE: usize = 8;

/// The queue of waiting lines per key (`docs/PROTOCOL.md`, "Waiting"):
/// one row per line ([`crate::waiting`]), in order of `since_ns`; a row
/// is live while `expires_ns` is ahead (same clock and boot as leases).
/// Created if missing, so databases made before it gain it on open.
pub(crate) const QUEUE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS queue (
  key TEXT NOT NULL, line TEXT NOT NULL, since_ns INTEGER NOT NULL, expires_ns INTEGER NOT NULL,
  boot TEXT NOT NULL,
  PRIMARY KEY (key, line)
) WITHOUT ROWID;
";

/// The table of N-holder leases: one row per live slot, its description in
/// the columns `leases` has (plus `lim`, the limit it was taken with).
/// Created if missing, so databases made before it gain it on open.
pub(crate) const SLOTS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS slots (
  key TEXT NOT NULL, token TEXT NOT NULL, expires_ns INTEGER NOT NULL, boot TEXT NOT NULL,
  lim INTEGER NOT NULL, holder TEXT, fence INTEGER, acquired_ms INTEGER, renewed_ms INTEGER,
  ttl_ms INTEGER, heartbeat_ms INTEGER,
  PRIMARY KEY (key, token)
) WITHOUT ROWID;
";

pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS leases (
  key TEXT PRIMARY KEY, token TEXT NOT NULL, expires_ns INTEGER NOT NULL, boot TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS flags (
  key TEXT PRIMARY KEY, expires_ns INTEGER NOT NULL, boot TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (name, value) VALUES ('fence', 0);
";

/// The holder-description columns of `leases` ([`crate::contract::info`]), added to
/// databases made before them. Clients that predate them write NULLs there
/// (their `INSERT OR REPLACE` names the first four columns only).
pub(crate) const INFO_COLUMNS: [(&str, &str); 6] = [
    ("holder", "TEXT"),
    ("fence", "INTEGER"),
    ("acquired_ms", "INTEGER"),
    ("renewed_ms", "INTEGER"),
    ("ttl_ms", "INTEGER"),
    ("heartbeat_ms", "INTEGER"),
];

/// Adds the missing [`INFO_COLUMNS`], in one write transaction so two
/// processes opening an old file at once don't both try.
pub(crate) fn add_info_columns(con: &mut Connection) -> rusqlite::Result<()> {
    let has = |con: &Connection| -> rusqlite::Result<Vec<String>> {
        con.prepare("SELECT name FROM pragma_table_info('leases')")?
            .query_map([], |r| r.get(0))?
            .collect()
    };
    if INFO_COLUMNS
        .iter()
        .all(|(c, _)| has(con).is_ok_and(|cols| cols.iter().any(|n| n == c)))
    {
        return Ok(());
    }
    let tx = con.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let cols = has(&tx)?;
    for (name, kind) in INFO_COLUMNS {
        if !cols.iter().any(|c| c == name) {
            tx.execute_batch(&format!("ALTER TABLE leases ADD COLUMN {name} {kind}"))?;
        }
    }
    tx.commit()
}

/// Wall-clock milliseconds since 1970, for display only.
pub(crate) fn wall_ms() -> i64 {
    i64::try_from(crate::contract::info::unix_millis(
        std::time::SystemTime::now(),
    ))
    .unwrap_or(i64::MAX)
}

pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A `leases` row's description columns as a [`HolderInfo`], when the
/// holder wrote them.
pub(crate) fn holder_from(
    row: &rusqlite::Row<'_>,
    first: usize,
) -> rusqlite::Result<Option<HolderInfo>> {
    let label: Option<String> = row.get(first)?;
    let fence: Option<i64> = row.get(first + 1)?;
    let acquired: Option<i64> = row.get(first + 2)?;
    let renewed: Option<i64> = row.get(first + 3)?;
    let ttl: Option<i64> = row.get(first + 4)?;
    let heartbeat: Option<i64> = row.get(first + 5)?;
    let unsigned = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(match (label, fence, acquired, renewed, ttl) {
        (Some(label), Some(fence), Some(acquired), Some(renewed), Some(ttl)) => Some({
            let (label, stop_key) = unpack_label(label);
            HolderInfo {
                label,
                stop_key,
                fence: unsigned(fence),
                acquired_at: from_unix_millis(unsigned(acquired)),
                renewed_at: from_unix_millis(unsigned(renewed)),
                ttl: Duration::from_millis(unsigned(ttl)),
                heartbeat: Duration::from_millis(unsigned(heartbeat.unwrap_or(0))),
            }
        }),
        _ => None,
    })
}

pub(crate) const INFO_SELECT: &str = "SELECT key, expires_ns, holder, fence, acquired_ms, renewed_ms, ttl_ms, heartbeat_ms FROM leases";

pub(crate) fn lease_info(row: &rusqlite::Row<'_>, now: i64) -> rusqlite::Result<LeaseInfo> {
    let expires: i64 = row.get(1)?;
    Ok(LeaseInfo::exclusive(
        row.get(0)?,
        Some(Duration::from_nanos(
            u64::try_from(expires.saturating_sub(now)).unwrap_or(0),
        )),
        holder_from(row, 2)?,
    ))
}

pub(crate) struct Pooled {
    pub(crate) con: Connection,
    pub(crate) writes: u32,
}

/// Idle connections of this process. The pool is a `ForkLocal`: a forked
/// child starts with an empty one without touching the parent's (whose lock
/// may be held forever there); the parent's connections are leaked with it,
/// never closed, as SQLite requires. Checkout and checkin run inside a fork
/// section, so no connection crosses a fork.
pub(crate) struct Pool {
    pub(crate) idle: Vec<Pooled>,
}

impl Pool {
    pub(crate) fn empty() -> Pool {
        Pool { idle: Vec::new() }
    }
}

/// A host-local backend: any number of processes opening the same file
/// share leases, flags and fencing numbers.
///
/// # Examples
/// ```
/// use mistri_locks::{Local, Locks};
/// use std::time::Duration;
///
/// let dir = std::env::temp_dir().join(format!("mistri-doc-{}", std::process::id()));
/// let locks = Locks::new(Local::open(Some(&dir.join("locks.db")))?);
/// assert!(locks.acquire("job", Duration::from_secs(1))?);
/// assert!(locks.release("job")?);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), mistri_locks::Error>(())
/// ```
pub struct Local {
    pub(crate) path: PathBuf,
    pub(crate) boot: String,
    pub(crate) pool: ForkLocal<Mutex<Pool>>,
    /// Write transactions of this process queue here rather than in
    /// SQLite's busy handler, which sleeps and retries: with several
    /// threads of one process writing (a heartbeat tick while another
    /// thread acquires), the sleeper can lose every race for far longer than
    /// a tick. Taken only inside a fork section, so never held at a fork.
    pub(crate) writer: Mutex<()>,
    /// The watchers of this adapter's doorbell listener (one per process).
    pub(crate) push: ForkLocal<Arc<Registry>>,
}

thread_local! {
    /// The deadline of this thread's current SQLite call, for [`busy_wait`].
    static BUSY_UNTIL: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// SQLite's busy handler (another process holds the lock): short naps,
/// 0.1 ms doubling up to 2 ms, until the calling operation's deadline.
/// SQLite's own handler sleeps up to 100 ms at a time, far longer than a
/// short heartbeat's tick.
pub(crate) fn busy_wait(count: i32) -> bool {
    let Some(until) = BUSY_UNTIL.with(Cell::get) else {
        return false;
    };
    let now = Instant::now();
    if now >= until {
        return false;
    }
    let doublings = count.clamp(0, 5).unsigned_abs();
    let nap = Duration::from_micros(100 << doublings).min(Duration::from_millis(2));
    std::thread::sleep(nap.min(until - now));
    true
}

/// Restores [`BUSY_UNTIL`] when an operation ends.
pub(crate) struct BusyDeadline(Option<Instant>);

impl BusyDeadline {
    pub(crate) fn set(until: Instant) -> BusyDeadline {
        BusyDeadline(BUSY_UNTIL.with(|c| c.replace(Some(until))))
    }
}

impl Drop for BusyDeadline {
    fn drop(&mut self) {
        BUSY_UNTIL.with(|c| c.set(self.0));
    }
}

/// Nanoseconds on `CLOCK_BOOTTIME` (Linux; `CLOCK_MONOTONIC` elsewhere).
pub(crate) fn now_ns() -> i64 {
    #[cfg(target_os = "linux")]
    let clock = libc::CLOCK_BOOTTIME;
    #[cfg(not(target_os = "linux"))]
    let clock = libc::CLOCK_MONOTONIC;
    i64::try_from(crate::runtime::clock::clock_ns(clock)).unwrap_or(i64::MAX)
}

pub(crate) fn ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// The kernel's id of this boot; a fixed string where there is none.
pub(crate) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown-boot".to_owned())
}

impl Local {
    /// Opens (creating if needed) the database at `path`, or at
    /// [`default_path`] when `None` (`$MISTRI_LOCKS_LOCAL_PATH`, else
    /// `/var/tmp/mistri_locks-<uid>/locks.db`).
    ///
    /// # Errors
    /// [`Error::Config`] when the file can't be created or written, is not
    /// an SQLite database (corrupt), is a symbolic link or belongs to another
    /// user, or when its folder is a symbolic link, belongs to another user
    /// or can be written by other users: the message names the path and the
    /// problem.
    pub fn open(path: Option<&Path>) -> Result<Self> {
        let path = path.map(Path::to_path_buf).unwrap_or_else(default_path);
        if path.as_os_str().is_empty() {
            return Err(Error::InvalidArgument("path must not be empty".into()));
        }
        prepare(&path)?;
        let local = Local {
            path,
            boot: boot_id(),
            pool: ForkLocal::new(Mutex::new(Pool::empty()), |_| Mutex::new(Pool::empty())),
            writer: Mutex::new(()),
            push: crate::contract::push::fork_local_registry(),
        };
        // Open one connection now, so a corrupt file is reported here.
        {
            let _section = crate::runtime::fork::enter_section();
            let _busy = BusyDeadline::set(Instant::now() + BUSY_TIMEOUT);
            let con = local.connect()?;
            local.checkin(con);
        }
        Ok(local)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder of this database's doorbells: `<database>-bells/` (see
    /// the module header). Made by listeners only ([`bells_folder`]).
    pub(crate) fn bells_dir(&self) -> PathBuf {
        bells_dir_of(&self.path)
    }

    /// Rings the doorbell of the flag `key` (best effort: the tick poll
    /// is the floor).
    pub(crate) fn ring_raised(&self, key: &str) {
        ring(
            &self
                .bells_dir()
                .join(Bell::Raised(bucket_of(key)).file_name()),
        );
    }

    /// Rings the doorbell of the waiting line `line` of `key`, the next in
    /// its queue (best effort: waiters also retry at the lease's expiry and
    /// on a slow safety poll).
    pub(crate) fn ring_next(&self, key: &str, line: &str) {
        ring(
            &self
                .bells_dir()
                .join(Bell::Next(line_bucket_of(key, line)).file_name()),
        );
    }

    pub(crate) fn connect(&self) -> Result<Pooled> {
        let con = Connection::open(&self.path).map_err(|e| self.map_err(e))?;
        con.busy_handler(Some(busy_wait))
            .map_err(|e| self.map_err(e))?;
        // journal_mode returns a row; WAL lets readers run beside the writer.
        let mode: String = con
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(|e| self.map_err(e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(config_err(
                &self.path,
                format!("cannot switch to WAL mode (got {mode})"),
            ));
        }
        con.execute_batch("PRAGMA synchronous=NORMAL;")
            .map_err(|e| self.map_err(e))?;
        con.execute_batch(SCHEMA).map_err(|e| self.map_err(e))?;
        con.execute_batch(SLOTS_SCHEMA)
            .map_err(|e| self.map_err(e))?;
        con.execute_batch(QUEUE_SCHEMA)
            .map_err(|e| self.map_err(e))?;
        let mut con = con;
        add_info_columns(&mut con).map_err(|e| self.map_err(e))?;
        Ok(Pooled { con, writes: 0 })
    }

    pub(crate) fn checkout(&self) -> Result<Pooled> {
        if let Some(con) = self.pool.get().lock().idle.pop() {
            return Ok(con);
        }
        self.connect()
    }

    pub(crate) fn checkin(&self, con: Pooled) {
        let mut pool = self.pool.get().lock();
        if pool.idle.len() < MAX_IDLE {
            pool.idle.push(con);
        }
    }

    pub(crate) fn with_con<T>(
        &self,
        write: bool,
        f: impl FnOnce(&mut Connection, i64) -> rusqlite::Result<T>,
    ) -> Result<T> {
        self.with_con_until(write, Instant::now() + BUSY_TIMEOUT, f)
    }

    /// Runs `f` on a pooled connection; waiting for locks (this process's
    /// writer queue, another process's transaction) ends at `deadline`.
    pub(crate) fn with_con_until<T>(
        &self,
        write: bool,
        deadline: Instant,
        f: impl FnOnce(&mut Connection, i64) -> rusqlite::Result<T>,
    ) -> Result<T> {
        // No fork may cut an SQLite call in half (see `fork::enter_section`).
        let _section = crate::runtime::fork::enter_section();
        let _busy = BusyDeadline::set(deadline);
        let _writer = match write {
            true => Some(self.writer.try_lock_until(deadline).ok_or_else(|| {
                Error::Connection(format!(
                    "local lock database {}: this process's other writers kept it busy past the deadline",
                    self.path.display()
                ))
            })?),
            false => None,
        };
        let mut pooled = self.checkout()?;
        let now = now_ns();
        let result = f(&mut pooled.con, now);
        match result {
            Ok(v) => {
                if write {
                    pooled.writes += 1;
                    if pooled.writes >= PRUNE_EVERY {
                        pooled.writes = 0;
                        let _ = self.prune(&pooled.con, now_ns());
                    }
                }
                self.checkin(pooled);
                Ok(v)
            }
            Err(e) => Err(self.map_err(e)),
        }
    }

    pub(crate) fn prune(&self, con: &Connection, now: i64) -> rusqlite::Result<()> {
        con.execute(
            "DELETE FROM leases WHERE expires_ns <= ?1 OR boot <> ?2",
            params![now, self.boot],
        )?;
        con.execute(
            "DELETE FROM flags WHERE expires_ns <= ?1 OR boot <> ?2",
            params![now, self.boot],
        )?;
        con.execute(
            "DELETE FROM slots WHERE expires_ns <= ?1 OR boot <> ?2",
            params![now, self.boot],
        )?;
        Ok(())
    }

    /// Deletes every expired row now (done automatically every
    /// [`PRUNE_EVERY`] writes).
    ///
    /// # Errors
    /// The database's errors.
    pub fn prune_now(&self) -> Result<()> {
        self.with_con(false, |con, now| self.prune(con, now))
    }

    pub(crate) fn map_err(&self, e: rusqlite::Error) -> Error {
        let path = self.path.display();
        match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                Error::Connection(format!(
                "local lock database {path} stayed locked by another process for over {} s: {e}",
                BUSY_TIMEOUT.as_secs()
            ))
            }
            Some(
                ErrorCode::NotADatabase
                | ErrorCode::DatabaseCorrupt
                | ErrorCode::CannotOpen
                | ErrorCode::ReadOnly
                | ErrorCode::PermissionDenied
                | ErrorCode::NoLargeFileSupport
                | ErrorCode::DiskFull
                | ErrorCode::SystemIoFailure,
            ) => Error::Config(format!("local lock database {path} is not usable: {e}")),
            _ => Error::Backend(format!("local lock database {path}: {e}")),
        }
    }

    pub(crate) fn live_lease(
        &self,
        con: &Connection,
        key: &str,
        now: i64,
    ) -> rusqlite::Result<Option<String>> {
        con.prepare_cached(
            "SELECT token FROM leases WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3",
        )?
        .query_row(params![key, now, self.boot], |r| r.get(0))
        .optional()
    }

    pub(crate) fn renew_in(
        &self,
        con: &Connection,
        renewal: &Renewal<'_>,
        now: i64,
    ) -> rusqlite::Result<Renewed> {
        // The same rules for a lease and for a slot, each in its table.
        let (extend, owned) = if renewal.lease.slotted() {
            (
                "UPDATE slots SET expires_ns = ?1, renewed_ms = ?6, ttl_ms = ?7 WHERE key = ?2 AND token = ?3 AND expires_ns > ?4 AND boot = ?5",
                "SELECT EXISTS(SELECT 1 FROM slots WHERE key = ?1 AND token = ?2 AND expires_ns > ?3 AND boot = ?4)",
            )
        } else {
            (
                "UPDATE leases SET expires_ns = ?1, renewed_ms = ?6, ttl_ms = ?7 WHERE key = ?2 AND token = ?3 AND expires_ns > ?4 AND boot = ?5",
                "SELECT EXISTS(SELECT 1 FROM leases WHERE key = ?1 AND token = ?2 AND expires_ns > ?3 AND boot = ?4)",
            )
        };
        let lease = renewal.lease;
        let n = con.prepare_cached(extend)?.execute(params![
            now.saturating_add(ns(renewal.ttl)),
            lease.key(),
            lease.token(),
            now.saturating_add(ns(renewal.min_left)),
            self.boot,
            wall_ms(),
            ms(renewal.ttl)
        ])?;
        if n == 1 {
            return Ok(Renewed::Yes);
        }
        // Not extended: still ours but too close to expiry, or not ours.
        let ours: bool = con
            .prepare_cached(owned)?
            .query_row(params![lease.key(), lease.token(), now, self.boot], |r| {
                r.get(0)
            })?;
        Ok(if ours && !renewal.min_left.is_zero() {
            Renewed::TooLate
        } else {
            Renewed::NotHeld
        })
    }

    /// A refused acquire: a waiter (`line`) joins `key`'s queue or keeps
    /// its place there (its deadline refreshed) and the dead entries are
    /// pruned, committed; a plain acquire writes nothing.
    pub(crate) fn refuse_queued(
        &self,
        tx: rusqlite::Transaction<'_>,
        key: &str,
        line: Option<&str>,
        now: i64,
    ) -> rusqlite::Result<Option<u64>> {
        let Some(line) = line else {
            return Ok(None); // rolled back: nothing written
        };
        tx.prepare_cached(
            "DELETE FROM queue WHERE key = ?1 AND line != ?4 AND (expires_ns <= ?2 OR boot != ?3)",
        )?
        .execute(params![key, now, self.boot, line])?;
        // Keeps its place while live (ZADD NX on Redis).
        tx.prepare_cached(
            "INSERT INTO queue (key, line, since_ns, expires_ns, boot) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (key, line) DO UPDATE SET
               since_ns = CASE WHEN queue.expires_ns > ?3 AND queue.boot = ?5
                               THEN queue.since_ns ELSE excluded.since_ns END,
               expires_ns = excluded.expires_ns, boot = excluded.boot",
        )?
        .execute(params![
            key,
            line,
            now,
            now.saturating_add(ns(crate::contract::QUEUE_ENTRY_TTL)),
            self.boot
        ])?;
        tx.commit()?;
        Ok(None)
    }

    /// The first `n` live lines queued for `key`, in queue order.
    pub(crate) fn queue_head(
        &self,
        tx: &Connection,
        key: &str,
        now: i64,
        n: u32,
    ) -> rusqlite::Result<Vec<String>> {
        tx.prepare_cached(
            "SELECT line FROM queue WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3 ORDER BY since_ns, line LIMIT ?4",
        )?
        .query_map(params![key, now, self.boot, i64::from(n)], |r| r.get(0))?
        .collect()
    }

    /// The lines to ring after a release of `key` (`released`: a lease or
    /// slot was deleted in this transaction): the first `count` live lines
    /// of the key's queue (1 for an exclusive lease; for an N-holder lease
    /// its free slots, [`Local::free_slots`]), the lines the acquire lets
    /// take what is free. No queue, or nothing released: none.
    pub(crate) fn next_lines(
        &self,
        tx: &Connection,
        key: &str,
        released: bool,
        now: i64,
        count: u32,
    ) -> rusqlite::Result<Vec<String>> {
        if !released {
            return Ok(Vec::new());
        }
        self.queue_head(tx, key, now, count.max(1))
    }

    /// The free slots of the N-holder lease on `key` (its limit, as the
    /// live slots recorded it, minus the live slots) and that limit;
    /// `(0, 1)` when no slot is live (an exclusive key, or one whose slots
    /// all lapsed: its limit is not known).
    pub(crate) fn free_slots(
        &self,
        tx: &Connection,
        key: &str,
        now: i64,
    ) -> rusqlite::Result<(u32, u32)> {
        let (live, limit): (i64, Option<i64>) = tx
            .prepare_cached(
                "SELECT count(*), max(lim) FROM slots WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3",
            )?
            .query_row(params![key, now, self.boot], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(match limit {
            Some(limit) if live > 0 => (
                u32::try_from(limit - live).unwrap_or(0),
                u32::try_from(limit).unwrap_or(u32::MAX).max(1),
            ),
            _ => (0, 1),
        })
    }

    /// Rings each of `lines` of `key` (after the commit).
    pub(crate) fn ring_lines(&self, key: &str, lines: &[String]) {
        for line in lines {
            self.ring_next(key, line);
        }
    }

    /// A granted waiter leaves `key`'s queue; the dead entries are pruned.
    pub(crate) fn leave_queued(
        &self,
        tx: &Connection,
        key: &str,
        line: &str,
        now: i64,
    ) -> rusqlite::Result<()> {
        tx.prepare_cached(
            "DELETE FROM queue WHERE key = ?1 AND (line = ?2 OR expires_ns <= ?3 OR boot != ?4)",
        )?
        .execute(params![key, line, now, self.boot])
        .map(drop)
    }

    /// The acquire transaction; the fencing number if the lease was free.
    /// `line`: a waiter's line, queued when refused (`queue` table: the
    /// same rules as Redis's [`crate::backend::redis::scripts::ACQUIRE_LUA`]).
    pub(crate) fn acquire_in(
        &self,
        con: &mut Connection,
        key: &str,
        token: &str,
        ttl: Duration,
        who: &Identity,
        line: Option<&str>,
    ) -> rusqlite::Result<Option<u64>> {
        let tx = con.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Read the clocks after taking the write lock: a wait for the lock
        // must not make us judge expiry with a stale time, nor issue a floor
        // older than a fence another process issued meanwhile.
        let now = now_ns();
        let taken = self.live_lease(&tx, key, now)?.is_some() || self.slots_live(&tx, key, now)?;
        let refuse = |tx| self.refuse_queued(tx, key, line, now);
        if taken {
            return refuse(tx);
        }
        // Free: only for the live line at the head of the queue, if any.
        let head = self.queue_head(&tx, key, now, 1)?;
        if head.first().is_some_and(|h| Some(h.as_str()) != line) {
            return refuse(tx);
        }
        if let Some(line) = line {
            self.leave_queued(&tx, key, line, now)?;
        }
        let floor = i64::try_from(crate::contract::fence::floor_now()).unwrap_or(i64::MAX);
        // max(counter + 1, realtime floor): see crate::contract::fence.
        let fence: i64 = tx
            .prepare_cached(
                "UPDATE meta SET value = max(value + 1, ?1) WHERE name = 'fence' RETURNING value",
            )?
            .query_row(params![floor], |r| r.get(0))?;
        let wall = floor / 1000;
        tx.prepare_cached(
            "INSERT OR REPLACE INTO leases (key, token, expires_ns, boot, holder, fence, acquired_ms, renewed_ms, ttl_ms, heartbeat_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9)",
        )?
        .execute(params![
            key,
            token,
            now.saturating_add(ns(ttl)),
            self.boot,
            who.stored_label(),
            fence,
            wall,
            ms(ttl),
            ms(who.heartbeat)
        ])?;
        tx.commit()?;
        Ok(Some(fence as u64))
    }

    /// The exclusive acquire; `line`: a waiter's line ([`Local::acquire_in`]).
    pub(crate) fn acquire_exclusive(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        let token = mint_token()?;
        self.with_con(true, |con, _| {
            // A fence must never be issued twice, so this commit reaches the
            // disk before the fence is returned (the level can't change
            // inside a transaction). Other writes stay NORMAL: what a power
            // loss undoes of them belongs to a boot whose rows are void.
            con.pragma_update(None, "synchronous", "FULL")?;
            let fence = self.acquire_in(con, key, &token, ttl, who, line);
            // Failing to lower it again costs speed only, never the lease.
            let _ = con.pragma_update(None, "synchronous", "NORMAL");
            Ok(fence?.map(|fence| Lease::new(key, token.clone(), fence)))
        })
    }

    pub(crate) fn flag_in(&self, con: &Connection, key: &str, now: i64) -> rusqlite::Result<bool> {
        con.prepare_cached(
            "SELECT EXISTS(SELECT 1 FROM flags WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3)",
        )?
        .query_row(params![key, now, self.boot], |r| r.get(0))
    }
}
