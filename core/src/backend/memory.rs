//! [`Memory`]: leases and flags inside one process.
//!
//! Real TTL semantics on the monotonic clock; expiry is judged when an entry
//! is read, so no sweeper thread is needed. Expired entries are pruned when
//! the maps have doubled since the last prune, so memory stays proportional
//! to the live entries.
//!
//! Fences: one counter per adapter, floored by the realtime clock like
//! every backend's ([`crate::contract::fence`]) and raised to a process-wide
//! high-water mark ([`issue`]), so no adapter ever issues a fence at or
//! below one another adapter of the process issued before. A fence is
//! never more than [`MAX_FENCE_LEAD`] (1 ms) ahead of the wall clock when
//! issued: above one acquire per µs an acquire waits (about a µs) for the
//! clock, so a restarted process, whose first fence is the clock, issues
//! above every fence of the one before it once a millisecond has passed
//! (issue 39, finding 9: a loop of 2.3 million acquisitions a second ran 4 s
//! ahead, and a process started 0.08 s later issued lower fences).
//!
//! Clocks: an acquire reads the monotonic clock once, under the store's
//! lock. Its wall-clock time (`acquired_at`, the fence's floor) is derived
//! from a pair of readings (wall first, then monotonic) taken at most
//! [`WALL_REBASE`] earlier: it follows a wall-clock step within a second
//! and is never ahead of the wall clock.
//!
//! Owner tokens: Memory's never leave the process, so they need not be
//! unguessable, only unique: a process-wide counter in 16 hex characters
//! ([`memory_token`]), no OS randomness per acquire.
//!
//! Owned entries: [`crate::Locks`]' plain acquire, renew, release and fence
//! (the seed's surface, the hot path of every face) skip the token and the
//! `Locks`' own issued-lease map: the entry itself records which owner (a
//! [`Owner`]: the `Locks` object and the fork generation) took it, so a pair is
//! one lock and one lookup per call, no allocation, no token. An owned entry
//! has an empty token, which no [`Lease`] presents, so the trait's token-based
//! renew and release never match it; a token lease has no owner, so the owned
//! calls never match it. Either way ownership is judged under the store's lock
//! with the expiry, exactly as with tokens: a lease that expired or was taken
//! over is not released or renewed. N-holder leases (`acquire_limited` with a
//! limit over 1) keep their slots in the same store, beside the exclusive
//! entries (`Slots`); the exclusive acquire's only extra work is a check of an
//! empty map when no N-holder lease was ever taken.
//!
//! Lock order: one mutex, never held while calling out.
//!
//! Fork: a child gets a copy of the store (Memory is per process; the copy
//! keeps the parent's leases visible as held), made without blocking on the
//! parent's lock; if that lock was held at the moment of `fork`, the child
//! starts empty (see `State::for_child`).

use crate::contract::adapter::{Adapter, Lease, Renewal, Renewed};
use crate::contract::info::{FlagInfo, HolderInfo, Identity, LeaseInfo, Listing};
use crate::error::Result;
use crate::runtime::fork::ForkLocal;
#[cfg(not(loom))]
use parking_lot::Mutex;
// Under loom the store's lock is a model point: the engine and waiting
// models interleave the backend's compare-and-renew with the holder's
// compare-and-delete (runtime/sync.rs).
#[cfg(loom)]
use crate::runtime::sync::Mutex;
use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const MIN_PRUNE_AT: usize = 64;
/// How long the wall clock is derived from the monotonic one before it is
/// read again (module header, "Clocks").
const WALL_REBASE: Duration = Duration::from_secs(1);

#[derive(Clone)]
struct Entry {
    /// The owner token's bytes (16 ASCII bytes); empty for an owned entry.
    token: Vec<u8>,
    /// Who took it through the owned calls, while it still counts it as
    /// its lease (cleared by its release or failed renewal); `None` for a
    /// token lease.
    owner: Option<Owner>,
    /// The label stamp ([`Owner::stamp`]) `holder.label` was written
    /// with, and in which fork generation: an owned acquire by the same
    /// owner with the same stamp needs no new label. 0: unknown.
    stamp: (u64, u64),
    expires: Instant,
    /// What the holder said about itself, and when it last renewed.
    holder: HolderInfo,
}

