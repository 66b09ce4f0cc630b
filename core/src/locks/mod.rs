//! [`Locks`]: the seed's token-less seven-method surface over an adapter,
//! plus the adapter's heartbeat engine and [`Locks::hold`].
//!
//! `acquire(key)` remembers the lease it got inside this object, so
//! `renew(key)` and `release(key)` can present its owner token: an object
//! that never acquired a key (or whose lease expired and was retaken) can't
//! renew or release someone else's lease. The remembered leases are dropped
//! in a forked child, which therefore can't renew or release its parent's
//! leases either.
//!
//! On [`Memory`] the plain acquire, renew, release and fence skip the
//! issued-lease map: the store's entry records its owner (this object in
//! this fork generation; see `memory.rs`, "Owned entries"), so a pair costs
//! one lock and one lookup per call. Leases from the other paths (a waiting
//! or N-holder acquire) are kept in the map on every backend.

mod events;
pub(crate) mod global;
pub(crate) mod stop;

use crate::args::{check_duration, check_key};
use crate::backend::local::Local;
use crate::backend::memory::{Memory, Owner};
use crate::contract::adapter::{Adapter, Lease};
use crate::contract::info::{default_label, Identity, LeaseInfo, Listing};
use crate::error::Result;
use crate::hold::engine::Engine;
use crate::hold::{Hold, HoldOptions};
use crate::runtime::fork::ForkLocal;
use crate::waiting::{AcquireOptions, Waiting};
use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Issued {
    // Keyed by the lease's own shared key: no second allocation per key.
    leases: HashMap<Arc<str>, Lease>,
    /// Per key, the latest instant its lease can be alive on the backend:
    /// the arrival of the answer to its acquire or last renewal + ttl
    /// (the backend applied it before answering). No entry after a renewal
    /// that failed (it may have been applied later): then only the I/O
    /// timeout bounds a release.
    ends: HashMap<Arc<str>, Instant>,
}

/// The issued leases of one fork generation.
#[derive(Default)]
struct IssuedCell {
    /// Was a lease ever put in the map? Until then Memory's owned calls
    /// (which keep their leases in the store) skip the map's lock.
    any: AtomicBool,
    map: Mutex<Issued>,
}

#[derive(Default)]
struct Label {
    /// The label of this object's leases; `None`: `host:pid language`.
    set: Option<Arc<str>>,
    /// The identity plain acquires present, made once rather than with a
    /// `format!` and a `getpid` per acquire, and the fork generation it was
    /// made in (a forked child has a new pid). `None` after `set_label`.
    identity: Option<(u64, Arc<Identity>)>,
}

/// The typed Memory backend of a `Locks` on one (`memory.rs`, "Owned
/// entries").
struct Owned {
    memory: Arc<Memory>,
    /// This object's owner id ([`Owner`]).
    id: u64,
    /// The stamp of the current label ([`Owner::new_stamp`]): changed
    /// (under the label's lock, after the label) by every `set_label`.
    stamp: AtomicU64,
}

struct Inner {
    engine: Engine,
    /// Set when the backend is a [`Memory`].
    owned: Option<Owned>,
    label: Mutex<Label>,
    // A forked child starts with none (the parent's leases are not its
    // own), without touching the parent's lock.
    issued: ForkLocal<IssuedCell>,
}

/// An adapter with the seven operations of the seed's contract, and holds.
/// Cloning shares everything (adapter, issued leases, heartbeat engine).
///
/// # Examples
/// ```
/// use mistri_locks::Locks;
/// use std::time::Duration;
///
/// let a = Locks::memory();
/// let b = a.new_owner();                 // another owner, same backend
/// assert!(a.acquire("k", Duration::from_secs(5))?);
/// assert!(b.held("k")?);
/// assert!(!b.release("k")?);              // not b's lease
/// assert!(a.release("k")?);
/// # Ok::<(), mistri_locks::Error>(())
/// ```
#[derive(Clone)]
pub struct Locks {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Locks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locks")
            .field("adapter", &self.adapter().name())
            .finish()
    }
}

impl Locks {
    /// Wraps an adapter.
    pub fn new(adapter: impl Adapter) -> Self {
        let adapter = Arc::new(adapter);
        let any: Arc<dyn std::any::Any + Send + Sync> = adapter.clone();
        Self::build(adapter, any.downcast::<Memory>().ok())
    }

