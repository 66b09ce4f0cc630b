//! [`Local`]: leases and flags shared by every process on one host, with no
//! server: an SQLite database file (bundled SQLite) in WAL mode.
//!
//! Why SQLite: it gives atomic read-modify-write across processes
//! (`BEGIN IMMEDIATE` takes the database's write lock), survives crashes of
//! any participant (a killed process's locks are released by the kernel),
//! and is one file that any language can open. A `flock`-per-key scheme would
//! be faster but has no TTLs, no flags and no fencing across restarts.
//!
//! Time: expiry uses `CLOCK_BOOTTIME`, a clock every process on the host
//! shares, that never jumps backwards and that wall-clock steps (NTP,
//! `date -s`) do not move — so a step can neither extend nor cut a lease.
//! Every row also records the kernel's boot id: rows from before a reboot
//! (where BOOTTIME restarted from zero) count as expired.
//!
//! Schema (see `docs/PROTOCOL.md`, "Local"):
//! `leases(key, token, expires_ns, boot)`, `flags(key, expires_ns, boot)`,
//! `slots(key, token, expires_ns, boot, lim, …)` for N-holder leases (one
//! row per holder; see `Local`'s slot methods),
//! `meta(name, value)` holding the fence counter, one per database, which
//! makes fencing numbers strictly increasing per key across process
//! restarts without a row per key ever seen. Expired rows are deleted every
//! [`PRUNE_EVERY`] writes of a connection, so the file stays bounded.
//!
//! Fences: `max(counter + 1, realtime µs)` ([`crate::contract::fence`]). The persisted
//! counter guards against the realtime clock stepping back while the file
//! lives; the realtime floor guards against the file being lost (deleted,
//! recreated, restored from a backup). Acquire commits with
//! `synchronous=FULL` (the WAL is fsynced before the fence is returned), so
//! neither a crash nor a power loss can undo an issued fence; everything
//! else commits with `NORMAL`, whose last commits a power loss may undo —
//! renewals, releases and flags of a boot whose rows are void after it.
//!
//! Place: one default file per user, `/var/tmp/mistri_locks-<uid>/locks.db`
//! ([`user_default_path`]), derived from the uid only so a login shell, cron,
//! systemd and `sudo -u` agree; `$MISTRI_LOCKS_LOCAL_PATH` or an explicit
//! path overrides it. Before SQLite opens it, the folder must be a real
//! folder of this uid (or root) that nobody else can write (the default one
//! exactly 0700) and the file a regular file of this uid, opened with
//! `O_NOFOLLOW`: anything else is an [`Error::Config`] naming the path and
//! the problem, never silently used.
//!
//! Push ([`crate::contract::push`]): doorbells per key bucket. A doorbell is an
//! empty file in the folder `<database>-bells/` (next to the database,
//! mode 0700, held to the database folder's rules above); opening it for
//! writing and closing it makes the kernel report `IN_CLOSE_WRITE` to
//! every inotify watch on it, which is the whole message. Two kinds, 4096
//! of each, named by a bucket written as 3 lowercase hex digits:
//! - `raised-<bucket>`, bucket = `fnv1a(key) % 4096`: `set_flag` rings
//!   the bell of its key after its commit;
//! - `next-<bucket>`, bucket = `fnv1a(key ‖ 0x00 ‖ line) % 4096`: a release,
//!   slot release or `break_lease` that deleted a lease finds the first
//!   live line of the key's `queue` inside its transaction and, after the
//!   commit, rings that line's bell only (no queue: no ring).
//!
//! The hash (64-bit FNV-1a) is part of the protocol between processes and
//! versions: fixed forever, never std's hasher. Ringers never create a
//! file (`O_WRONLY|O_NOFOLLOW|O_NONBLOCK`, no `O_CREAT`; a missing file
//! means nobody ever watched that bucket, and every error is ignored);
//! only listeners make the folder and the files (mode 0600, `O_NOFOLLOW`,
//! opened read-only so creating one rings nobody).
//!
//! The listener (`mistri-flags` thread, one per process and adapter): one
//! inotify descriptor and one eventfd in a `poll`. It follows the
//! registry's interests (`push::Subscriptions`): one watch per
//! bucket file that some live interest maps to, added (file created
//! first) when the first interest of the bucket arrives and removed
//! (`inotify_rm_watch`) when the last one has been unwanted for
//! [`crate::contract::push::LINGER`]; a new interest wakes it through the eventfd
//! (the registry's wake-up: a non-blocking write). Once a watch is live
//! it calls `Registry::live` (the engine reads that flag, the line's head
//! tries: no gap). A ring of a `raised` bucket makes the engines read the
//! flags of that bucket only; a ring of a `next` bucket rings the lines of
//! that bucket only. So a raise or a release wakes only the processes that
//! watch that flag or whose line is next for that key (plus, rarely,
//! those sharing its bucket: one flag read or one try, never a wrong
//! grant). A bell file removed or replaced, a lost folder, an unusable
//! file or an inotify limit restarts the listener after a backoff (and
//! only while the database file exists: it never makes files in a folder
//! that is being deleted), which watches everything anew and polls every
//! flag and line once
//! (`poll_now`, `released_any`), as does a kernel queue overflow. The
//! listener exits once nobody watches. Linux only; elsewhere (and for
//! clients that don't ring) the tick poll and the waiters' timers are the
//! path. Older versions ring and watch `<database>-raised` and
//! `<database>-released`, which this one neither rings nor watches: in a
//! mixed fleet the tick poll and the waiting timers carry the messages
//! between them (`docs/PROTOCOL.md`, "Local backend: doorbells").
//!
//! Waiting ([`crate::waiting`]): the `queue` table orders the lines of a
//! key across processes; `expires_in` reads the lease's `expires_ns`.
//!
//! Fork: listeners are [`ForkLocal`] (through the registry); a forked
//! child starts with none and never reads the parent's descriptors.
//!
//! Connections: a small pool like the Redis adapter's; after `fork` the
//! child forgets (leaks, never closes) inherited connections, as SQLite
//! requires, and opens its own.