impl Entry {
    fn owned_by(&self, lease: &Lease) -> bool {
        self.owner.is_none() && self.token == lease.token().as_bytes()
    }
}

/// An owner of Memory leases taken without a token (module header, "Owned
/// entries"): one [`crate::Locks`] object in one fork generation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Owner {
    /// Unique in the process, for the life of the process.
    id: u64,
    /// The fork generation: a forked child's copy of the store keeps its
    /// parent's entries, which its own `Locks` (same id) must not own.
    generation: u64,
}

impl Owner {
    /// A process-unique owner id, for a new `Locks` object.
    pub(crate) fn new_id() -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// The owner `id` in this fork generation.
    pub(crate) fn now(id: u64) -> Self {
        Owner {
            id,
            generation: crate::runtime::fork::generation(),
        }
    }

    /// A new label stamp: process-unique, never 0. An owner's label is
    /// identified by its current stamp, so an entry written with it keeps
    /// its label while the stamp stays the same.
    pub(crate) fn new_stamp() -> u64 {
        Self::new_id()
    }
}

struct State {
    leases: HashMap<String, Entry>,
    flags: HashMap<String, Instant>,
    fence: u64,
    prune_at: usize,
    /// A monotonic instant, the wall-clock time read with it, and that
    /// time in µs since 1970 (the fence's floor).
    clock: (Instant, SystemTime, u64),
    /// N-holder leases ([`Slots`]).
    slots: Slots,
}

/// An in-process adapter. Leases are visible to every [`crate::Locks`] that
/// shares this adapter object, in this process only.
///
/// Fences rise within the process, across every Memory adapter of it, and
/// across restarts while the wall clock does not step back: a fence is
/// `max(last + 1, wall clock in µs)` and is never issued more than 1 ms
/// ahead of the wall clock (above one acquire per µs an acquire waits,
/// about a µs, for the clock), so a process started a millisecond or more
/// after the last fence of the one before issues above it.
///
/// # Examples
/// ```
/// use mistri_locks::Locks;
/// use std::time::Duration;
///
/// let locks = Locks::memory();
/// assert!(locks.acquire("job", Duration::from_secs(1)).unwrap());
/// assert!(!locks.acquire("job", Duration::from_secs(1)).unwrap());
/// assert!(locks.release("job").unwrap());
/// ```
pub struct Memory {
    state: ForkLocal<Mutex<State>>,
}

impl Default for Memory {
    fn default() -> Self {
        Self::new()
    }
}

impl Memory {
    /// An empty in-memory backend.
    pub fn new() -> Self {
        Memory {
            state: ForkLocal::new(Mutex::new(State::default()), State::for_child),
        }
    }

    fn state(&self) -> &Mutex<State> {
        self.state.get()
    }