    /// Wraps a shared adapter.
    pub fn from_arc(adapter: Arc<dyn Adapter>) -> Self {
        Self::build(adapter, None)
    }

    /// `memory`: the same object as `adapter`, typed, when it is a Memory.
    fn build(adapter: Arc<dyn Adapter>, memory: Option<Arc<Memory>>) -> Self {
        Locks {
            inner: Arc::new(Inner {
                engine: Engine::new(adapter),
                owned: memory.map(|memory| Owned {
                    memory,
                    id: Owner::new_id(),
                    stamp: AtomicU64::new(Owner::new_stamp()),
                }),
                label: Mutex::default(),
                issued: ForkLocal::new(IssuedCell::default(), |_| IssuedCell::default()),
            }),
        }
    }

    /// A fresh in-process [`Memory`] backend.
    pub fn memory() -> Self {
        Self::new(Memory::new())
    }

    /// A [`Local`] backend: the database file at `path`, or the per-user
    /// default ([`crate::backend::local::default_path`]) when `None`.
    ///
    /// A path written as a URL must be a Local one (`file://PATH`, read as
    /// PATH); another backend's URL is refused, pointing to [`Locks::open`].
    ///
    /// # Errors
    /// As [`Local::open`], and [`crate::Error::Config`] for another
    /// backend's URL.
    pub fn local(path: Option<&std::path::Path>) -> Result<Self> {
        if let Some(text) = path.and_then(|p| p.to_str()).filter(|t| t.contains("://")) {
            crate::backend::check_family(text, crate::backend::Family::Local)?;
            let rest = text.split_once("://").map_or("", |(_, rest)| rest);
            let inner = (!rest.is_empty()).then(|| std::path::Path::new(rest));
            return Ok(Self::new(Local::open(inner)?));
        }
        Ok(Self::new(Local::open(path)?))
    }

    /// The backend `url` names, any scheme of the one table
    /// ([`crate::backend::open_with`]): `memory://`, a Local path or
    /// `file://PATH`, `redis://`, `rediss://`, `redis+cluster://`,
    /// `redis+sentinel://`, `postgres://`, `postgresql://` or a libpq
    /// key/value DSN; every default option.
    ///
    /// # Errors
    /// As [`Locks::open_with`].
    pub fn open(url: &str) -> Result<Self> {
        Self::open_with(url, &crate::backend::OpenOptions::default())
    }

    /// [`Locks::open`] with typed options (namespace, label, Postgres
    /// schema, I/O timeout): [`Locks::open_as`] without the family.
    ///
    /// # Errors
    /// As [`Locks::open_as`].
    pub fn open_with(url: &str, options: &crate::backend::OpenOptions) -> Result<Self> {
        Self::open_as(url, options).map(|(_, locks)| locks)
    }

    /// The backend `url` names and its [`crate::Family`], the URL
    /// classified once (the one scheme table), the options checked once and
    /// opened through the one dispatcher ([`crate::backend::open_with`]),
    /// every family alike. A face maps the family to its class by
    /// [`crate::Family::name`].
    ///
    /// # Errors
    /// As [`crate::backend::open_with`], and [`crate::Error::InvalidArgument`]
    /// for an empty label.
    pub fn open_as(
        url: &str,
        options: &crate::backend::OpenOptions,
    ) -> Result<(crate::backend::Family, Self)> {
        if let Some(label) = &options.label {
            crate::args::check_label("label", label)?;
        }
        let (family, adapted) = crate::backend::dispatch(url, options)?;
        let locks = match adapted {
            // Memory is wrapped typed (its owner ids live beside it).
            crate::backend::Adapted::Memory(memory) => Self::new(memory),
            crate::backend::Adapted::Shared(adapter) => Self::from_arc(adapter),
        };
        locks.set_label(options.label.as_deref())?;
        Ok((family, locks))
    }

    /// A Redis backend for `url`: one server (`redis://`, `rediss://`,
    /// `unix://`), a master found through Sentinel (`redis+sentinel://`) or
    /// a Cluster (`redis+cluster://`); see [`crate::backend::redis::url`].
    ///
    /// # Errors
    /// As [`crate::Redis::open`] and [`crate::backend::redis::url::open`].
    /// [`crate::Error::Config`] for another backend's URL (the message names
    /// the Redis schemes and points to [`Locks::open`]).
    pub fn redis(url: &str, namespace: &str) -> Result<Self> {
        crate::backend::check_family(url, crate::backend::Family::Redis)?;
        Ok(Self::from_arc(crate::backend::open(url, namespace)?))
    }

