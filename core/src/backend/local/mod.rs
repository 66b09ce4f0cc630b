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
//!   live line of the key's `queue` inside its transaction (a slot's
//!   release the first `free` ones, `free` = its limit − live slots after
//!   it, at least 1; a break of an N-holder lease as many as its limit)
//!   and, after the commit, rings those lines' bells only (no queue: no
//!   ring). A line leaving the queue that was one of them rings the line
//!   that moves up.
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
//! registry's interests (`listen::Subscriptions`): one watch per
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

mod bells;
/// The doorbell listener (see the module header): inotify, Linux only.
#[cfg(target_os = "linux")]
mod doorbell;
mod ops;
mod place;
mod slots;
mod store;
#[cfg(test)]
mod tests;

pub use bells::BELL_BUCKETS;
pub use place::{default_path, user_default_path, DEFAULT_BASE, PATH_ENV};
pub use store::{Local, BUSY_TIMEOUT, PRUNE_EVERY};
