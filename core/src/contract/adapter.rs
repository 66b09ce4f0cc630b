//! The adapter trait: what a backend (Memory, Local, Redis) must do.
//!
//! The trait passes ownership explicitly: `acquire` returns a [`Lease`]
//! carrying the key, the owner token and the fencing number, and `renew` /
//! `release` take that lease back and act only if its token still owns the
//! key (atomically: Lua on Redis, one lock on Memory). The token-less
//! seven-method surface of the seed lives one level up, in
//! [`crate::Locks`], which keeps the issued leases inside itself.
//!
//! Vocabulary: an *adapter* here is a backend (this trait). What the host
//! languages hand to `configure` / `MistriLocks.locks=` is an owner handle,
//! a [`crate::Locks`] (the faces' `Locks` class); a Locks wraps one
//! adapter and owns its leases.
//!
//! Implementations may assume the faces validated their arguments: keys are
//! non-empty and durations non-zero and at most [`crate::args::MAX_SECS`].

use crate::contract::info::{Identity, LeaseInfo, Listing};
use crate::contract::push::{FlagWatch, FlagWatcher};
use crate::error::Result;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// A lease this process holds on a key: the proof of ownership that renew
/// and release present.
#[derive(Clone, PartialEq, Eq)]
pub struct Lease {
    // Shared with the issued-lease map of `Locks` (one allocation per key).
    key: Arc<str>,
    token: String,
    fence: u64,
    /// 1 for an exclusive lease; N for one slot of an N-holder lease.
    limit: u32,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a capability: keep it out of logs.
        f.debug_struct("Lease")
            .field("key", &self.key)
            .field("fence", &self.fence)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// Builds an exclusive lease; for adapter implementations.
    pub fn new(key: impl Into<Arc<str>>, token: impl Into<String>, fence: u64) -> Self {
        Lease {
            key: key.into(),
            token: token.into(),
            fence,
            limit: 1,
        }
    }
    /// Builds one slot of an N-holder lease taken with `limit` (a `limit`
    /// of 1 is an exclusive lease, [`Lease::new`]); for adapter
    /// implementations. Renew, release and beat of a slot act on that slot
    /// only, by its token.
    pub fn slot(
        key: impl Into<Arc<str>>,
        token: impl Into<String>,
        fence: u64,
        limit: u32,
    ) -> Self {
        Lease {
            key: key.into(),
            token: token.into(),
            fence,
            limit: limit.max(1),
        }
    }
    /// Is this one slot of an N-holder lease (taken with a limit over 1)?
    pub fn slotted(&self) -> bool {
        self.limit > 1
    }
    /// The limit it was taken with: 1 for an exclusive lease.
    pub fn limit(&self) -> u32 {
        self.limit
    }
    /// The key the lease is on (without any namespace).
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The key as a shared string (cheap to clone).
    pub fn shared_key(&self) -> &Arc<str> {
        &self.key
    }
    /// The owner token minted at acquire (128 random bits as hex).
    pub fn token(&self) -> &str {
        &self.token
    }
    /// The fencing number: strictly greater than every earlier acquire's
    /// number for this key on this backend (exclusive leases and slots
    /// share one counter per key).
    pub fn fence(&self) -> u64 {
        self.fence
    }
}

/// One renewal of a heartbeat tick.
#[derive(Debug, Clone, Copy)]
pub struct Renewal<'a> {
    /// The lease to extend (its token must still own the key).
    pub lease: &'a Lease,
    /// The new time to live, from when the backend applies the renewal.
    pub ttl: Duration,
    /// Apply only if at least this much of the lease's current life is
    /// left when the backend sees the renewal. The engine passes its safety
    /// margin plus the last round-trip time, so a renewal that arrives after
    /// the holder was told it may have lost the lease can never extend it
    /// (see `docs/PROTOCOL.md`). Zero: no such condition.
    pub min_left: Duration,
}

/// What one renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewed {
    /// The token owned the key and the lease is extended.
    Yes,
    /// The lease is gone, or another token owns the key.
    NotHeld,
    /// The token still owns the key but less than `min_left` of its life
    /// was left: not extended, and its holder must consider it lost.
    TooLate,
}