use crate::args::mint_token;
use crate::contract::adapter::{Adapter, Beat, Lease, Renewal, Renewed};
use crate::contract::info::{from_unix_millis, FlagInfo, HolderInfo, Identity, LeaseInfo, Listing};
use crate::contract::push::{FlagWatch, FlagWatcher, Registry};
use crate::error::{Error, Result};
use crate::runtime::fork::ForkLocal;
use parking_lot::Mutex;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How long a writer waits for another process's transaction.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Expired rows are pruned after this many writes on a connection.
pub const PRUNE_EVERY: u32 = 256;
const MAX_IDLE: usize = 8;

const SCHEMA: &str = "
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
const INFO_COLUMNS: [(&str, &str); 6] = [
    ("holder", "TEXT"),
    ("fence", "INTEGER"),
    ("acquired_ms", "INTEGER"),
    ("renewed_ms", "INTEGER"),
    ("ttl_ms", "INTEGER"),
    ("heartbeat_ms", "INTEGER"),
];

/// Adds the missing [`INFO_COLUMNS`], in one write transaction so two
/// processes opening an old file at once don't both try.
fn add_info_columns(con: &mut Connection) -> rusqlite::Result<()> {
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
fn wall_ms() -> i64 {
    i64::try_from(crate::contract::info::unix_millis(
        std::time::SystemTime::now(),
    ))
    .unwrap_or(i64::MAX)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A `leases` row's description columns as a [`HolderInfo`], when the
/// holder wrote them.
fn holder_from(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Option<HolderInfo>> {
    let label: Option<String> = row.get(first)?;
    let fence: Option<i64> = row.get(first + 1)?;
    let acquired: Option<i64> = row.get(first + 2)?;
    let renewed: Option<i64> = row.get(first + 3)?;
    let ttl: Option<i64> = row.get(first + 4)?;
    let heartbeat: Option<i64> = row.get(first + 5)?;
    let unsigned = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(match (label, fence, acquired, renewed, ttl) {
        (Some(label), Some(fence), Some(acquired), Some(renewed), Some(ttl)) => Some(HolderInfo {
            label,
            fence: unsigned(fence),
            acquired_at: from_unix_millis(unsigned(acquired)),
            renewed_at: from_unix_millis(unsigned(renewed)),
            ttl: Duration::from_millis(unsigned(ttl)),
            heartbeat: Duration::from_millis(unsigned(heartbeat.unwrap_or(0))),
        }),
        _ => None,
    })
}

const INFO_SELECT: &str = "SELECT key, expires_ns, holder, fence, acquired_ms, renewed_ms, ttl_ms, heartbeat_ms FROM leases";

fn lease_info(row: &rusqlite::Row<'_>, now: i64) -> rusqlite::Result<LeaseInfo> {
    let expires: i64 = row.get(1)?;
    Ok(LeaseInfo::exclusive(
        row.get(0)?,
        Some(Duration::from_nanos(
            u64::try_from(expires.saturating_sub(now)).unwrap_or(0),
        )),
        holder_from(row, 2)?,
    ))
}

struct Pooled {
    con: Connection,
    writes: u32,
}

/// Idle connections of this process. The pool is a `ForkLocal`: a forked
/// child starts with an empty one without touching the parent's (whose lock
/// may be held forever there); the parent's connections are leaked with it,
/// never closed, as SQLite requires. Checkout and checkin run inside a fork
/// section, so no connection crosses a fork.
struct Pool {
    idle: Vec<Pooled>,
}

impl Pool {
    fn empty() -> Pool {
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
    path: PathBuf,
    boot: String,
    pool: ForkLocal<Mutex<Pool>>,
    /// Write transactions of this process queue here rather than in
    /// SQLite's busy handler, which sleeps and retries: with several
    /// threads of one process writing (a heartbeat tick while another
    /// thread acquires), the sleeper can lose every race for far longer than
    /// a tick. Taken only inside a fork section, so never held at a fork.
    writer: Mutex<()>,
    /// The watchers of this adapter's doorbell listener (one per process).
    push: ForkLocal<Arc<Registry>>,
}

thread_local! {
    /// The deadline of this thread's current SQLite call, for [`busy_wait`].
    static BUSY_UNTIL: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// SQLite's busy handler (another process holds the lock): short naps,
/// 0.1 ms doubling up to 2 ms, until the calling operation's deadline.
/// SQLite's own handler sleeps up to 100 ms at a time, far longer than a
/// short heartbeat's tick.
fn busy_wait(count: i32) -> bool {
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
struct BusyDeadline(Option<Instant>);

impl BusyDeadline {
    fn set(until: Instant) -> BusyDeadline {
        BusyDeadline(BUSY_UNTIL.with(|c| c.replace(Some(until))))
    }
}

impl Drop for BusyDeadline {
    fn drop(&mut self) {
        BUSY_UNTIL.with(|c| c.set(self.0));
    }
}

/// Nanoseconds on `CLOCK_BOOTTIME` (Linux; `CLOCK_MONOTONIC` elsewhere).
fn now_ns() -> i64 {
    #[cfg(target_os = "linux")]
    let clock = libc::CLOCK_BOOTTIME;
    #[cfg(not(target_os = "linux"))]
    let clock = libc::CLOCK_MONOTONIC;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime writes only it.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        // Only fails for an invalid clock id, which these constants are not.
        return 0;
    }
    // time_t/c_long are i64 here but narrower on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let (sec, nsec) = (i64::from(ts.tv_sec), i64::from(ts.tv_nsec));
    sec * 1_000_000_000 + nsec
}

fn ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// The kernel's id of this boot; a fixed string where there is none.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown-boot".to_owned())
}

/// The fixed base of the default database folder: the same for every
/// process of the host whatever its environment (`TMPDIR`,
/// `XDG_RUNTIME_DIR`, cron, systemd, `sudo -u`), and kept across logout and
/// reboot (FHS: `/var/tmp` is not cleaned at boot, unlike `/tmp` or the
/// per-session tmpfs `$XDG_RUNTIME_DIR`). It is a shared folder (mode 1777):
/// the only sticky, world-writable folder a database's path may pass through.
pub const DEFAULT_BASE: &str = "/var/tmp";

/// The environment variable naming the database file when no path is passed.
pub const PATH_ENV: &str = "MISTRI_LOCKS_LOCAL_PATH";

fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// This user's default database: `/var/tmp/mistri_locks-<uid>/locks.db`,
/// derived from the uid only, so every process of the user opens the same
/// file.
pub fn user_default_path() -> PathBuf {
    Path::new(DEFAULT_BASE)
        .join(format!("mistri_locks-{}", current_uid()))
        .join("locks.db")
}

/// The database a `None` path means: `$MISTRI_LOCKS_LOCAL_PATH` when set and
/// not empty, else [`user_default_path`].
pub fn default_path() -> PathBuf {
    match std::env::var_os(PATH_ENV) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => user_default_path(),
    }
}

fn config_err(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::Config(format!("local lock database {}: {what}", path.display()))
}

const STICKY: u32 = 0o1000;

/// Creates this user's default folder under [`DEFAULT_BASE`] (mode 0700) if
/// it is missing. The base itself must be root's (or ours) and, if others may
/// write it, sticky, so nobody else can rename or delete our folder.
fn create_default_folder(path: &Path, dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let base = dir.parent().unwrap_or(Path::new(DEFAULT_BASE));
    let meta = std::fs::metadata(base).map_err(|e| {
        config_err(
            path,
            format!(
                "the shared base folder {} is not usable: {e}",
                base.display()
            ),
        )
    })?;
    if !meta.is_dir() {
        return Err(config_err(
            path,
            format!("the shared base {} is not a folder", base.display()),
        ));
    }
    let uid = current_uid();
    if meta.uid() != 0 && meta.uid() != uid {
        return Err(config_err(
            path,
            format!(
                "the shared base folder {} belongs to uid {}, not to root or uid {uid}",
                base.display(),
                meta.uid()
            ),
        ));
    }
    if meta.mode() & 0o022 != 0 && meta.mode() & STICKY == 0 {
        return Err(config_err(
            path,
            format!(
                "the shared base folder {} is writable by others without the sticky bit",
                base.display()
            ),
        ));
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        // Checked by check_folder, like any existing folder.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(config_err(
            path,
            format!("cannot create its folder {}: {e}", dir.display()),
        )),
    }
}

/// The folder that holds the database (and SQLite's `-wal` and `-shm`
/// files) must be a real folder (not a symbolic link), owned by this uid (or
/// root), and writable by nobody else: whoever can write it can delete or
/// replace the database under a running holder. The default folder must be
/// exactly private (no group or other bits at all).
fn check_folder(path: &Path, dir: &Path, default: bool) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let shown = dir.display();
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| config_err(path, format!("cannot use its folder {shown}: {e}")))?;
    if meta.file_type().is_symlink() {
        return Err(config_err(
            path,
            format!("its folder {shown} is a symbolic link; refusing it (name the real folder)"),
        ));
    }
    if !meta.is_dir() {
        return Err(config_err(
            path,
            format!("its parent {shown} is not a folder"),
        ));
    }
    let uid = current_uid();
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(config_err(
            path,
            format!(
                "its folder {shown} belongs to uid {}, not to uid {uid} (this process); refusing it: its owner could delete or replace the database",
                meta.uid()
            ),
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(config_err(
            path,
            format!(
                "its folder {shown} (mode {mode:04o}) is writable by other users; refusing it: make it mode 0700 or use another folder"
            ),
        ));
    }
    if default && mode & 0o077 != 0 {
        return Err(config_err(
            path,
            format!("its folder {shown} has mode {mode:04o}; it must be 0700 (chmod 700 it)"),
        ));
    }
    Ok(())
}