    /// Takes the exclusive lease on `key` if no live lease or slot is
    /// there: its fence.
    fn take(&self, key: &str, ttl: Duration, by: By<'_>) -> Option<u64> {
        // The one clock read of an acquire (module header, "Clocks"), under
        // the lock: an instant read before it may be stale by the time the
        // lock is won, and would pair with a fresher wall reading.
        let mut state = self.state().lock();
        let now = Instant::now();
        if state.slots.live(key, now) {
            return None;
        }
        let (wall, floor) = state.wall(now);
        let State {
            leases,
            fence: counter,
            ..
        } = &mut *state;
        let expires = deadline(now, ttl);
        match leases.get_mut(key) {
            Some(e) if e.expires > now => None,
            // An expired or released entry: reuse its allocations (the
            // label's too, when it is the same holder's).
            Some(e) => {
                issue(counter, floor, now);
                e.expires = expires;
                let h = &mut e.holder;
                match by {
                    By::Token(token, who) => {
                        e.token.clear();
                        e.token.extend_from_slice(token.as_bytes());
                        e.owner = None;
                        e.stamp = (0, 0);
                        if h.label != who.label {
                            h.label.clone_from(&who.label);
                        }
                        if h.stop_key != who.stop_key {
                            h.stop_key.clone_from(&who.stop_key);
                        }
                        h.heartbeat = who.heartbeat;
                    }
                    By::Owner(owner, stamp, who) => {
                        e.token.clear();
                        e.owner = Some(owner);
                        if e.stamp != (stamp, owner.generation) {
                            let (stamp, who) = who();
                            if h.label != who.label {
                                h.label.clone_from(&who.label);
                            }
                            e.stamp = (stamp, owner.generation);
                        }
                        h.heartbeat = Duration::ZERO;
                        h.stop_key = None;
                    }
                }
                h.fence = *counter;
                h.acquired_at = wall;
                h.renewed_at = wall;
                h.ttl = ttl;
                Some(*counter)
            }
            None => {
                let fence = issue(counter, floor, now);
                let (token, owner, stamp, label, heartbeat, stop_key) = match by {
                    By::Token(token, who) => (
                        token.as_bytes().to_vec(),
                        None,
                        (0, 0),
                        who.label.clone(),
                        who.heartbeat,
                        who.stop_key.clone(),
                    ),
                    By::Owner(owner, _, who) => {
                        let (stamp, who) = who();
                        let stamp = (stamp, owner.generation);
                        (
                            Vec::new(),
                            Some(owner),
                            stamp,
                            who.label.clone(),
                            Duration::ZERO,
                            None,
                        )
                    }
                };
                let entry = Entry {
                    token,
                    owner,
                    stamp,
                    expires,
                    holder: HolderInfo {
                        label,
                        fence,
                        acquired_at: wall,
                        renewed_at: wall,
                        ttl,
                        heartbeat,
                        stop_key,
                    },
                };
                state.prune(now);
                state.leases.insert(key.to_owned(), entry);
                Some(fence)
            }
        }
    }

    /// The plain acquire of [`crate::Locks`] (module header, "Owned
    /// entries"): takes the exclusive lease on `key` for `owner` if no live
    /// lease or slot is there; its fence. `stamp` is the owner's label
    /// stamp; `who` (its stamp and identity, read together) is called only
    /// when the entry's label was not written with that stamp, under the
    /// store's lock.
    pub(crate) fn acquire_owned(
        &self,
        key: &str,
        ttl: Duration,
        owner: Owner,
        stamp: u64,
        who: &dyn Fn() -> (u64, Arc<Identity>),
    ) -> Option<u64> {
        self.take(key, ttl, By::Owner(owner, stamp, who))
    }

    /// Releases `owner`'s lease on `key` (one taken by
    /// [`Memory::acquire_owned`]) if it is still live: its fence.
    /// `None` when `owner` has no live lease there; it then no longer
    /// counts an expired one as its own either.
    pub(crate) fn release_owned(&self, key: &str, owner: Owner) -> Option<u64> {
        let mut state = self.state().lock();
        let e = state.leases.get_mut(key)?;
        if e.owner != Some(owner) {
            return None;
        }
        let now = Instant::now();
        e.owner = None;
        // Expire it in place; the next acquire of this key reuses the
        // entry, and pruning removes it if none comes.
        (e.expires > now).then(|| {
            e.expires = now;
            e.holder.fence
        })
    }

    /// Extends `owner`'s live lease on `key` to `ttl` from now: whether it
    /// had one. An expired one stops counting as `owner`'s.
    pub(crate) fn renew_owned(&self, key: &str, ttl: Duration, owner: Owner) -> bool {
        let mut state = self.state().lock();
        let Some(e) = state.leases.get_mut(key) else {
            return false;
        };
        if e.owner != Some(owner) {
            return false;
        }
        let now = Instant::now();
        if e.expires <= now {
            e.owner = None;
            return false;
        }
        e.expires = deadline(now, ttl);
        e.holder.renewed_at = SystemTime::now();
        e.holder.ttl = ttl;
        true
    }