/// One heartbeat tick's answers, in request order, one result per item: a
/// failure of one item (a server error, a malformed reply) does not decide
/// the others.
#[derive(Debug, Default)]
pub struct Beat {
    /// For each renewal: what it found, or why it has no answer.
    pub renewals: Vec<Result<Renewed>>,
    /// For each flag key: is the flag up, or why there is no answer.
    pub flags: Vec<Result<bool>>,
    /// The server's wall clock (time since the Unix epoch) read within the
    /// beat's round trip, if the backend reports it (Redis `TIME`,
    /// Postgres `clock_timestamp()`): the engine compares its steps with
    /// its own clock and tells the holds when the server's clock jumps by
    /// more than their safety margin (server expiry is absolute wall time).
    pub server_clock: Option<Duration>,
}

/// A backend for leases and flags. Object-safe, shared between threads.
///
/// # Errors
/// Every method returns [`crate::Error::Connection`] when the backend can't
/// be reached and [`crate::Error::Backend`] when it answers with an error.
/// "Someone else holds it" is never an error: it is `Ok(None)` / `Ok(false)`.
pub trait Adapter: Send + Sync + 'static {
    /// A short name for messages and inspection: `"memory"`, `"redis"`.
    fn name(&self) -> &'static str;

    /// The longest one operation may block on I/O (Redis: the socket
    /// timeout; Local: the lock wait). Zero for in-process adapters. The
    /// engine caps each tick by it and counts it into the default safety
    /// margin.
    fn io_timeout(&self) -> Duration {
        Duration::ZERO
    }

    /// Takes the lease on `key` for `ttl` if no live lease exists, minting a
    /// fresh owner token and the next fencing number.
    fn acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lease>>;

    /// [`Adapter::acquire`], storing `who` with the lease in the same atomic
    /// step (see [`crate::contract::info`]). The default ignores `who`, for adapters
    /// that keep no holder descriptions.
    fn acquire_as(&self, key: &str, ttl: Duration, who: &Identity) -> Result<Option<Lease>> {
        let _ = who;
        self.acquire(key, ttl)
    }

    /// [`Adapter::acquire_as`] for an N-holder lease: takes one of `limit`
    /// slots on `key` (each with its own token, fence and expiry) if fewer
    /// than `limit` live holders are there. `limit == 1` is exactly
    /// `acquire_as`. The default supports only that.
    ///
    /// # Errors
    /// The backend's errors; the default refuses `limit > 1` with
    /// [`crate::Error::InvalidArgument`].
    fn acquire_limited(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
    ) -> Result<Option<Lease>> {
        if limit == 1 {
            return self.acquire_as(key, ttl, who);
        }
        Err(crate::Error::InvalidArgument(format!(
            "the {} adapter does not support N-holder leases (limit {limit})",
            self.name()
        )))
    }

    /// [`Adapter::acquire_limited`] for a waiter: `line` names this
    /// process's line of waiters on `key` ([`crate::waiting`]), which keeps
    /// a place in the backend's queue of lines for the key. A refused try
    /// queues the line (or refreshes its place, keeping it); a free lease
    /// goes to the line at the head of the queue, and a plain acquire is
    /// refused while a live line is queued. The default ignores `line` (no
    /// queue: across processes the first try to arrive wins).
    ///
    /// # Errors
    /// As [`Adapter::acquire_limited`].
    fn acquire_queued(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        line: &str,
    ) -> Result<Option<Lease>> {
        let _ = line;
        self.acquire_limited(key, ttl, who, limit)
    }

    /// [`Adapter::acquire_limited`] for a hold that watches the stop flag
    /// `flag`: where the backend can, the acquire's own round trip also
    /// reads the flag, after the acquire is applied (`Some(up)` with the
    /// lease), so the hold's first read of its flag costs no round trip of
    /// its own; `None` with the lease: not read (the engine reads it at
    /// once, as it does for every hold with a stop key). The default reads
    /// nothing.
    ///
    /// # Errors
    /// As [`Adapter::acquire_limited`]; a failed read of the flag is
    /// `None`, not an error (the engine reads it again).
    fn acquire_reading_flag(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        flag: &str,
    ) -> Result<Option<(Lease, Option<bool>)>> {
        let _ = flag;
        Ok(self
            .acquire_limited(key, ttl, who, limit)?
            .map(|lease| (lease, None)))
    }

    /// Takes `line` out of the backend's queue for `key` (its last waiter
    /// left without the lease). Best effort, one bounded round trip; the
    /// default does nothing.
    ///
    /// # Errors
    /// The backend's errors (the entry then lapses on its own).
    fn leave_queue(&self, key: &str, line: &str) -> Result<()> {
        let _ = (key, line);
        Ok(())
    }

    /// How long until the lease on `key` could lapse (the longest-lived
    /// slot's expiry for an N-holder lease: the soonest one), as the backend
    /// sees it; `Ok(None)` when no live lease is there or the adapter can't
    /// tell. Waiting acquires sleep at most this long before trying again
    /// ([`crate::waiting`]), so a crashed holder's lease is retaken at its
    /// expiry without polling.
    ///
    /// # Errors
    /// The backend's errors.
    fn expires_in(&self, key: &str) -> Result<Option<Duration>> {
        let _ = key;
        Ok(None)
    }

    /// Who holds `key`: `Ok(None)` when no live lease is there.
    ///
    /// # Errors
    /// The backend's errors; the default says the adapter can't tell.
    fn info(&self, key: &str) -> Result<Option<LeaseInfo>> {
        let _ = key;
        Err(crate::Error::Backend(format!(
            "the {} adapter does not keep holder descriptions",
            self.name()
        )))
    }

    /// The live leases and raised flags whose keys start with `prefix` (all
    /// of them for `""`), sorted by key. Never blocks the backend for long
    /// (Redis: `SCAN`, not `KEYS`).
    ///
    /// # Errors
    /// The backend's errors; the default says the adapter can't list.
    fn list(&self, prefix: &str) -> Result<Listing> {
        let _ = prefix;
        Err(crate::Error::Backend(format!(
            "the {} adapter can't list its keys",
            self.name()
        )))
    }

    /// Extends `lease` to `ttl` from now if its token still owns the key.
    /// Returns whether it did. (The default is [`Adapter::renew_within`]
    /// with no `min_left`.)
    fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool> {
        let renewal = Renewal {
            lease,
            ttl,
            min_left: Duration::ZERO,
        };
        Ok(self.renew_within(&renewal)? == Renewed::Yes)
    }

    /// Deletes `lease` if its token still owns the key. Returns whether it
    /// did.
    fn release(&self, lease: &Lease) -> Result<bool>;

    /// [`Adapter::release`], answered by `deadline`: networked adapters
    /// wait for the server at most until the earlier of their I/O timeout
    /// and `deadline`, which the engine sets to the instant the lease can
    /// no longer be alive on the server (the send time of its last
    /// confirmed renewal, or of the acquire, plus its ttl). Past it there
    /// is nothing left to release. A timeout drops the connection (a late
    /// reply must not be read as the next command's).
    ///
    /// Returns whether it deleted the lease; `Err` with
    /// [`crate::Error::Connection`] when no answer came in time. The
    /// default ignores `deadline` and calls [`Adapter::release`], for
    /// adapters whose release does not block.
    ///
    /// # Errors
    /// As [`Adapter::release`], plus a timeout at `deadline`.
    fn release_by(&self, lease: &Lease, deadline: Instant) -> Result<bool> {
        let _ = deadline;
        self.release(lease)
    }

    /// Is a live lease on `key` (anyone's)?
    fn held(&self, key: &str) -> Result<bool>;

    /// Operator override: deletes whatever lease is on `key`, whoever owns
    /// it. Its holder finds out at its next renewal (its hold is lost).
    /// Returns whether there was a live lease.
    fn break_lease(&self, key: &str) -> Result<bool>;

    /// Raises the flag `key` for `ttl`.
    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()>;

    /// Is the flag `key` up?
    fn flag(&self, key: &str) -> Result<bool>;

    /// Lowers the flag `key` (no error if it was down).
    fn clear_flag(&self, key: &str) -> Result<()>;

    /// Push delivery of raised flags ([`crate::contract::push`]): from now until the
    /// returned guard is dropped, `watcher` is told when flags are raised
    /// (or may have been) by clients that announce them, through one
    /// listener per adapter and process. `None`: this backend only polls
    /// (the default), or its listener could not be started.
    ///
    /// Never blocks on I/O: the listener connects on its own thread.
    fn watch_flags(&self, watcher: Weak<dyn FlagWatcher>) -> Option<FlagWatch> {
        let _ = watcher;
        None
    }

    /// How often the heartbeat reads the backend's settings that can break
    /// the promise after connect ([`Adapter::check_settings`]); `None` (the
    /// default): never.
    fn settings_check_every(&self) -> Option<Duration> {
        None
    }

    /// Reads, once, the backend's settings that can break the promise at
    /// run time (Redis: `INFO memory` of each server, for an evicting
    /// memory policy), answered by `deadline`. `Ok(Some(risk))` says what
    /// is wrong; the engine then tells every hold of its owner (an
    /// `at_risk` event with `risk` as the reason). The engine calls it from
    /// its I/O thread every [`Adapter::settings_check_every`] while it has
    /// holds: one call per engine per period, never one per hold.
    ///
    /// # Errors
    /// The backend's errors (the verdict stands until the next check).
    fn check_settings(&self, deadline: Instant) -> Result<Option<String>> {
        let _ = deadline;
        Ok(None)
    }

    /// Extends `renewal.lease` if its token still owns the key and at least
    /// `renewal.min_left` of its life is left.
    fn renew_within(&self, renewal: &Renewal<'_>) -> Result<Renewed>;

    /// One heartbeat tick: every renewal and every flag read, answered by
    /// `deadline`.
    ///
    /// Networked adapters send everything in one round trip and must not
    /// block past `deadline` (a timeout drops the connection; the next
    /// tick uses a fresh one). `Err` means no item has an answer; per-item
    /// failures go in the [`Beat`]. The default does one call per item and
    /// gives the items still waiting at `deadline` a timeout error.
    fn beat(&self, renewals: &[Renewal<'_>], flags: &[&str], deadline: Instant) -> Result<Beat> {
        // Each item runs only while the deadline has not passed.
        fn in_time<T>(
            name: &str,
            deadline: Instant,
            item: impl FnOnce() -> Result<T>,
        ) -> Result<T> {
            if Instant::now() < deadline {
                return item();
            }
            Err(crate::Error::Connection(format!(
                "{name} did not answer before the tick's deadline"
            )))
        }
        let name = self.name();
        Ok(Beat {
            renewals: renewals
                .iter()
                .map(|r| in_time(name, deadline, || self.renew_within(r)))
                .collect(),
            flags: flags
                .iter()
                .map(|key| in_time(name, deadline, || self.flag(key)))
                .collect(),
            server_clock: None,
        })
    }
}

/// The acquire family of [`Adapter`] (`acquire`, `acquire_as`,
/// `acquire_queued`, `acquire_limited`) for a backend, written once: a
/// backend with inherent `acquire_exclusive(key, ttl, who, line)` and
/// `acquire_slot(key, ttl, who, limit, line)` puts `acquire_dispatch!();`
/// in its `impl Adapter` (crate-private: the public trait and its
/// defaults stay as they are for outside implementors).
macro_rules! acquire_dispatch {
    () => {
        fn acquire(
            &self,
            key: &str,
            ttl: std::time::Duration,
        ) -> $crate::Result<Option<$crate::Lease>> {
            self.acquire_exclusive(key, ttl, &$crate::Identity::of_process(), None)
        }

        fn acquire_as(
            &self,
            key: &str,
            ttl: std::time::Duration,
            who: &$crate::Identity,
        ) -> $crate::Result<Option<$crate::Lease>> {
            self.acquire_exclusive(key, ttl, who, None)
        }

        fn acquire_queued(
            &self,
            key: &str,
            ttl: std::time::Duration,
            who: &$crate::Identity,
            limit: u32,
            line: &str,
        ) -> $crate::Result<Option<$crate::Lease>> {
            match limit {
                0 | 1 => self.acquire_exclusive(key, ttl, who, Some(line)),
                _ => self.acquire_slot(key, ttl, who, limit, Some(line)),
            }
        }

        fn acquire_limited(
            &self,
            key: &str,
            ttl: std::time::Duration,
            who: &$crate::Identity,
            limit: u32,
        ) -> $crate::Result<Option<$crate::Lease>> {
            match limit {
                0 | 1 => self.acquire_exclusive(key, ttl, who, None),
                _ => self.acquire_slot(key, ttl, who, limit, None),
            }
        }
    };
}
pub(crate) use acquire_dispatch;

/// [`Adapter::acquire_reading_flag`] for a backend in this process (Memory,
/// Local), written once: a backend puts `acquire_reading_flag_in_process!();`
/// in its `impl Adapter`. The flag is read right after the acquire: no round
/// trip to save, but no engine round for the hold's first read; a failed
/// read is `None`, as the trait says.
macro_rules! acquire_reading_flag_in_process {
    () => {
        fn acquire_reading_flag(
            &self,
            key: &str,
            ttl: std::time::Duration,
            who: &crate::Identity,
            limit: u32,
            flag: &str,
        ) -> crate::Result<Option<(crate::Lease, Option<bool>)>> {
            Ok(self
                .acquire_limited(key, ttl, who, limit)?
                .map(|lease| (lease, self.flag(flag).ok())))
        }
    };
}
pub(crate) use acquire_reading_flag_in_process;