/// Opens (creating, mode 0600) the database file without following a
/// symbolic link, and checks what was opened: a regular file of ours.
fn check_file(path: &Path) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    let symlink = || {
        config_err(
            path,
            "it is a symbolic link; refusing it (name the real file)",
        )
    };
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(symlink());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => symlink(),
            _ => config_err(path, format!("cannot open it for writing: {e}")),
        })?;
    let meta = file.metadata().map_err(|e| config_err(path, e))?;
    if !meta.is_file() {
        return Err(config_err(path, "it is not a regular file"));
    }
    let uid = current_uid();
    if meta.uid() != uid {
        return Err(config_err(
            path,
            format!(
                "it belongs to uid {}, not to uid {uid} (this process)",
                meta.uid()
            ),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        // Ours, in a folder only we can write: just make it private.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| config_err(path, format!("cannot make it private: {e}")))?;
    }
    Ok(())
}

/// Makes sure the folder and the file are safe to use before SQLite opens
/// the file by name: see [`check_folder`] and [`check_file`]. Only we can
/// write the checked folder, so nobody can swap the file in between.
fn prepare(path: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let default = path == user_default_path();
    if default {
        create_default_folder(path, dir)?;
    } else if std::fs::symlink_metadata(dir).is_err() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                config_err(
                    path,
                    format!("cannot create its folder {}: {e}", dir.display()),
                )
            })?;
    }
    check_folder(path, dir, default)?;
    check_file(path)
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
    fn bells_dir(&self) -> PathBuf {
        bells_dir_of(&self.path)
    }

    /// Rings the doorbell of the flag `key` (best effort: the tick poll
    /// is the floor).
    fn ring_raised(&self, key: &str) {
        ring(
            &self
                .bells_dir()
                .join(Bell::Raised(bucket_of(key)).file_name()),
        );
    }

    /// Rings the doorbell of the waiting line `line` of `key`, the next in
    /// its queue (best effort: waiters also retry at the lease's expiry and
    /// on a slow safety poll).
    fn ring_next(&self, key: &str, line: &str) {
        ring(
            &self
                .bells_dir()
                .join(Bell::Next(line_bucket_of(key, line)).file_name()),
        );
    }

    fn connect(&self) -> Result<Pooled> {
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

    fn checkout(&self) -> Result<Pooled> {
        if let Some(con) = self.pool.get().lock().idle.pop() {
            return Ok(con);
        }
        self.connect()
    }

    fn checkin(&self, con: Pooled) {
        let mut pool = self.pool.get().lock();
        if pool.idle.len() < MAX_IDLE {
            pool.idle.push(con);
        }
    }

    fn with_con<T>(
        &self,
        write: bool,
        f: impl FnOnce(&mut Connection, i64) -> rusqlite::Result<T>,
    ) -> Result<T> {
        self.with_con_until(write, Instant::now() + BUSY_TIMEOUT, f)
    }

    /// Runs `f` on a pooled connection; waiting for locks (this process's
    /// writer queue, another process's transaction) ends at `deadline`.
    fn with_con_until<T>(
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

    fn prune(&self, con: &Connection, now: i64) -> rusqlite::Result<()> {
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

    fn map_err(&self, e: rusqlite::Error) -> Error {
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

    fn live_lease(
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

    fn renew_in(
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
    fn refuse_queued(
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
    fn queue_head(
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

    /// The line to ring after a release of `key` (`released`: a lease or
    /// slot was deleted in this transaction): the first live line of the
    /// key's queue, if any. No queue, or nothing released: none.
    fn next_line(
        &self,
        tx: &Connection,
        key: &str,
        released: bool,
        now: i64,
    ) -> rusqlite::Result<Option<String>> {
        if !released {
            return Ok(None);
        }
        Ok(self.queue_head(tx, key, now, 1)?.pop())
    }

    /// A granted waiter leaves `key`'s queue; the dead entries are pruned.
    fn leave_queued(
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
    fn acquire_in(
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
            who.label,
            fence,
            wall,
            ms(ttl),
            ms(who.heartbeat)
        ])?;
        tx.commit()?;
        Ok(Some(fence as u64))
    }

    /// The exclusive lease (`limit` 1) or one of `limit` slots; in `line`
    /// of the key's wait queue when given ([`crate::waiting`]).
    fn acquire_one(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        if limit <= 1 {
            return self.acquire_exclusive(key, ttl, who, line);
        }
        self.acquire_slot(key, ttl, who, limit, line)
    }

    /// The exclusive acquire; `line`: a waiter's line ([`Local::acquire_in`]).
    fn acquire_exclusive(
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

    fn flag_in(&self, con: &Connection, key: &str, now: i64) -> rusqlite::Result<bool> {
        con.prepare_cached(
            "SELECT EXISTS(SELECT 1 FROM flags WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3)",
        )?
        .query_row(params![key, now, self.boot], |r| r.get(0))
    }
}

impl Adapter for Local {
    fn name(&self) -> &'static str {
        "local"
    }

    fn io_timeout(&self) -> Duration {
        BUSY_TIMEOUT
    }

    fn acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lease>> {
        self.acquire_as(key, ttl, &Identity::of_process())
    }

    fn acquire_as(&self, key: &str, ttl: Duration, who: &Identity) -> Result<Option<Lease>> {
        self.acquire_exclusive(key, ttl, who, None)
    }

    fn acquire_queued(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        line: &str,
    ) -> Result<Option<Lease>> {
        self.acquire_one(key, ttl, who, limit, Some(line))
    }

    fn leave_queue(&self, key: &str, line: &str) -> Result<()> {
        self.with_con(true, |con, _| {
            con.prepare_cached("DELETE FROM queue WHERE key = ?1 AND line = ?2")?
                .execute(params![key, line])?;
            Ok(())
        })
    }

    fn renew_within(&self, renewal: &Renewal<'_>) -> Result<Renewed> {
        self.with_con(true, |con, now| self.renew_in(con, renewal, now))
    }

    fn release(&self, lease: &Lease) -> Result<bool> {
        if lease.slotted() {
            return self.release_slot(lease);
        }
        self.delete_owned(
            "DELETE FROM leases WHERE key = ?1 AND token = ?2 AND expires_ns > ?3 AND boot = ?4",
            lease,
        )
    }

    fn held(&self, key: &str) -> Result<bool> {
        self.with_con(false, |con, now| {
            Ok(self.live_lease(con, key, now)?.is_some() || self.slots_live(con, key, now)?)
        })
    }

    fn break_lease(&self, key: &str) -> Result<bool> {
        let (broken, next) = self.with_con(true, |con, now| {
            let tx = con.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx
                .prepare_cached(
                    "DELETE FROM leases WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3",
                )?
                .execute(params![key, now, self.boot])?;
            tx.prepare_cached("DELETE FROM leases WHERE key = ?1")?
                .execute(params![key])?;
            let slots = self.break_slots_in(&tx, key, now)?;
            let broken = n == 1 || slots;
            let next = self.next_line(&tx, key, broken, now)?;
            tx.commit()?;
            Ok((broken, next))
        })?;
        if let Some(line) = next {
            self.ring_next(key, &line);
        }
        Ok(broken)
    }

    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()> {
        self.with_con(true, |con, now| {
            con.prepare_cached(
                "INSERT OR REPLACE INTO flags (key, expires_ns, boot) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![key, now.saturating_add(ns(ttl)), self.boot])?;
            Ok(())
        })?;
        // After the commit: a listener that wakes finds the flag up.
        self.ring_raised(key);
        Ok(())
    }

    #[cfg(target_os = "linux")]
    fn watch_flags(&self, watcher: Weak<dyn FlagWatcher>) -> Option<FlagWatch> {
        let db = self.path.clone();
        self.push.get().watch(watcher, move |registry| {
            crate::contract::push::spawn("mistri-flags", move || doorbell::run(&db, &registry))
        })
    }

    fn flag(&self, key: &str) -> Result<bool> {
        self.with_con(false, |con, now| self.flag_in(con, key, now))
    }

    fn clear_flag(&self, key: &str) -> Result<()> {
        self.with_con(true, |con, _| {
            con.prepare_cached("DELETE FROM flags WHERE key = ?1")?
                .execute(params![key])?;
            Ok(())
        })
    }

    fn info(&self, key: &str) -> Result<Option<LeaseInfo>> {
        self.with_con(false, |con, now| {
            con.prepare_cached(&format!(
                "{INFO_SELECT} WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3"
            ))?
            .query_row(params![key, now, self.boot], |r| lease_info(r, now))
            .optional()?
            .map_or_else(|| self.slot_info_in(con, key, now), |info| Ok(Some(info)))
        })
    }

    fn acquire_limited(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
    ) -> Result<Option<Lease>> {
        self.acquire_one(key, ttl, who, limit, None)
    }

    fn expires_in(&self, key: &str) -> Result<Option<Duration>> {
        self.with_con(false, |con, now| self.expires_in_con(con, key, now))
    }

    fn list(&self, prefix: &str) -> Result<Listing> {
        let mut listing = self.with_con(false, |con, now| {
            // One read transaction: leases and flags of one moment.
            let tx = con.transaction_with_behavior(TransactionBehavior::Deferred)?;
            let live = "substr(key, 1, length(?1)) = ?1 AND expires_ns > ?2 AND boot = ?3";
            let leases = tx
                .prepare_cached(&format!("{INFO_SELECT} WHERE {live} ORDER BY key"))?
                .query_map(params![prefix, now, self.boot], |r| lease_info(r, now))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut leases = leases;
            leases.extend(self.slot_list_in(&tx, prefix, now)?);
            let flags = tx
                .prepare_cached(&format!(
                    "SELECT key, expires_ns FROM flags WHERE {live} ORDER BY key"
                ))?
                .query_map(params![prefix, now, self.boot], |r| {
                    let expires: i64 = r.get(1)?;
                    Ok(FlagInfo {
                        key: r.get(0)?,
                        time_left: Some(Duration::from_nanos(
                            u64::try_from(expires.saturating_sub(now)).unwrap_or(0),
                        )),
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            tx.commit()?;
            Ok(Listing { leases, flags })
        })?;
        listing.sort();
        Ok(listing)
    }

    fn beat(&self, renewals: &[Renewal<'_>], flags: &[&str], deadline: Instant) -> Result<Beat> {
        if renewals.is_empty() && flags.is_empty() {
            return Ok(Beat::default());
        }
        if deadline <= Instant::now() {
            return Err(Error::Connection(format!(
                "local lock database {}: no time left for this tick",
                self.path.display()
            )));
        }
        // One transaction for the whole tick: one write lock, one fsync.
        // Waiting for a lock is bounded by the tick's deadline.
        self.with_con_until(!renewals.is_empty(), deadline, |con, _| {
            let tx = con.transaction_with_behavior(if renewals.is_empty() {
                TransactionBehavior::Deferred
            } else {
                TransactionBehavior::Immediate
            })?;
            let now = now_ns();
            let renewed = renewals
                .iter()
                .map(|r| self.renew_in(&tx, r, now))
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let up = flags
                .iter()
                .map(|key| self.flag_in(&tx, key, now))
                .collect::<rusqlite::Result<Vec<_>>>()?;
            tx.commit()?;
            Ok(Beat {
                renewals: renewed.into_iter().map(Ok).collect(),
                flags: up.into_iter().map(Ok).collect(),
            })
        })
    }
}

/// The queue of waiting lines per key (`docs/PROTOCOL.md`, "Waiting"):
/// one row per line ([`crate::waiting`]), in order of `since_ns`; a row
/// is live while `expires_ns` is ahead (same clock and boot as leases).
/// Created if missing, so databases made before it gain it on open.
const QUEUE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS queue (
  key TEXT NOT NULL, line TEXT NOT NULL, since_ns INTEGER NOT NULL, expires_ns INTEGER NOT NULL,
  boot TEXT NOT NULL,
  PRIMARY KEY (key, line)
) WITHOUT ROWID;
";

/// The table of N-holder leases: one row per live slot, its description in
/// the columns `leases` has (plus `lim`, the limit it was taken with).
/// Created if missing, so databases made before it gain it on open.
const SLOTS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS slots (
  key TEXT NOT NULL, token TEXT NOT NULL, expires_ns INTEGER NOT NULL, boot TEXT NOT NULL,
  lim INTEGER NOT NULL, holder TEXT, fence INTEGER, acquired_ms INTEGER, renewed_ms INTEGER,
  ttl_ms INTEGER, heartbeat_ms INTEGER,
  PRIMARY KEY (key, token)
) WITHOUT ROWID;
";

const SLOT_SELECT: &str = "SELECT key, expires_ns, holder, fence, acquired_ms, renewed_ms, ttl_ms, heartbeat_ms, lim FROM slots";

/// N-holder leases (`slots` table): the same transactions, clocks and fence
/// counter as the exclusive leases. An exclusive acquire refuses a key with
/// a live slot, a slot acquire a key with a live exclusive lease.
impl Local {
    fn slots_live(&self, con: &Connection, key: &str, now: i64) -> rusqlite::Result<bool> {
        con.prepare_cached(
            "SELECT EXISTS(SELECT 1 FROM slots WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3)",
        )?
        .query_row(params![key, now, self.boot], |r| r.get(0))
    }

    fn acquire_slot(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        let token = mint_token()?;
        self.with_con(true, |con, _| {
            // As for an exclusive acquire: the fence reaches the disk first.
            con.pragma_update(None, "synchronous", "FULL")?;
            let fence = self.acquire_slot_in(con, key, &token, ttl, who, limit, line);
            let _ = con.pragma_update(None, "synchronous", "NORMAL");
            Ok(fence?.map(|fence| Lease::slot(key, token.clone(), fence, limit)))
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn acquire_slot_in(
        &self,
        con: &mut Connection,
        key: &str,
        token: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        line: Option<&str>,
    ) -> rusqlite::Result<Option<u64>> {
        let tx = con.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ns();
        if self.live_lease(&tx, key, now)?.is_some() {
            return self.refuse_queued(tx, key, line, now);
        }
        tx.prepare_cached("DELETE FROM slots WHERE key = ?1 AND (expires_ns <= ?2 OR boot <> ?3)")?
            .execute(params![key, now, self.boot])?;
        let live: i64 = tx
            .prepare_cached("SELECT COUNT(*) FROM slots WHERE key = ?1")?
            .query_row(params![key], |r| r.get(0))?;
        if live >= i64::from(limit) {
            return self.refuse_queued(tx, key, line, now);
        }
        // Free slots go to the first `free` live lines queued (a line
        // further back, or a plain acquire, gets one only if fewer wait).
        let free = u32::try_from(i64::from(limit) - live).unwrap_or(0);
        let ahead = self.queue_head(&tx, key, now, free)?;
        let mine = line.is_some_and(|l| ahead.iter().any(|a| a == l));
        if !mine && ahead.len() >= free as usize {
            return self.refuse_queued(tx, key, line, now);
        }
        if let Some(line) = line {
            self.leave_queued(&tx, key, line, now)?;
        }
        let floor = i64::try_from(crate::contract::fence::floor_now()).unwrap_or(i64::MAX);
        let fence: i64 = tx
            .prepare_cached(
                "UPDATE meta SET value = max(value + 1, ?1) WHERE name = 'fence' RETURNING value",
            )?
            .query_row(params![floor], |r| r.get(0))?;
        tx.prepare_cached(
            "INSERT INTO slots (key, token, expires_ns, boot, lim, holder, fence, acquired_ms, renewed_ms, ttl_ms, heartbeat_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9, ?10)",
        )?
        .execute(params![
            key,
            token,
            now.saturating_add(ns(ttl)),
            self.boot,
            i64::from(limit),
            who.label,
            fence,
            floor / 1000,
            ms(ttl),
            ms(who.heartbeat)
        ])?;
        tx.commit()?;
        Ok(Some(fence as u64))
    }

    fn release_slot(&self, lease: &Lease) -> Result<bool> {
        self.delete_owned(
            "DELETE FROM slots WHERE key = ?1 AND token = ?2 AND expires_ns > ?3 AND boot = ?4",
            lease,
        )
    }

    /// A release: `delete` (parameters key, token, now, boot) of the live
    /// row `lease` owns, and in the same transaction the next line of the
    /// key's queue; after the commit that line's doorbell is rung (the line
    /// that wakes finds the lease free). True if the row was deleted.
    fn delete_owned(&self, delete: &str, lease: &Lease) -> Result<bool> {
        let (deleted, next) = self.with_con(true, |con, now| {
            let tx = con.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx.prepare_cached(delete)?.execute(params![
                lease.key(),
                lease.token(),
                now,
                self.boot
            ])?;
            let next = self.next_line(&tx, lease.key(), n == 1, now)?;
            tx.commit()?;
            Ok((n == 1, next))
        })?;
        if let Some(line) = next {
            self.ring_next(lease.key(), &line);
        }
        Ok(deleted)
    }

    /// Deletes every slot of `key`: whether one was live.
    fn break_slots_in(&self, con: &Connection, key: &str, now: i64) -> rusqlite::Result<bool> {
        let live = self.slots_live(con, key, now)?;
        con.prepare_cached("DELETE FROM slots WHERE key = ?1")?
            .execute(params![key])?;
        Ok(live)
    }

    /// The live slots of the keys `filter` selects (`?1`), grouped by key.
    fn slot_infos(
        &self,
        con: &Connection,
        filter: &str,
        arg: &str,
        now: i64,
    ) -> rusqlite::Result<Vec<LeaseInfo>> {
        let rows = con
            .prepare_cached(&format!(
                "{SLOT_SELECT} WHERE {filter} AND expires_ns > ?2 AND boot = ?3 ORDER BY key"
            ))?
            .query_map(params![arg, now, self.boot], |r| {
                let key: String = r.get(0)?;
                let expires: i64 = r.get(1)?;
                let limit: i64 = r.get(8)?;
                let left =
                    Duration::from_nanos(u64::try_from(expires.saturating_sub(now)).unwrap_or(0));
                Ok((key, holder_from(r, 2)?, limit, left))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut infos = Vec::new();
        let mut group: Vec<(HolderInfo, u32, Duration)> = Vec::new();
        let mut rows = rows.into_iter().peekable();
        while let Some((key, holder, limit, left)) = rows.next() {
            if let Some(holder) = holder {
                group.push((holder, u32::try_from(limit).unwrap_or(u32::MAX), left));
            }
            if rows.peek().is_none_or(|next| next.0 != key) {
                infos.extend(LeaseInfo::slotted(key, std::mem::take(&mut group)));
            }
        }
        Ok(infos)
    }

    fn slot_info_in(
        &self,
        con: &Connection,
        key: &str,
        now: i64,
    ) -> rusqlite::Result<Option<LeaseInfo>> {
        Ok(self.slot_infos(con, "key = ?1", key, now)?.pop())
    }

    fn slot_list_in(
        &self,
        con: &Connection,
        prefix: &str,
        now: i64,
    ) -> rusqlite::Result<Vec<LeaseInfo>> {
        self.slot_infos(con, "substr(key, 1, length(?1)) = ?1", prefix, now)
    }

    fn expires_in_con(
        &self,
        con: &Connection,
        key: &str,
        now: i64,
    ) -> rusqlite::Result<Option<Duration>> {
        let soonest: Option<i64> = con
            .prepare_cached(
                "SELECT coalesce((SELECT expires_ns FROM leases WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3), (SELECT min(expires_ns) FROM slots WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3))",
            )?
            .query_row(params![key, now, self.boot], |r| r.get(0))?;
        Ok(soonest.map(|at| Duration::from_nanos(u64::try_from(at - now).unwrap_or(0))))
    }
}

/// How many doorbells of each kind a database has: a key (or a key and a
/// line) rings the one its [`fnv1a`] hash selects, modulo this.
pub const BELL_BUCKETS: u64 = 4096;

/// 64-bit FNV-1a of `parts` concatenated. Fixed forever: processes of
/// every version on a host agree on it (it names the doorbell files), so
/// it is written here, not taken from std's hasher (which may change).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for part in parts {
        for &byte in *part {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(PRIME);
        }
    }
    hash
}

/// The doorbell bucket of the flag `key`.
fn bucket_of(key: &str) -> u16 {
    // Below 4096: fits.
    (fnv1a(&[key.as_bytes()]) % BELL_BUCKETS) as u16
}

/// The doorbell bucket of the waiting line `line` of `key`: the key's
/// bytes, one 0 byte, the line's bytes.
fn line_bucket_of(key: &str, line: &str) -> u16 {
    (fnv1a(&[key.as_bytes(), &[0], line.as_bytes()]) % BELL_BUCKETS) as u16
}

/// One doorbell file in `<database>-bells/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Bell {
    /// `raised-<bucket>`: rung by `set_flag` of a key in the bucket.
    Raised(u16),
    /// `next-<bucket>`: rung by a release that makes a line in the bucket
    /// the next of its key's queue.
    Next(u16),
}

impl Bell {
    /// What rings for `interest`.
    #[cfg(target_os = "linux")]
    fn of(interest: &crate::contract::push::Interest) -> Bell {
        match interest {
            crate::contract::push::Interest::Flag(key) => Bell::Raised(bucket_of(key)),
            crate::contract::push::Interest::Line { key, line } => {
                Bell::Next(line_bucket_of(key, line))
            }
        }
    }

    /// Its file's name: the kind, a dash, the bucket as 3 lowercase hex
    /// digits.
    fn file_name(self) -> String {
        match self {
            Bell::Raised(b) => format!("raised-{b:03x}"),
            Bell::Next(b) => format!("next-{b:03x}"),
        }
    }
}

/// `<database>-bells`: the folder of the doorbells of the database at
/// `db`, next to it.
fn bells_dir_of(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-bells");
    PathBuf::from(name)
}

/// Rings the doorbell at `path`: opens it for writing and closes it, which
/// makes the kernel report `IN_CLOSE_WRITE` to its watchers. Never creates
/// it (a missing file means nobody ever watched that bucket), never follows
/// a symbolic link, never blocks (`O_NONBLOCK`: a FIFO put there can't hold
/// the ringer); every error is ignored (push is best effort).
fn ring(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path);
}

/// Makes (mode 0700, if missing) and checks the doorbell folder of the
/// database at `db`, by the database folder's rules ([`check_folder`]):
/// a real folder of this uid (or root) that nobody else can write.
/// Listeners only: ringers never create anything.
#[cfg(target_os = "linux")]
fn bells_folder(db: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = bells_dir_of(db);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(config_err(
                db,
                format!("cannot create its doorbell folder {}: {e}", dir.display()),
            ))
        }
    }
    check_folder(db, &dir, db == user_default_path())?;
    Ok(dir)
}

/// Creates the doorbell at `path` if missing (mode 0600, never through a
/// symbolic link). Opened read-only, so the close is not a ring
/// (`IN_CLOSE_NOWRITE`) for the other processes watching it.
#[cfg(target_os = "linux")]
fn create_bell(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    // O_CREAT by hand: std refuses `create` without write access.
    std::fs::OpenOptions::new()
        .read(true)
        .mode(0o600)
        .custom_flags(libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .and_then(|file| match file.metadata()?.is_file() {
            true => Ok(()),
            false => Err(std::io::Error::other("not a regular file")),
        })
}

/// The doorbell listener (see the module header): inotify, Linux only.
#[cfg(target_os = "linux")]
mod doorbell;

#[cfg(test)]
mod tests;