    /// Another owner on the same backend: its own issued leases and its own
    /// heartbeat engine. Two of these behave like two processes.
    pub fn new_owner(&self) -> Self {
        let memory = self.inner.owned.as_ref().map(|o| o.memory.clone());
        Self::build(self.adapter().clone(), memory)
    }

    /// The backend.
    pub fn adapter(&self) -> &Arc<dyn Adapter> {
        self.inner.engine.adapter()
    }

    /// Sets (or with `None`, resets to `host:pid language`) the label this
    /// object's leases and holds describe their holder with
    /// ([`crate::contract::info`]). A hold's own [`HoldOptions::label`] wins over it.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for an empty label (nothing changes).
    pub fn set_label(&self, label: Option<&str>) -> Result<()> {
        if let Some(label) = label {
            crate::args::check_label("label", label)?;
        }
        let mut guard = self.inner.label.lock();
        *guard = Label {
            set: label.map(Arc::from),
            identity: None,
        };
        if let Some(owned) = &self.inner.owned {
            owned.stamp.store(Owner::new_stamp(), Ordering::SeqCst);
        }
        Ok(())
    }

    /// The current label stamp and the identity of a plain acquire, read
    /// together (for [`Memory::acquire_owned`]).
    fn stamped_identity(&self, owned: &Owned) -> (u64, Arc<Identity>) {
        let guard = self.inner.label.lock();
        let stamp = owned.stamp.load(Ordering::SeqCst);
        drop(guard);
        // `set_label` changes the stamp under the lock, after the label:
        // an identity read after the stamp is that label's or a newer one.
        (stamp, self.identity())
    }

    /// The typed Memory backend and this object's owner there, now.
    fn owned(&self) -> Option<(&Owned, Owner)> {
        let owned = self.inner.owned.as_ref()?;
        Some((owned, Owner::now(owned.id)))
    }

    /// The identity of a plain acquire (label, no heartbeat), cached.
    fn identity(&self) -> Arc<Identity> {
        let generation = crate::runtime::fork::generation();
        let mut label = self.inner.label.lock();
        if let Some((g, who)) = &label.identity {
            if *g == generation {
                return who.clone();
            }
        }
        let who = Arc::new(Identity {
            label: match &label.set {
                Some(label) => label.to_string(),
                None => default_label(),
            },
            heartbeat: Duration::ZERO,
            stop_key: None,
        });
        label.identity = Some((generation, who.clone()));
        who
    }

    /// The label this object's next lease will carry.
    pub fn label(&self) -> String {
        match &self.inner.label.lock().set {
            Some(label) => label.to_string(),
            None => default_label(),
        }
    }