    /// Does `owner` still count a lease on `key` as its own (taken, not
    /// released, not found expired by its renew or release, not taken
    /// over)? Its fence.
    pub(crate) fn fence_owned(&self, key: &str, owner: Owner) -> Option<u64> {
        let state = self.state().lock();
        let e = state.leases.get(key)?;
        (e.owner == Some(owner)).then_some(e.holder.fence)
    }
}

/// Who takes a lease in [`Memory::take`].
enum By<'a> {
    /// A token lease (the trait's acquire).
    Token(&'a str, &'a Identity),
    /// An owned entry: the owner, its label stamp, and its stamp and
    /// identity read together (called only if the label must be written).
    Owner(Owner, u64, &'a dyn Fn() -> (u64, Arc<Identity>)),
}

impl Default for State {
    fn default() -> Self {
        State {
            leases: HashMap::default(),
            flags: HashMap::default(),
            fence: 0,
            prune_at: MIN_PRUNE_AT,
            clock: wall_now(),
            slots: Slots::default(),
        }
    }
}

impl State {
    /// A forked child's store: a copy of the parent's, unless a thread of
    /// the parent was inside an operation at the moment of `fork` (its
    /// lock is held forever in the child, and the maps may be half
    /// updated); then the child starts empty.
    fn for_child(parent: &Mutex<State>) -> Mutex<State> {
        let copy = parent.try_lock().map(|s| State {
            leases: s
                .leases
                .iter()
                .map(|(k, e)| (k.clone(), e.clone()))
                .collect(),
            flags: s.flags.clone(),
            fence: s.fence,
            prune_at: s.prune_at,
            clock: s.clock,
            slots: s.slots.clone(),
        });
        Mutex::new(copy.unwrap_or_default())
    }

    /// The wall-clock time at `now` and it in µs since 1970 (at least 1),
    /// derived from the last pair of clock readings unless that is over
    /// [`WALL_REBASE`] old.
    fn wall(&mut self, now: Instant) -> (SystemTime, u64) {
        let (at, wall, micros) = self.clock;
        match now.checked_duration_since(at) {
            Some(since) if since < WALL_REBASE => (wall + since, micros + since.as_micros() as u64),
            _ => {
                self.clock = wall_now();
                (self.clock.1, self.clock.2)
            }
        }
    }

    fn live_lease(&self, key: &str, now: Instant) -> Option<&Entry> {
        self.leases.get(key).filter(|e| e.expires > now)
    }

    fn prune(&mut self, now: Instant) {
        if self.leases.len() + self.flags.len() < self.prune_at {
            return;
        }
        self.leases.retain(|_, e| e.expires > now);
        self.flags.retain(|_, exp| *exp > now);
        self.prune_at = ((self.leases.len() + self.flags.len()) * 2).max(MIN_PRUNE_AT);
    }
}

/// The highest fence any Memory adapter of this process has issued (module
/// header, "Fences").
static ISSUED: AtomicU64 = AtomicU64::new(0);

/// The most a Memory fence runs ahead of the wall clock when it is issued
/// ([`issue`]; module header, "Fences"): a fence is a number of µs since
/// 1970 or the last fence plus one, so above one acquire per µs the
/// counter would run ahead, and a restarted process (whose first fence is
/// the clock) would issue lower fences until the clock caught up.
pub(crate) const MAX_FENCE_LEAD: Duration = Duration::from_millis(1);

/// Issues the next fence of an adapter whose counter is `counter`, floored
/// by `floor` (the wall clock in µs, derived at the instant `at`): above
/// the adapter's last and above every fence any Memory adapter of this
/// process issued before. Sets the counter to it.
///
/// Keeps the fence within [`MAX_FENCE_LEAD`] of the clock: when it would
/// run further ahead, but by no more than another [`MAX_FENCE_LEAD`] (a
/// rate above one acquire per µs: at that pace the wait is about a µs per
/// acquire), it waits (spinning, under the store's lock) until the clock
/// has caught up. A lead beyond that is not the rate's but the clock's (a
/// wall-clock step back since the counter was set): no wait then, the
/// counter keeps counting (fences rise across a restart while the clock
/// does not step back, `docs/RELIABILITY.md`).
fn issue(counter: &mut u64, floor: u64, at: Instant) -> u64 {
    let lead = MAX_FENCE_LEAD.as_micros() as u64;
    let mut now_floor = floor;
    loop {
        let high = ISSUED.load(Ordering::Acquire);
        let fence = crate::contract::fence::next(high.max(*counter), now_floor);
        let mut over = fence.saturating_sub(now_floor.saturating_add(lead));
        if over > 0 {
            // Judged against the wall clock read now: the derived floor
            // may lag it (a preemption between its pair's two readings),
            // and a lag must not make the rate's lead look like a step.
            let wall = crate::contract::fence::floor_now().max(now_floor);
            over = fence.saturating_sub(wall.saturating_add(lead));
        }
        if over > 0 && over <= lead {
            std::hint::spin_loop();
            let since = Instant::now().saturating_duration_since(at).as_micros();
            now_floor = floor.saturating_add(u64::try_from(since).unwrap_or(u64::MAX));
            continue;
        }
        if ISSUED
            .compare_exchange_weak(high, fence, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            *counter = fence;
            return fence;
        }
    }
}

/// The wall clock read now, then the monotonic one: a pair whose wall time
/// is never ahead of its instant's, so no time derived from it runs ahead
/// of the wall clock (a preemption between the two reads only puts it
/// behind, which the fence's counter covers).
fn wall_now() -> (Instant, SystemTime, u64) {
    let wall = SystemTime::now();
    let now = Instant::now();
    let micros = wall
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(i64::MAX as u64))
        .unwrap_or(0)
        .clamp(1, i64::MAX as u64 / 2);
    (now, wall, micros)
}

/// A Memory owner token: unique in this process (module header, "Owner
/// tokens"), 16 lowercase hex characters.
fn memory_token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut token = String::with_capacity(16);
    for shift in (0..16).rev() {
        token.push(char::from(HEX[((n >> (shift * 4)) & 15) as usize]));
    }
    token
}

fn deadline(now: Instant, ttl: Duration) -> Instant {
    // check_duration caps ttl far below Instant's range; saturate anyway.
    now.checked_add(ttl)
        .unwrap_or_else(|| now + Duration::from_secs(crate::args::MAX_SECS as u64))
}

impl Adapter for Memory {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lease>> {
        self.acquire_as(key, ttl, &Identity::of_process())
    }

    fn acquire_as(&self, key: &str, ttl: Duration, who: &Identity) -> Result<Option<Lease>> {
        let token = memory_token();
        let taken = self.take(key, ttl, By::Token(&token, who));
        Ok(taken.map(|fence| Lease::new(key, token, fence)))
    }

    fn renew_within(&self, renewal: &Renewal<'_>) -> Result<Renewed> {
        let now = Instant::now();
        let mut state = self.state().lock();
        if renewal.lease.slotted() {
            return Ok(state.slots.renew(renewal, now));
        }
        match state.leases.get_mut(renewal.lease.key()) {
            Some(e) if e.expires > now && e.owned_by(renewal.lease) => {
                if e.expires - now < renewal.min_left {
                    return Ok(Renewed::TooLate);
                }
                e.expires = deadline(now, renewal.ttl);
                e.holder.renewed_at = SystemTime::now();
                e.holder.ttl = renewal.ttl;
                Ok(Renewed::Yes)
            }
            _ => Ok(Renewed::NotHeld),
        }
    }