    fn issued(&self) -> parking_lot::MutexGuard<'_, Issued> {
        self.inner.issued.get().map.lock()
    }

    /// The issued leases, unless none was ever issued (then `None`, without
    /// taking the lock).
    fn issued_if_any(&self) -> Option<parking_lot::MutexGuard<'_, Issued>> {
        let cell = self.inner.issued.get();
        cell.any.load(Ordering::Acquire).then(|| cell.map.lock())
    }

    /// Remembers `lease` as this object's lease on its key (replacing an
    /// older one), or with `keep_older`, only if none is there; `end`: the
    /// latest instant it can be alive ([`Issued::ends`]).
    fn remember(&self, lease: Lease, keep_older: bool, end: Option<Instant>) {
        let cell = self.inner.issued.get();
        let mut issued = cell.map.lock();
        cell.any.store(true, Ordering::Release);
        let key = lease.shared_key().clone();
        let entry = issued.leases.entry(key.clone());
        match entry {
            std::collections::hash_map::Entry::Occupied(_) if keep_older => return,
            std::collections::hash_map::Entry::Occupied(mut e) => {
                e.insert(lease);
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(lease);
            }
        }
        match end {
            Some(end) => issued.ends.insert(key, end),
            None => issued.ends.remove(&key),
        };
    }

    /// Takes the lease on `key` for `ttl` if no live lease exists.
    ///
    /// # Errors
    /// Invalid key or ttl; the backend's errors.
    pub fn acquire(&self, key: &str, ttl: Duration) -> Result<bool> {
        check_key("key", key)?;
        check_duration("ttl", ttl)?;
        if let Some((owned, owner)) = self.owned() {
            let stamp = owned.stamp.load(Ordering::SeqCst);
            let who = || self.stamped_identity(owned);
            let taken = owned.memory.acquire_owned(key, ttl, owner, stamp, &who);
            if taken.is_some() {
                // A lease an earlier waiting acquire left in the map is
                // stale now (this one replaces it, as below).
                if let Some(mut issued) = self.issued_if_any() {
                    issued.leases.remove(key);
                    issued.ends.remove(key);
                }
            }
            return Ok(taken.is_some());
        }
        let who = self.identity();
        let sent = Instant::now();
        match self.adapter().acquire_as(key, ttl, &who)? {
            Some(_) if answered_too_late(sent, ttl) => Ok(false),
            Some(lease) => {
                let end = Instant::now() + ttl;
                self.remember(lease, false, Some(end));
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// [`Locks::acquire`] with options: wait for the lease
    /// ([`AcquireOptions::wait`], woken by its release or expiry), take one
    /// of N slots ([`AcquireOptions::limit`]). `false` when refused at the
    /// end of the wait, or when the signal was aborted. One object holds at
    /// most one lease (or slot) per key: while it does, this returns
    /// `false` without asking the backend.
    ///
    /// # Errors
    /// Invalid key, ttl or options; the backend's errors.
    pub fn acquire_with(&self, key: &str, ttl: Duration, opts: &AcquireOptions) -> Result<bool> {
        self.start_acquire(key, ttl, opts)?.wait()
    }

    /// The interruptible form of [`Locks::acquire_with`] for faces: a place
    /// in line, driven by [`Waiting::poll`] (a wait of `None` finishes at
    /// the first poll).
    ///
    /// # Errors
    /// Invalid key, ttl or options.
    pub fn start_acquire(
        &self,
        key: &str,
        ttl: Duration,
        opts: &AcquireOptions,
    ) -> Result<Waiting<bool>> {
        check_key("key", key)?;
        check_duration("ttl", ttl)?;
        crate::args::check_limit(opts.limit)?;
        let (try_locks, done_locks) = (self.clone(), self.clone());
        let (try_key, limit) = (key.to_owned(), opts.limit);
        let who = self.identity();
        let attempt = move |line: Option<&str>| {
            if limit > 1 && !try_locks.slot_gone(&try_key)? {
                // One slot per owner and key: this one still holds its own.
                return Ok(None);
            }
            let adapter = try_locks.adapter();
            let sent = Instant::now();
            let got = match line {
                Some(line) => adapter.acquire_queued(&try_key, ttl, &who, limit, line)?,
                None => adapter.acquire_limited(&try_key, ttl, &who, limit)?,
            };
            // An answer that came after the ttl is a refusal (see
            // `answered_too_late`); a wait tries again.
            Ok(got.filter(|_| !answered_too_late(sent, ttl)))
        };
        let finish = move |got: Option<Lease>| {
            Ok(match got {
                Some(lease) => {
                    let end = Instant::now() + ttl;
                    done_locks.remember(lease, false, Some(end));
                    true
                }
                None => false,
            })
        };
        Ok(crate::waiting::acquire_waiting(
            self.adapter().clone(),
            key,
            ttl,
            limit,
            opts.wait.unwrap_or(Duration::ZERO),
            opts.signal.clone(),
            attempt,
            finish,
        ))
    }

    /// For an N-holder acquire: true unless this object's issued slot on
    /// `key` is still live (then it may not take a second one). A slot
    /// that expired or was broken is forgotten here. (An exclusive acquire
    /// asks no such question: the backend refuses while any lease, this
    /// object's own included, is live, as [`Locks::acquire`] does.)
    fn slot_gone(&self, key: &str) -> Result<bool> {
        let Some(mine) = self.issued().leases.get(key).cloned() else {
            return Ok(true);
        };
        let live = self
            .adapter()
            .info(key)?
            .is_some_and(|info| info.holders.iter().any(|h| h.fence == mine.fence()));
        if !live {
            self.forget(&mine);
        }
        Ok(!live)
    }

    /// The interruptible form of [`Locks::hold`] for faces (see
    /// [`Locks::start_acquire`]): `Ready(None)` when refused.
    ///
    /// # Errors
    /// Invalid key or options.
    pub fn start_hold(&self, key: &str, opts: HoldOptions) -> Result<Waiting<Option<Hold>>> {
        let mut opts = opts;
        if opts.label.is_none() {
            opts.label = Some(self.label());
        }
        check_key("key", key)?;
        opts.validate()?;
        if opts.wait.is_none() {
            opts.wait = Some(Duration::ZERO);
        }
        crate::hold::hold_waiting(&self.inner.engine, key, opts)
    }

    /// Extends this object's lease on `key` to `ttl` from now. `false` if it
    /// holds none (never acquired, released, or expired and retaken).
    ///
    /// # Errors
    /// Invalid key or ttl; the backend's errors.
    pub fn renew(&self, key: &str, ttl: Duration) -> Result<bool> {
        check_key("key", key)?;
        check_duration("ttl", ttl)?;
        if let Some((owned, owner)) = self.owned() {
            if owned.memory.renew_owned(key, ttl, owner) {
                return Ok(true);
            }
        }
        let lease = self
            .issued_if_any()
            .and_then(|issued| issued.leases.get(key).cloned());
        let Some(lease) = lease else {
            return Ok(false);
        };
        let sent = Instant::now();
        let renewed = match self.adapter().renew(&lease, ttl) {
            Ok(renewed) => renewed && !answered_too_late(sent, ttl),
            Err(e) => {
                // It may have been applied, answer lost: no known end.
                if let Some(mut issued) = self.issued_if_any() {
                    issued.ends.remove(key);
                }
                return Err(e);
            }
        };
        if renewed {
            let end = Instant::now() + ttl;
            if let Some(mut issued) = self.issued_if_any() {
                if issued.leases.get(key) == Some(&lease) {
                    issued.ends.insert(lease.shared_key().clone(), end);
                }
            }
        } else {
            self.forget(&lease);
        }
        Ok(renewed)
    }

    /// Deletes this object's lease on `key`. `false` if it holds none, or
    /// if the lease's end passed before the backend answered (it cannot be
    /// alive there any more: nothing is left to delete).
    ///
    /// Bounded twice, as [`Hold::release`]: by the adapter's I/O timeout
    /// and by the lease's end, the arrival of the answer to its acquire or
    /// last renewal + ttl (after a renewal that failed, the I/O timeout
    /// only: it may have been applied).
    ///
    /// # Errors
    /// Invalid key; the backend's errors before the lease's end (the lease
    /// is then kept, so the release can be retried).
    pub fn release(&self, key: &str) -> Result<bool> {
        check_key("key", key)?;
        if let Some((owned, owner)) = self.owned() {
            if let Some(fence) = owned.memory.release_owned(key, owner) {
                // This process's waiters on the key: the head tries now.
                crate::waiting::lines::released_fence(self.adapter(), key, fence);
                return Ok(true);
            }
        }
        let taken = self.issued_if_any().and_then(|mut issued| {
            let lease = issued.leases.remove(key)?;
            Some((lease, issued.ends.remove(key)))
        });
        let Some((lease, end)) = taken else {
            return Ok(false);
        };
        // Bounded twice: by the I/O timeout, and by the lease's end, after
        // which it cannot be alive on the backend (then: nothing to delete).
        let result = match end {
            Some(end) => self.adapter().release_by(&lease, end),
            None => self.adapter().release(&lease),
        };
        let released = match result {
            Ok(released) => released,
            Err(_) if end.is_some_and(|end| Instant::now() >= end) => return Ok(false),
            Err(e) => {
                // Keep it, so the release can be retried.
                self.remember(lease, true, end);
                return Err(e);
            }
        };
        if released {
            // This process's waiters on the key: the head tries now.
            crate::waiting::lines::released(self.adapter(), &lease);
        }
        Ok(released)
    }

    fn forget(&self, lease: &Lease) {
        let mut issued = self.issued();
        if issued.leases.get(lease.key()) == Some(lease) {
            issued.leases.remove(lease.key());
            issued.ends.remove(lease.key());
        }
    }

    /// The fencing number of this object's lease on `key`, if it has one.
    pub fn fence(&self, key: &str) -> Option<u64> {
        let owned = self
            .owned()
            .and_then(|(owned, owner)| owned.memory.fence_owned(key, owner));
        let issued = self
            .issued_if_any()
            .and_then(|issued| issued.leases.get(key).map(Lease::fence));
        // An owned acquire drops the map's lease on its key, and a lease
        // put in the map replaces the store's owned entry: at most one.
        owned.max(issued)
    }

    /// Is a live lease on `key` (anyone's)?
    ///
    /// # Errors
    /// Invalid key; the backend's errors.
    pub fn held(&self, key: &str) -> Result<bool> {
        check_key("key", key)?;
        self.adapter().held(key)
    }

    /// Raises the flag `key` for `ttl` ([`crate::FLAG_TTL`] by convention).
    ///
    /// # Errors
    /// Invalid key or ttl; the backend's errors.
    pub fn set_flag(&self, key: &str, ttl: Duration) -> Result<()> {
        check_key("key", key)?;
        check_duration("ttl", ttl)?;
        self.adapter().set_flag(key, ttl)
    }

    /// Is the flag `key` up?
    ///
    /// # Errors
    /// Invalid key; the backend's errors.
    pub fn flag(&self, key: &str) -> Result<bool> {
        check_key("key", key)?;
        self.adapter().flag(key)
    }

    /// Lowers the flag `key`.
    ///
    /// # Errors
    /// Invalid key; the backend's errors.
    pub fn clear_flag(&self, key: &str) -> Result<()> {
        check_key("key", key)?;
        self.adapter().clear_flag(key)
    }

    /// Operator override: deletes whatever lease is on `key`; its holder's
    /// hold becomes lost at its next renewal.
    ///
    /// # Errors
    /// Invalid key; the backend's errors.
    pub fn break_lease(&self, key: &str) -> Result<bool> {
        check_key("key", key)?;
        let broken = self.adapter().break_lease(key)?;
        if broken {
            crate::waiting::lines::released_key(self.adapter(), key);
        }
        Ok(broken)
    }

    /// Acquires `key` and keeps it renewed on this object's heartbeat engine
    /// until the returned [`Hold`] is released or dropped. `Ok(None)` when
    /// the lease is held elsewhere.
    ///
    /// # Errors
    /// Invalid key or options; the backend's errors on acquire.
    pub fn hold(&self, key: &str, opts: HoldOptions) -> Result<Option<Hold>> {
        let mut opts = opts;
        if opts.label.is_none() {
            opts.label = Some(self.label());
        }
        Hold::start(&self.inner.engine, key, opts)
    }

    /// Who holds `key`: label, fence, acquire and last-renewal times, ttl,
    /// heartbeat and time left; `Ok(None)` when no live lease is there.
    ///
    /// # Examples
    /// ```
    /// use mistri_locks::Locks;
    /// use std::time::Duration;
    ///
    /// let locks = Locks::memory();
    /// locks.set_label(Some("nightly cron"))?;
    /// assert!(locks.acquire("report", Duration::from_secs(5))?);
    /// let info = locks.info("report")?.expect("held");
    /// let holder = info.holder.expect("described");
    /// assert_eq!(holder.label, "nightly cron");
    /// assert_eq!(Some(holder.fence), locks.fence("report"));
    /// assert!(locks.info("nobody")?.is_none());
    /// # Ok::<(), mistri_locks::Error>(())
    /// ```
    ///
    /// # Errors
    /// Invalid key; the backend's errors.
    pub fn info(&self, key: &str) -> Result<Option<LeaseInfo>> {
        check_key("key", key)?;
        self.adapter().info(key)
    }

    /// The live leases and raised flags whose keys start with `prefix`
    /// (`""`: all of them in this namespace or file), sorted by key.
    ///
    /// # Errors
    /// The backend's errors.
    pub fn list(&self, prefix: &str) -> Result<Listing> {
        self.adapter().list(prefix)
    }

    /// This owner's counters and event hooks ([`crate::stats`]).
    pub(crate) fn stats_counters(&self) -> &Arc<crate::stats::Stats> {
        self.inner.engine.stats()
    }

    /// How many holds this object's engine is renewing.
    pub fn active_holds(&self) -> usize {
        self.inner.engine.len()
    }
}

/// Whether the answer to a call that set a lease's ttl came too late to
/// promise it: the backend applied the call at some instant between
/// `sent` and the answer's arrival, so the lease is only known to live
/// until `sent + ttl`. Once that has passed, it may already have lapsed
/// and been taken by another owner, and a `true` would break the lease's
/// promise; the call answers `false` instead (the lease, if it is still
/// alive, lapses at its ttl: its owner token is forgotten).
fn answered_too_late(sent: Instant, ttl: Duration) -> bool {
    Instant::now() >= sent + ttl
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