    fn release(&self, lease: &Lease) -> Result<bool> {
        let now = Instant::now();
        let mut state = self.state().lock();
        if lease.slotted() {
            return Ok(state.slots.release(lease, now));
        }
        match state.leases.get_mut(lease.key()) {
            Some(e) if e.expires > now && e.owned_by(lease) => {
                // Expire it in place; the next acquire of this key reuses
                // the entry, and pruning removes it if none comes.
                e.expires = now;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn held(&self, key: &str) -> Result<bool> {
        let now = Instant::now();
        let state = self.state().lock();
        Ok(state.live_lease(key, now).is_some() || state.slots.live(key, now))
    }

    fn break_lease(&self, key: &str) -> Result<bool> {
        let now = Instant::now();
        let mut state = self.state().lock();
        let slots = state.slots.remove(key, now);
        Ok(state.leases.remove(key).is_some_and(|e| e.expires > now) || slots)
    }

    crate::contract::adapter::acquire_reading_flag_in_process!();

    fn acquire_limited(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
    ) -> Result<Option<Lease>> {
        if limit <= 1 {
            return self.acquire_as(key, ttl, who);
        }
        let token = memory_token();
        let mut state = self.state().lock();
        let now = Instant::now();
        if state.live_lease(key, now).is_some() {
            return Ok(None);
        }
        let (wall, _) = state.wall(now);
        let State {
            slots,
            fence: counter,
            ..
        } = &mut *state;
        Ok(slots
            .acquire(key, &token, now, wall, ttl, who, limit, counter)
            .map(|fence| Lease::slot(key, token, fence, limit)))
    }

    fn expires_in(&self, key: &str) -> Result<Option<Duration>> {
        let now = Instant::now();
        let state = self.state().lock();
        Ok(match state.live_lease(key, now) {
            Some(e) => Some(e.expires - now),
            None => state.slots.soonest(key, now),
        })
    }

    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()> {
        let now = Instant::now();
        let mut state = self.state().lock();
        state.prune(now);
        state.flags.insert(key.to_owned(), deadline(now, ttl));
        Ok(())
    }

    fn flag(&self, key: &str) -> Result<bool> {
        let now = Instant::now();
        Ok(self
            .state()
            .lock()
            .flags
            .get(key)
            .is_some_and(|exp| *exp > now))
    }

    fn clear_flag(&self, key: &str) -> Result<()> {
        self.state().lock().flags.remove(key);
        Ok(())
    }

    fn info(&self, key: &str) -> Result<Option<LeaseInfo>> {
        let now = Instant::now();
        let state = self.state().lock();
        Ok(match state.live_lease(key, now) {
            Some(e) => Some(LeaseInfo::exclusive(
                key.to_owned(),
                Some(e.expires - now),
                Some(e.holder.clone()),
            )),
            None => state.slots.info(key, now),
        })
    }

    fn list(&self, prefix: &str) -> Result<Listing> {
        let now = Instant::now();
        let state = self.state().lock();
        let slotted = state.slots.list(prefix, now);
        let mut listing = Listing {
            leases: state
                .leases
                .iter()
                .filter(|(k, e)| k.starts_with(prefix) && e.expires > now)
                .map(|(k, e)| {
                    LeaseInfo::exclusive(k.clone(), Some(e.expires - now), Some(e.holder.clone()))
                })
                .chain(slotted)
                .collect(),
            flags: state
                .flags
                .iter()
                .filter(|(k, exp)| k.starts_with(prefix) && **exp > now)
                .map(|(k, exp)| FlagInfo {
                    key: k.clone(),
                    time_left: Some(*exp - now),
                })
                .collect(),
            waiting: Vec::new(),
        };
        drop(state);
        // Waiters wait in this process: the registry of lines knows them
        // (taken with no lock of ours held).
        let me: *const Self = self;
        crate::waiting::lines::add_waiters(me as usize, prefix, &mut listing);
        listing.sort();
        Ok(listing)
    }
}

/// One slot of an N-holder lease.
#[derive(Clone)]
struct Slot {
    token: String,
    expires: Instant,
    /// The limit it was taken with.
    limit: u32,
    holder: HolderInfo,
}

/// The N-holder leases of a [`Memory`]: per key, its slots (expired ones
/// are dropped whenever the key is written, and every key's when the map
/// has doubled since the last sweep). Exclusive acquires refuse a key with
/// a live slot, slot acquires a key with a live exclusive lease; both draw
/// fences from the store's one counter.
#[derive(Clone)]
struct Slots {
    keys: HashMap<String, Vec<Slot>>,
    prune_at: usize,
}

impl Default for Slots {
    fn default() -> Self {
        Slots {
            keys: HashMap::default(),
            prune_at: MIN_PRUNE_AT,
        }
    }
}

impl Slots {
    /// Has `key` a live slot? (Free when no N-holder lease was ever taken.)
    fn live(&self, key: &str, now: Instant) -> bool {
        !self.keys.is_empty()
            && self
                .keys
                .get(key)
                .is_some_and(|v| v.iter().any(|s| s.expires > now))
    }

    /// Takes a slot if fewer than `limit` are live: its fence.
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &mut self,
        key: &str,
        token: &str,
        now: Instant,
        wall: SystemTime,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        counter: &mut u64,
    ) -> Option<u64> {
        if self.keys.len() >= self.prune_at {
            self.keys.retain(|_, v| {
                v.retain(|s| s.expires > now);
                !v.is_empty()
            });
            self.prune_at = (self.keys.len() * 2).max(MIN_PRUNE_AT);
        }
        let set = self.keys.entry(key.to_owned()).or_default();
        set.retain(|s| s.expires > now);
        if set.len() >= limit as usize {
            return None;
        }
        let floor = wall
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(i64::MAX as u64))
            .unwrap_or(0)
            .clamp(1, i64::MAX as u64);
        issue(counter, floor, now);
        set.push(Slot {
            token: token.to_owned(),
            expires: deadline(now, ttl),
            limit,
            holder: HolderInfo {
                label: who.label.clone(),
                fence: *counter,
                acquired_at: wall,
                renewed_at: wall,
                ttl,
                heartbeat: who.heartbeat,
                stop_key: who.stop_key.clone(),
            },
        });
        Some(*counter)
    }

    fn find(&mut self, lease: &Lease, now: Instant) -> Option<&mut Slot> {
        self.keys
            .get_mut(lease.key())?
            .iter_mut()
            .find(|s| s.token == lease.token() && s.expires > now)
    }

    fn renew(&mut self, renewal: &Renewal<'_>, now: Instant) -> Renewed {
        match self.find(renewal.lease, now) {
            Some(s) if s.expires - now < renewal.min_left => Renewed::TooLate,
            Some(s) => {
                s.expires = deadline(now, renewal.ttl);
                s.holder.renewed_at = SystemTime::now();
                s.holder.ttl = renewal.ttl;
                Renewed::Yes
            }
            None => Renewed::NotHeld,
        }
    }

    fn release(&mut self, lease: &Lease, now: Instant) -> bool {
        let Some(set) = self.keys.get_mut(lease.key()) else {
            return false;
        };
        let released = set
            .iter()
            .any(|s| s.token == lease.token() && s.expires > now);
        set.retain(|s| s.expires > now && s.token != lease.token());
        if set.is_empty() {
            self.keys.remove(lease.key());
        }
        released
    }

    /// Drops every slot of `key`: whether one was live.
    fn remove(&mut self, key: &str, now: Instant) -> bool {
        self.keys
            .remove(key)
            .is_some_and(|v| v.iter().any(|s| s.expires > now))
    }

    /// Time until the soonest live slot of `key` expires.
    fn soonest(&self, key: &str, now: Instant) -> Option<Duration> {
        self.keys
            .get(key)?
            .iter()
            .filter(|s| s.expires > now)
            .map(|s| s.expires - now)
            .min()
    }

    fn info(&self, key: &str, now: Instant) -> Option<LeaseInfo> {
        let set = self.keys.get(key)?;
        LeaseInfo::slotted(
            key.to_owned(),
            set.iter()
                .filter(|s| s.expires > now)
                .map(|s| (s.holder.clone(), s.limit, s.expires - now))
                .collect(),
        )
    }

    fn list(&self, prefix: &str, now: Instant) -> Vec<LeaseInfo> {
        self.keys
            .keys()
            .filter(|k| k.starts_with(prefix))
            .filter_map(|k| self.info(k, now))
            .collect()
    }
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
