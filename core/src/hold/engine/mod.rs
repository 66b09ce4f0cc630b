//! The heartbeat engine: renews every hold made through one
//! [`crate::Locks`] and reads their stop flags, batching all work due in the
//! same tick into one [`Adapter::beat`] (one pipelined round trip on Redis),
//! and tells each holder *before* its lease could belong to anyone else.
//!
//! Two threads per engine, so that no I/O call can decide when a deadline
//! is noticed:
//! - the **scheduler** (`mistri-heartbeat`) never does I/O. It keeps the
//!   schedule, hands due work to the I/O thread, and trips every hold whose
//!   *safe deadline* passes without a newer confirmed renewal, from its own
//!   timer, whatever the I/O thread is doing;
//! - the **I/O thread** (`mistri-heartbeat-io`) runs one batch at a time,
//!   each bounded by a wall-clock deadline: the earliest safe deadline of
//!   any hold of the engine (capped by the adapter's I/O timeout). Then it
//!   deletes the leases of holds dropped without a release (faces' GC).
//!
//! Schedule per hold (`ttl`, `heartbeat`, margin `m`):
//! - renew every `min(heartbeat, ttl / 3)`; read the stop flag every tick,
//!   `tick = min(heartbeat, 1 s, renew interval)`; both floored at
//!   [`MIN_HEARTBEAT`]; a failed renewal is retried every tick;
//! - safe deadline = send time of the last confirmed renewal (at first, of
//!   the acquire) + `ttl` − `m`. The backend applied that renewal after it
//!   was sent, so the lease lives until at least send time + `ttl`: the
//!   holder hears `m` before the earliest moment anyone else can take it;
//! - every renewal carries `min_left = m + last round-trip time`: the
//!   backend refuses it ([`Renewed::TooLate`]) unless that much of the
//!   lease's life is left, so a renewal that arrives after the safe
//!   deadline can never extend a lease its holder was told it lost.
//!
//! Timers: each hold has up to three timers — its next renewal, its next
//! flag read and its safe deadline — each in a queue keyed by time in
//! whole milliseconds (rounded down: early, never late): an ordered map
//! from a millisecond to the holds due then. Holds renewed by one batch
//! share their next due time and their new deadline, so a queue has a few
//! keys however many holds there are; (re)arming a timer is a push onto a
//! list, and a hold knows its place in each list, so moving or removing a
//! timer is O(1) (plus a lookup among the few keys). Nothing stale is left
//! behind: a wake costs work only for the holds that are due, never a scan
//! of the holds that are not, and the queues never hold more than one item
//! per hold and kind. A renewal or read is *due* at its time (the
//! scheduler's wake time) and *ready* half an interval before: a batch goes
//! only when some work is due, and takes from the front of each queue all
//! that is ready, so holds taken at different moments fall into one batch
//! within two intervals and stay there (one round trip per heartbeat); a
//! hold is renewed at most twice as often as it asks. A batch's next
//! renewals and reads are due an interval after the scheduler *collected*
//! it, not after it was sent: the send comes a few milliseconds later, and
//! timing from it would stretch every round by that much, so that two
//! batches half an interval apart (each more than half of the stretched
//! round from the other) would never merge — measured: 100,000 holds in
//! two batches 511 ms apart for good. (Holds of one engine mostly share
//! their intervals; where they differ, an item ready behind a later-due one
//! waits for the next batch, never past its due time.)
//!
//! Memory: the holds live in a slab (ids carry a generation, so an id kept
//! after its hold left never finds the hold that reuses the slot); an
//! entry is ~140 bytes (times as milliseconds, durations as nanoseconds,
//! the rarely used guard boxed, a stop key shared with the other holds that
//! watch it), and the lease and status are one allocation shared with the
//! [`crate::Hold`] and with the batches that renew it.
//!
//! Outcomes: a renewal answered "not held" or "too late" marks the hold
//! *lost* at once; one that fails is retried; the safe deadline passing
//! marks it lost. Lost holds leave the engine; their signal is latched at
//! once (waiters wake) with a reason starting `lease lost:`, and its
//! callbacks run on the notifier thread ([`crate::signal::notify`]), never here.
//! If a hold is lost by its deadline while a renewal of it is in flight and
//! that renewal then succeeds (it arrived in time but its answer did not),
//! the engine deletes the lease so it does not linger.
//!
//! Hung-holder guard (per hold, off by default): when a renewal comes due,
//! the scheduler first asks [`guard_stops`]. `progress_timeout` passed since
//! the work's last [`crate::Hold::touch`]: renewals stop and the signal
//! trips at once (`work stalled: ...`, cause `stalled`); the entry stays
//! until its safe deadline, so `release` still deletes the lease. The
//! renewal would make the lease outlive `acquire + max_hold`: renewals stop
//! and the hold is told at its safe deadline like any hold whose renewals
//! ended (`lease lost: max_hold reached ...`, cause `max_hold`) — before
//! the lease lapses, never after. A guarded entry keeps reading its stop
//! flag.
//!
//! Push ([`crate::contract::push`]): an engine with a hold that watches a stop key
//! registers with its adapter's flag listener (if the adapter has one)
//! *before* inserting the hold, and keeps that registration until its
//! scheduler retires. The stop-key index (`watching`) is also the
//! engine's interest list: a key's first watcher asks the listener for it
//! ([`crate::contract::push::FlagWatch::watch_flag`]), its last one gives it up, so
//! the process subscribes exactly the stop keys its holds watch. The listener's thread calls in: `raised(key)` trips
//! the holds watching `key` at once (as a poll that found the flag would);
//! `poll_flag(key)` (its subscription just became live) makes that key's
//! reads due now; `poll_now` makes every watched flag due now (flagging entries whose read
//! is in flight to be read again), so the scheduler hands the reads to the
//! I/O thread at once. Neither waits for I/O nor touches a deadline; the
//! tick poll stays the floor.
//!
//! Release: [`Engine::unregister`] removes the entry under the lock and
//! returns at once, even while a batch holding a renewal of it is in
//! flight. Renewals compare the owner token, so a renewal that reaches the
//! backend after the holder's delete finds nothing to extend; one that
//! reaches it before is undone by the delete.
//!
//! Fork: the engine's shared state is a [`ForkLocal`]; a forked child
//! builds an empty engine of its own on first use without touching the
//! parent's mutex (which another thread may have held at the fork). The
//! child has no heartbeat threads until it makes a hold.
//!
//! Lock order: the state mutex is never held while calling the adapter,
//! tripping a signal or starting a thread's work; it is a leaf.
//!
//! Both threads exit after [`IDLE_EXIT`] with nothing to do and are started
//! again by the next registration.

use crate::contract::adapter::{Adapter, Lease, Renewal, Renewed};
use crate::contract::push::{FlagWatch, FlagWatcher};
use crate::error::{Error, Result};
use crate::runtime::fork::ForkLocal;
use crate::runtime::sync::{Condvar, Mutex};
use crate::signal::AbortSignal;
use crate::stats::{bump, Event, EventKind, LostCause, Stats};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an idle heartbeat thread lingers before exiting.
pub const IDLE_EXIT: Duration = Duration::from_secs(2);
/// Upper bound of the stop-flag tick.
pub const MAX_TICK: Duration = Duration::from_secs(1);
/// The engine's resolution: shorter heartbeats are treated as this.
pub const MIN_HEARTBEAT: Duration = Duration::from_millis(1);
/// The least default safety margin (unless a quarter of the ttl is less):
/// room for the scheduler to wake up late on a loaded machine.
pub const MIN_MARGIN: Duration = Duration::from_millis(25);

/// The default safety margin for a hold: `min(ttl / 4, max(tick + io, 25 ms))`
/// where `io` is the adapter's I/O timeout.
pub fn default_margin(ttl: Duration, heartbeat: Duration, io_timeout: Duration) -> Duration {
    let (_, tick) = intervals(ttl, heartbeat);
    (ttl / 4).min((tick + io_timeout).max(MIN_MARGIN))
}

/// `(renew interval, tick)` for a hold.
fn intervals(ttl: Duration, heartbeat: Duration) -> (Duration, Duration) {
    let renew_every = heartbeat.min(ttl / 3).max(MIN_HEARTBEAT);
    let tick = heartbeat.min(MAX_TICK).min(renew_every).max(MIN_HEARTBEAT);
    (renew_every, tick)
}

/// What the engine and the [`crate::Hold`] share about one hold: the lease
/// (batches borrow it; no copy per renewal) and its status.
#[derive(Debug)]
pub(crate) struct HoldStatus {
    pub(crate) lease: Lease,
    pub(crate) lost: AtomicBool,
    /// When the work last called `touch` (nanoseconds since [`epoch`]).
    touched: AtomicU64,
}

/// A process-wide base for instants stored as numbers (an hour before its
/// first use, so no instant of this process's holds comes before it).
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(3600)).unwrap_or(now)
    })
}

/// The schedule's clock: whole milliseconds since [`epoch`].
type Ms = u64;

/// `t` in schedule milliseconds, rounded down (a due time or deadline
/// rounded down comes early, never late).
fn ms(t: Instant) -> Ms {
    u64::try_from(t.saturating_duration_since(epoch()).as_millis()).unwrap_or(u64::MAX)
}

/// The instant of schedule millisecond `m`.
fn instant(m: Ms) -> Instant {
    epoch() + Duration::from_millis(m)
}

/// `d` in nanoseconds (durations are kept as numbers: 8 bytes, not 16).
fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn dur(n: u64) -> Duration {
    Duration::from_nanos(n)
}

impl HoldStatus {
    pub(crate) fn new(lease: Lease) -> Self {
        let status = HoldStatus {
            lease,
            lost: AtomicBool::new(false),
            touched: AtomicU64::new(0),
        };
        status.touch();
        status
    }

    /// Records progress now.
    pub(crate) fn touch(&self) {
        let nanos = u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.touched.store(nanos, Ordering::Relaxed);
    }

    /// When the work last reported progress.
    pub(crate) fn touched(&self) -> Instant {
        epoch() + Duration::from_nanos(self.touched.load(Ordering::Relaxed))
    }
}

pub(crate) struct Registration {
    /// The lease and the status the hold shares with the engine.
    pub status: Arc<HoldStatus>,
    pub ttl: Duration,
    pub heartbeat: Duration,
    pub margin: Duration,
    pub stop_key: Option<String>,
    pub signal: AbortSignal,
    /// When the acquire was sent, and when its answer came.
    pub sent: Instant,
    pub confirmed: Instant,
    /// Hung-holder guard: no renewal past this age ([`crate::HoldOptions::max_hold`]).
    pub max_hold: Option<Duration>,
    /// Hung-holder guard, progress mode ([`crate::HoldOptions::progress_timeout`]).
    pub progress_timeout: Option<Duration>,
}

/// Not in a timer queue.
const NOWHERE: u32 = u32::MAX;

/// One hold in the engine. Kept small (about 140 bytes): an engine may
/// renew 100,000 of them. Times are schedule milliseconds, durations
/// nanoseconds.
struct Entry {
    /// The lease (shared with the batches that renew it) and its status.
    status: Arc<HoldStatus>,
    signal: AbortSignal,
    /// Shared with the stop-key index.
    stop_key: Option<Arc<str>>,
    last_error: Option<Box<str>>,
    /// The hung-holder guard, for the holds that asked for one.
    guard: Option<Box<Guard>>,
    ttl: u64,
    margin: u64,
    renew_every: u64,
    tick: u64,
    /// Round trip of the last confirmed renewal (or the acquire).
    rtt: u64,
    next_renew: Ms,
    safe_deadline: Ms,
    next_check: Ms,
    /// Positions in the renew, check and deadline queues ([`NOWHERE`]: not
    /// queued; a hold whose renewals the guard stopped has no renew timer,
    /// one without a stop key no check timer).
    renew_pos: u32,
    check_pos: u32,
    deadline_pos: u32,
    /// Asked to read the stop flag again (push) while a read of it may be
    /// in flight: that read's answer must not push the next one a tick away.
    recheck: bool,
    /// A renewal of it is with the I/O thread.
    in_flight: bool,
}

/// The hung-holder guard of one hold.
struct Guard {
    /// No renewal may make the lease outlive this.
    renew_until: Option<Instant>,
    /// The longest time without a touch.
    progress_timeout: Option<Duration>,
    /// Renewals stopped by the guard (the hold waits for its safe deadline).
    stopped: Option<LostCause>,
    /// When the acquire was sent.
    acquired: Instant,
}

impl Entry {
    fn lease(&self) -> &Lease {
        &self.status.lease
    }
}

/// The engine's holds: a slab. An id is `generation << 32 | slot`, so an id
/// kept after its hold left never finds the hold that reuses the slot.
#[derive(Default)]
struct Slab {
    slots: Vec<Slot>,
    free: Vec<u32>,
    len: usize,
}

struct Slot {
    generation: u32,
    entry: Option<Entry>,
}

fn slot_of(id: u64) -> u32 {
    id as u32
}

impl Slab {
    fn insert(&mut self, entry: Entry) -> u64 {
        self.len += 1;
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    entry: None,
                });
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 holds")
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.entry = Some(entry);
        (u64::from(slot.generation) << 32) | u64::from(index)
    }

    fn get(&self, id: u64) -> Option<&Entry> {
        let slot = self.slots.get(slot_of(id) as usize)?;
        (u64::from(slot.generation) == id >> 32)
            .then_some(slot.entry.as_ref())
            .flatten()
    }

    fn get_mut(&mut self, id: u64) -> Option<&mut Entry> {
        let slot = self.slots.get_mut(slot_of(id) as usize)?;
        (u64::from(slot.generation) == id >> 32)
            .then_some(slot.entry.as_mut())
            .flatten()
    }

    /// The entry in slot `index` (timers name slots: their entries are
    /// always live, see [`Schedule`]).
    fn at(&mut self, index: u32) -> &mut Entry {
        self.slots[index as usize]
            .entry
            .as_mut()
            .expect("a timer names a live entry")
    }

    fn id_of(&self, index: u32) -> u64 {
        (u64::from(self.slots[index as usize].generation) << 32) | u64::from(index)
    }

    fn remove(&mut self, id: u64) -> Option<Entry> {
        let index = slot_of(id);
        let slot = self.slots.get_mut(index as usize)?;
        if u64::from(slot.generation) != id >> 32 {
            return None;
        }
        let entry = slot.entry.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.len -= 1;
        Some(entry)
    }

    #[cfg(test)]
    fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut Entry)> {
        self.slots.iter_mut().enumerate().filter_map(|(i, s)| {
            let id = (u64::from(s.generation) << 32) | i as u64;
            s.entry.as_mut().map(|e| (id, e))
        })
    }
}

/// Which of an entry's timers a [`Timers`] queue holds.
#[derive(Clone, Copy)]
enum Kind {
    Renew,
    Check,
    Deadline,
}

impl Kind {
    fn pos(self, e: &mut Entry) -> &mut u32 {
        match self {
            Kind::Renew => &mut e.renew_pos,
            Kind::Check => &mut e.check_pos,
            Kind::Deadline => &mut e.deadline_pos,
        }
    }

    fn at(self, e: &Entry) -> Ms {
        match self {
            Kind::Renew => e.next_renew,
            Kind::Check => e.next_check,
            Kind::Deadline => e.safe_deadline,
        }
    }
}

/// One timer queue: the slots due at each millisecond, earliest first
/// (module header, "Timers"). Holds renewed by one batch share their next
/// due time, so the map has a few keys however many holds there are, and
/// (re)arming a timer is a push onto a list, not a heap operation.
struct Timers {
    kind: Kind,
    due: BTreeMap<Ms, Vec<u32>>,
}

impl Timers {
    fn new(kind: Kind) -> Self {
        Timers {
            kind,
            due: BTreeMap::new(),
        }
    }

    /// Queues slot `index` at its entry's time for this kind (taking it
    /// out of where it was first).
    fn arm(&mut self, slab: &mut Slab, index: u32) {
        self.disarm(slab, index);
        let e = slab.at(index);
        let list = self.due.entry(self.kind.at(e)).or_default();
        list.push(index);
        *self.kind.pos(e) = u32::try_from(list.len() - 1).expect("fewer than 2^32 holds");
    }

    /// Takes slot `index` out of this queue (if it is in it).
    fn disarm(&mut self, slab: &mut Slab, index: u32) {
        let e = slab.at(index);
        let pos = std::mem::replace(self.kind.pos(e), NOWHERE);
        if pos == NOWHERE {
            return;
        }
        let at = self.kind.at(e);
        let Some(list) = self.due.get_mut(&at) else {
            return;
        };
        list.swap_remove(pos as usize);
        if let Some(&moved) = list.get(pos as usize) {
            *self.kind.pos(slab.at(moved)) = pos;
        } else if list.is_empty() {
            self.due.remove(&at);
        }
    }

    /// The earliest due time.
    fn first(&self) -> Option<Ms> {
        self.due.keys().next().copied()
    }

    /// Takes out every slot that may go at `now`: its due time, less its
    /// entry's `early` allowance (ms), is at or before `now`; stops at the
    /// first due time that still has a slot that may not.
    fn take_ready(&mut self, slab: &mut Slab, now: Ms, early: fn(&Entry) -> Ms) -> Vec<u32> {
        let mut ready = Vec::new();
        while let Some(mut entry) = self.due.first_entry() {
            let at = *entry.key();
            let list = entry.get_mut();
            let mut i = 0;
            while i < list.len() {
                let index = list[i];
                let e = slab.at(index);
                if at.saturating_sub(early(e)) <= now {
                    list.swap_remove(i);
                    *self.kind.pos(e) = NOWHERE;
                    if let Some(&moved) = list.get(i) {
                        *self.kind.pos(slab.at(moved)) = u32::try_from(i).unwrap_or(NOWHERE);
                    }
                    ready.push(index);
                } else {
                    i += 1;
                }
            }
            if !list.is_empty() {
                break;
            }
            entry.remove();
        }
        ready
    }
}

/// The schedule of one engine's entries (module header, "Timers"): every
/// live entry is in the deadline queue; in the renew queue unless the
/// guard stopped its renewals or a renewal of it is in flight; in the
/// check queue while it watches a stop key and no read of it is in flight.
struct Schedule {
    renew_due: Timers,
    check_due: Timers,
    deadlines: Timers,
}

impl Schedule {
    /// The queue of timers of `kind`.
    fn of(&mut self, kind: Kind) -> &mut Timers {
        match kind {
            Kind::Renew => &mut self.renew_due,
            Kind::Check => &mut self.check_due,
            Kind::Deadline => &mut self.deadlines,
        }
    }
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            renew_due: Timers::new(Kind::Renew),
            check_due: Timers::new(Kind::Check),
            deadlines: Timers::new(Kind::Deadline),
        }
    }
}

/// A batch for the I/O thread.
#[derive(Default)]
struct Job {
    renew_ids: Vec<u64>,
    renewals: Vec<(Arc<HoldStatus>, Duration, Duration)>,
    check_ids: Vec<u64>,
    checks: Vec<Arc<str>>,
    deletes: Vec<Lease>,
    deadline: Option<Instant>,
    /// When the scheduler collected it: the next renewals and reads of its
    /// holds are due an interval after this (not after the send, which
    /// comes a little later: holds would drift a little each round, and
    /// two batches half an interval apart would never merge).
    collected: Option<Instant>,
}

#[derive(Default)]
struct State {
    entries: Slab,
    scheduler_running: bool,
    io_running: bool,
    /// A job is with the I/O thread (waiting or running).
    io_busy: bool,
    job: Option<Job>,
    /// Entries lost by deadline while a renewal of theirs was in flight.
    orphans: rustc_hash::FxHashSet<u64>,
    /// Leases to delete in the background (holds dropped without release).
    deletes: Vec<Lease>,
    /// This engine's registration with the adapter's flag listener.
    watch: Option<FlagWatch>,
    /// The owner's counters and event queue ([`crate::stats`]; its locks
    /// are leaves below this state's).
    stats: Arc<Stats>,
    sched: Schedule,
    /// The entries watching each stop key (so a push finds them without a
    /// scan of every hold).
    watching: HashMap<Arc<str>, rustc_hash::FxHashSet<u64>>,
}

impl State {
    /// `id` no longer watches `key`.
    fn unwatch(&mut self, key: &str, id: u64) {
        if let Some(ids) = self.watching.get_mut(key) {
            ids.remove(&id);
            if ids.is_empty() {
                self.watching.remove(key);
                if let Some(watch) = &self.watch {
                    watch.unwatch_flag(key);
                }
            }
        }
    }

    /// `id` watches `key` (the listener subscribes a key's channel while
    /// any entry watches it: crate::contract::push).
    fn watch_key(&mut self, key: Arc<str>, id: u64) {
        let ids = self.watching.entry(key.clone()).or_default();
        ids.insert(id);
        if ids.len() == 1 {
            if let Some(watch) = &self.watch {
                watch.watch_flag(&key);
            }
        }
    }

    /// (Re)arms timer `kind` of entry `id` at its entry's time.
    fn arm(&mut self, kind: Kind, id: u64) {
        self.sched.of(kind).arm(&mut self.entries, slot_of(id));
    }

    /// Moves timer `kind` of entry `id` to `at` (out of the queue at its
    /// old time first: a queue finds an entry by its time).
    fn schedule(&mut self, kind: Kind, id: u64, at: Ms) {
        self.disarm(kind, id);
        if let Some(e) = self.entries.get_mut(id) {
            match kind {
                Kind::Renew => e.next_renew = at,
                Kind::Check => e.next_check = at,
                Kind::Deadline => e.safe_deadline = at,
            }
            self.arm(kind, id);
        }
    }

    fn disarm(&mut self, kind: Kind, id: u64) {
        self.sched.of(kind).disarm(&mut self.entries, slot_of(id));
    }

    /// Removes entry `id` (its timers and its stop-key watch).
    fn remove_entry(&mut self, id: u64) -> Option<Entry> {
        self.entries.get(id)?;
        for kind in [Kind::Renew, Kind::Check, Kind::Deadline] {
            self.disarm(kind, id);
        }
        let e = self.entries.remove(id)?;
        if let Some(key) = &e.stop_key {
            self.unwatch(key, id);
        }
        Some(e)
    }
}

struct Shared {
    adapter: Arc<dyn Adapter>,
    state: Mutex<State>,
    /// Wakes the scheduler (new entry, batch done, deletes queued).
    wake: Condvar,
    /// Wakes the I/O thread (a job is ready).
    io_wake: Condvar,
    stats: Arc<Stats>,
}

impl Shared {
    fn new(adapter: Arc<dyn Adapter>, stats: Arc<Stats>) -> Arc<Shared> {
        Arc::new(Shared {
            adapter,
            state: Mutex::new(State {
                stats: stats.clone(),
                ..State::default()
            }),
            stats,
            wake: Condvar::new(),
            io_wake: Condvar::new(),
        })
    }
}

impl FlagWatcher for Shared {
    fn raised(&self, key: &str) {
        let mut trips = Trips::new();
        bump(&self.stats.pushes_received, 1);
        {
            let mut state = self.state.lock();
            let ids = state.watching.remove(key).unwrap_or_default();
            if !ids.is_empty() {
                if let Some(watch) = &state.watch {
                    watch.unwatch_flag(key);
                }
            }
            for id in ids {
                let Some(e) = state.entries.get_mut(id) else {
                    continue;
                };
                if e.stop_key.as_deref() == Some(key) {
                    e.stop_key = None;
                    let reason = format!("stop flag {key:?} raised");
                    stopped(&self.stats, e, &reason);
                    trips.push((e.signal.clone(), reason));
                    state.disarm(Kind::Check, id);
                }
            }
        }
        trip_all(trips);
        self.stats.flush();
    }

    fn poll_now(&self) {
        // The stop-key index names exactly the entries that watch a flag.
        self.read_now(|state| state.watching.values().flatten().copied().collect());
    }

    fn poll_flag(&self, key: &str) {
        self.read_now(|state| {
            state
                .watching
                .get(key)
                .map(|ids| ids.iter().copied().collect())
                .unwrap_or_default()
        });
    }
}

impl Shared {
    /// Makes the flag reads of the entries `which` picks due now (read
    /// again if one is in flight) and wakes the scheduler.
    fn read_now(&self, which: impl FnOnce(&State) -> Vec<u64>) {
        let mut state = self.state.lock();
        let now = ms(Instant::now());
        let ids = which(&state);
        for &id in &ids {
            if let Some(e) = state.entries.get_mut(id) {
                e.recheck = true;
            }
            state.schedule(Kind::Check, id, now);
        }
        if !ids.is_empty() {
            self.wake.notify_one();
        }
    }
}

/// A handle to one engine. Cloning shares it.
#[derive(Clone)]
pub(crate) struct Engine {
    shared: Arc<ForkLocal<Arc<Shared>>>,
    adapter: Arc<dyn Adapter>,
    stats: Arc<Stats>,
}

/// Counts a stop flag seen for `e` and queues its `stopped` event.
fn stopped(stats: &Stats, e: &Entry, reason: &str) {
    bump(&stats.stop_flags_seen, 1);
    stats.emit(|| Event {
        reason: Some(reason.to_owned()),
        ..Event::new(EventKind::Stopped, e.lease().key(), e.lease().fence())
    });
}

/// Counts a lost hold and queues its `lost` event.
fn lost_hold(stats: &Stats, e: &Entry, cause: LostCause, reason: &str) {
    stats.lost(cause);
    stats.emit(|| Event {
        reason: Some(reason.to_owned()),
        cause: Some(cause),
        ..Event::new(EventKind::Lost, e.lease().key(), e.lease().fence())
    });
}

/// Counts a failed renewal attempt; the first since the last confirmed
/// renewal (`e.last_error` still empty) queues `at_risk`.
fn renewal_failed(stats: &Stats, e: &Entry, error: &str) {
    bump(&stats.renewals_failed, 1);
    if e.last_error.is_none() {
        stats.emit(|| Event {
            reason: Some(error.to_owned()),
            ..Event::new(EventKind::AtRisk, e.lease().key(), e.lease().fence())
        });
    }
}

/// What [`Engine::unregister`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unregistered {
    /// It was renewing; it is out now.
    Removed,
    /// It had already left (lost), or this is a forked child.
    Gone,
}

type Trips = Vec<(AbortSignal, String)>;

fn trip_all(trips: Trips) {
    for (signal, reason) in trips {
        if let Some(pending) = signal.trip(Some(&reason)) {
            crate::signal::notify::run_later(pending);
        }
    }
}

impl Engine {
    pub(crate) fn new(adapter: Arc<dyn Adapter>) -> Self {
        let stats = Arc::new(Stats::default());
        Engine {
            shared: Arc::new(ForkLocal::new(
                Shared::new(adapter.clone(), stats.clone()),
                |parent| Shared::new(parent.adapter.clone(), parent.stats.clone()),
            )),
            adapter,
            stats,
        }
    }

    pub(crate) fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    fn shared(&self) -> &Arc<Shared> {
        self.shared.get()
    }

    /// Adds a hold; starts the heartbeat threads if they are not running.
    ///
    /// # Errors
    /// [`Error::System`] if a thread cannot be started.
    pub(crate) fn register(&self, reg: Registration) -> Result<u64> {
        let (renew_every, tick) = intervals(reg.ttl, reg.heartbeat);
        let guard = (reg.max_hold.is_some() || reg.progress_timeout.is_some()).then(|| {
            Box::new(Guard {
                renew_until: reg.max_hold.and_then(|m| reg.sent.checked_add(m)),
                progress_timeout: reg.progress_timeout,
                stopped: None,
                acquired: reg.sent,
            })
        });
        let mut entry = Entry {
            next_renew: ms(reg.sent + renew_every),
            safe_deadline: ms((reg.sent + reg.ttl)
                .checked_sub(reg.margin)
                .unwrap_or(reg.sent)),
            rtt: ns(reg.confirmed.saturating_duration_since(reg.sent)),
            last_error: None,
            // Read the stop flag right away: it may be up already.
            next_check: ms(reg.confirmed),
            recheck: false,
            in_flight: false,
            status: reg.status,
            ttl: ns(reg.ttl),
            margin: ns(reg.margin),
            renew_every: ns(renew_every),
            tick: ns(tick),
            stop_key: None,
            signal: reg.signal,
            guard,
            renew_pos: NOWHERE,
            check_pos: NOWHERE,
            deadline_pos: NOWHERE,
        };
        let shared = self.shared();
        let mut state = shared.state.lock();
        if reg.stop_key.is_some() && state.watch.is_none() {
            // Register for push before the entry exists (module header of
            // crate::contract::push); the listener starts without I/O on this thread.
            drop(state);
            let weak: std::sync::Weak<Shared> = Arc::downgrade(shared);
            let watcher: std::sync::Weak<dyn FlagWatcher> = weak;
            let watch = shared.adapter.watch_flags(watcher);
            state = shared.state.lock();
            if state.watch.is_none() {
                state.watch = watch;
                // Keys watched while there was no registration (the
                // listener could not be started before).
                if let Some(watch) = &state.watch {
                    for key in state.watching.keys() {
                        watch.watch_flag(key);
                    }
                }
            }
        }
        ensure_threads(shared, &mut state)?;
        let state = &mut *state;
        // One allocation per stop key, shared by the holds watching it.
        entry.stop_key = reg
            .stop_key
            .map(|key| match state.watching.get_key_value(key.as_str()) {
                Some((shared_key, _)) => shared_key.clone(),
                None => Arc::from(key),
            });
        let watches = entry.stop_key.clone();
        let id = state.entries.insert(entry);
        state.arm(Kind::Renew, id);
        state.arm(Kind::Deadline, id);
        if let Some(key) = watches {
            state.arm(Kind::Check, id);
            state.watch_key(key, id);
        }
        shared.wake.notify_one();
        Ok(id)
    }

    /// Takes a hold out. Returns at once: from now on no batch touches the
    /// entry, and no renewal of it can outlive the holder's delete (see the
    /// module header).
    pub(crate) fn unregister(&self, id: u64) -> Unregistered {
        let shared = self.shared();
        let mut state = shared.state.lock();
        match state.remove_entry(id) {
            Some(_) => {
                shared.wake.notify_one();
                Unregistered::Removed
            }
            None => Unregistered::Gone,
        }
    }

    /// Deletes `lease` on the I/O thread, soon; for holds dropped where no
    /// I/O may happen (a Ruby GC free function). If no thread can be
    /// started, the lease is left to expire at its ttl.
    pub(crate) fn delete_later(&self, lease: Lease) {
        let shared = self.shared();
        let mut state = shared.state.lock();
        if ensure_threads(shared, &mut state).is_ok() {
            state.deletes.push(lease);
            shared.wake.notify_one();
        }
    }

    pub(crate) fn adapter(&self) -> &Arc<dyn Adapter> {
        &self.adapter
    }

    /// How many holds are renewing (for tests and inspection).
    pub(crate) fn len(&self) -> usize {
        self.shared().state.lock().entries.len
    }
}

fn ensure_threads(shared: &Arc<Shared>, state: &mut State) -> Result<()> {
    let spawn = |name: &str, body: fn(Arc<Shared>), shared: Arc<Shared>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(shared))
            .map(drop)
            .map_err(|e| Error::System(format!("cannot start the {name} thread: {e}")))
    };
    if !state.io_running {
        spawn("mistri-heartbeat-io", run_io, shared.clone())?;
        state.io_running = true;
    }
    if !state.scheduler_running {
        spawn("mistri-heartbeat", run_scheduler, shared.clone())?;
        state.scheduler_running = true;
    }
    Ok(())
}

/// Removes the entries whose safe deadline has passed; their trips.
fn expire(state: &mut State, now: Ms, trips: &mut Trips) {
    while state.sched.deadlines.first().is_some_and(|at| at <= now) {
        let Some((_, list)) = state.sched.deadlines.due.first_key_value() else {
            break;
        };
        let index = list[0];
        let id = state.entries.id_of(index);
        let Some(e) = state.remove_entry(id) else {
            break;
        };
        if e.in_flight {
            state.orphans.insert(id);
        }
        match e.guard.as_deref() {
            // Told (and counted) when the work was found stalled.
            Some(Guard {
                stopped: Some(LostCause::Stalled),
                ..
            }) => continue,
            Some(
                g @ Guard {
                    stopped: Some(cause),
                    ..
                },
            ) => {
                let reason = format!(
                    "lease lost: max_hold reached: the hold of {:?} is not renewed past {:.3} s \
                     after its acquire; it may expire within {:.3} s",
                    e.lease().key(),
                    g.renew_until
                        .map_or(0.0, |u| (u - g.acquired).as_secs_f64()),
                    dur(e.margin).as_secs_f64(),
                );
                e.status.lost.store(true, Ordering::SeqCst);
                lost_hold(&state.stats, &e, *cause, &reason);
                trips.push((e.signal, reason));
                continue;
            }
            _ => {}
        }
        let why = match &e.last_error {
            Some(err) => format!("; last error: {err}"),
            None => String::new(),
        };
        let reason = format!(
            "lease lost: no renewal of {:?} was confirmed before its safe deadline (ttl {:.3} s, \
             safety margin {:.3} s); it may expire within {:.3} s{why}",
            e.lease().key(),
            dur(e.ttl).as_secs_f64(),
            dur(e.margin).as_secs_f64(),
            dur(e.margin).as_secs_f64(),
        );
        e.status.lost.store(true, Ordering::SeqCst);
        lost_hold(&state.stats, &e, LostCause::Deadline, &reason);
        trips.push((e.signal, reason));
    }
}

/// Whether the hung-holder guard forbids renewing `e` at `now`: its work
/// stopped calling `touch` ([`LostCause::Stalled`]), or the renewed lease
/// would outlive `max_hold` ([`LostCause::MaxHold`]).
fn guard_stops(e: &Entry, now: Instant) -> Option<LostCause> {
    let g = e.guard.as_deref()?;
    if let Some(timeout) = g.progress_timeout {
        if now.saturating_duration_since(e.status.touched()) >= timeout {
            return Some(LostCause::Stalled);
        }
    }
    match g.renew_until {
        Some(until) if now.checked_add(dur(e.ttl)).is_none_or(|end| end > until) => {
            Some(LostCause::MaxHold)
        }
        _ => None,
    }
}

/// How early a renewal may go: half its interval (module header, "Timers").
fn renew_early(e: &Entry) -> Ms {
    e.renew_every / 2 / 1_000_000
}

/// How early a flag read may go: half its tick.
fn check_early(e: &Entry) -> Ms {
    e.tick / 2 / 1_000_000
}

/// The due work, as a job bounded by the earliest safe deadline: nothing
/// unless some renewal or read is due (or a delete is queued), then all
/// that is ready (module header, "Timers").
fn collect_due(state: &mut State, now: Instant, trips: &mut Trips) -> Option<Job> {
    let now_ms = ms(now);
    let due = state.sched.renew_due.first().is_some_and(|at| at <= now_ms)
        || state.sched.check_due.first().is_some_and(|at| at <= now_ms);
    if !due && state.deletes.is_empty() {
        return None;
    }
    let mut job = Job::default();
    if due {
        let State {
            entries,
            sched,
            stats,
            ..
        } = state;
        for index in sched.renew_due.take_ready(entries, now_ms, renew_early) {
            let id = entries.id_of(index);
            let e = entries.at(index);
            if let Some(cause) = guard_stops(e, now) {
                // No renewal from now on: the renew timer is not armed again.
                if let Some(g) = e.guard.as_deref_mut() {
                    g.stopped = Some(cause);
                }
                if cause == LostCause::Stalled {
                    let reason = format!(
                        "work stalled: no touch() on the hold of {:?} for {:.3} s \
                         (progress_timeout); renewals stopped, the lease lapses within its ttl",
                        e.lease().key(),
                        e.guard
                            .as_deref()
                            .and_then(|g| g.progress_timeout)
                            .unwrap_or_default()
                            .as_secs_f64(),
                    );
                    e.status.lost.store(true, Ordering::SeqCst);
                    lost_hold(stats, e, cause, &reason);
                    trips.push((e.signal.clone(), reason));
                }
                continue;
            }
            e.in_flight = true;
            job.renew_ids.push(id);
            job.renewals.push((
                e.status.clone(),
                dur(e.ttl),
                dur(e.margin.saturating_add(e.rtt)),
            ));
        }
        for index in sched.check_due.take_ready(entries, now_ms, check_early) {
            let id = entries.id_of(index);
            let e = entries.at(index);
            let Some(stop_key) = &e.stop_key else {
                continue;
            };
            job.check_ids.push(id);
            job.checks.push(stop_key.clone());
            e.recheck = false;
        }
    }
    job.deletes = std::mem::take(&mut state.deletes);
    if job.renew_ids.is_empty() && job.check_ids.is_empty() && job.deletes.is_empty() {
        return None;
    }
    job.deadline = state.sched.deadlines.first().map(instant);
    job.collected = Some(now);
    Some(job)
}

fn run_scheduler(shared: Arc<Shared>) {
    let mut idle_since: Option<Instant> = None;
    let mut state = shared.state.lock();
    loop {
        let now = Instant::now();
        let mut trips = Trips::new();
        expire(&mut state, ms(now), &mut trips);
        if trips.is_empty() && !state.io_busy {
            if let Some(job) = collect_due(&mut state, now, &mut trips) {
                state.job = Some(job);
                state.io_busy = true;
                shared.io_wake.notify_one();
            }
        }
        if !trips.is_empty() {
            drop(state);
            trip_all(trips);
            shared.stats.flush();
            state = shared.state.lock();
            continue;
        }
        let idle = state.entries.len == 0 && !state.io_busy && state.deletes.is_empty();
        let sched = &state.sched;
        let mut wake_at = sched.deadlines.first();
        if !state.io_busy {
            let renew = sched.renew_due.first();
            let check = sched.check_due.first();
            wake_at = [wake_at, renew, check].into_iter().flatten().min();
        }
        let mut wake_at = wake_at.map(instant);
        if idle {
            let since = *idle_since.get_or_insert(now);
            if now >= since + IDLE_EXIT {
                state.scheduler_running = false;
                // The listener closes its channel once nobody watches.
                state.watch = None;
                return;
            }
            wake_at = Some(since + IDLE_EXIT);
        } else {
            idle_since = None;
        }
        state = match wake_at {
            Some(at) => shared.wake.wait_until(state, at).0,
            None => shared.wake.wait(state),
        };
    }
}

fn run_io(shared: Arc<Shared>) {
    loop {
        let mut job = {
            let mut state = shared.state.lock();
            let idle_until = Instant::now() + IDLE_EXIT;
            loop {
                if let Some(job) = state.job.take() {
                    break job;
                }
                let (guard, timed_out) = shared.io_wake.wait_until(state, idle_until);
                state = guard;
                if timed_out && state.job.is_none() {
                    state.io_running = false;
                    return;
                }
            }
        };
        // Bounded by the earliest safe deadline of the engine's holds, and
        // by the adapter's own I/O timeout (none for in-process adapters).
        let cap = shared.adapter.io_timeout();
        let mut deadline = job.deadline.unwrap_or_else(|| Instant::now() + MAX_TICK);
        if !cap.is_zero() {
            deadline = deadline.min(Instant::now() + cap);
        }
        let renewals: Vec<Renewal<'_>> = job
            .renewals
            .iter()
            .map(|(status, ttl, min_left)| Renewal {
                lease: &status.lease,
                ttl: *ttl,
                min_left: *min_left,
            })
            .collect();
        let checks: Vec<&str> = job.checks.iter().map(|k| &**k).collect();
        let sent = Instant::now();
        let beating = !(renewals.is_empty() && checks.is_empty());
        let result = if !beating {
            Ok(Default::default())
        } else {
            bump(&shared.stats.renewals_sent, renewals.len() as u64);
            shared.adapter.beat(&renewals, &checks, deadline)
        };
        let done = Instant::now();
        if beating {
            shared.stats.beat(done - sent, result.is_ok());
        }
        drop(renewals);

        let mut trips = Trips::new();
        let mut deletes = std::mem::take(&mut job.deletes);
        {
            let mut state = shared.state.lock();
            apply(
                &mut state,
                &job,
                result,
                sent,
                done,
                &mut trips,
                &mut deletes,
            );
            state.orphans.clear();
            state.io_busy = false;
            shared.wake.notify_one();
        }
        trip_all(trips);
        shared.stats.flush();
        for lease in deletes {
            // Best effort, bounded by the adapter's own timeout; a lease
            // that can't be deleted expires at its ttl.
            if shared.adapter.release(&lease).is_ok_and(|deleted| deleted) {
                // Waiters of this process hear it at once ([`crate::waiting`]).
                crate::waiting::released(&shared.adapter, &lease);
            }
        }
    }
}

fn apply(
    state: &mut State,
    job: &Job,
    result: Result<crate::contract::adapter::Beat>,
    sent: Instant,
    done: Instant,
    trips: &mut Trips,
    deletes: &mut Vec<Lease>,
) {
    let beat = match result {
        Ok(beat) => beat,
        Err(err) => {
            let text: Box<str> = err.to_string().into();
            for &id in &job.renew_ids {
                if let Some(e) = state.entries.get_mut(id) {
                    renewal_failed(&state.stats, e, &text);
                    e.in_flight = false;
                    e.last_error = Some(text.clone());
                    let at = ms(done + dur(e.tick));
                    state.schedule(Kind::Renew, id, at);
                }
            }
            for &id in &job.check_ids {
                if let Some(e) = state.entries.get_mut(id) {
                    if e.stop_key.is_some() {
                        let at = ms(if e.recheck { done } else { done + dur(e.tick) });
                        state.schedule(Kind::Check, id, at);
                    }
                }
            }
            return;
        }
    };
    for (i, &id) in job.renew_ids.iter().enumerate() {
        let answer = beat.renewals.get(i).map_or_else(
            || {
                Err(Error::Backend(
                    "the backend sent fewer answers than renewals".into(),
                ))
            },
            |r| match r {
                Ok(v) => Ok(*v),
                Err(e) => Err(Error::Backend(e.to_string())),
            },
        );
        let Some(e) = state.entries.get_mut(id) else {
            // Released (its holder deletes it) or lost by deadline while
            // this renewal was in flight: if the renewal took, undo it.
            if answer.as_ref().is_ok_and(|r| *r == Renewed::Yes) && state.orphans.contains(&id) {
                deletes.push(job.renewals[i].0.lease.clone());
            }
            continue;
        };
        e.in_flight = false;
        let answer_kind = answer.as_ref().ok().copied();
        let lost = match answer {
            Ok(Renewed::Yes) => {
                bump(&state.stats.renewals_confirmed, 1);
                if e.last_error.is_some() {
                    bump(&state.stats.renewals_late, 1);
                    state.stats.emit(|| {
                        Event::new(EventKind::RenewedLate, e.lease().key(), e.lease().fence())
                    });
                }
                let ttl = dur(e.ttl);
                let deadline = ms((sent + ttl).checked_sub(dur(e.margin)).unwrap_or(sent));
                e.rtt = ns(done.saturating_duration_since(sent));
                e.last_error = None;
                let next = ms(job.collected.unwrap_or(sent) + dur(e.renew_every));
                if deadline > e.safe_deadline {
                    state.schedule(Kind::Deadline, id, deadline);
                }
                state.schedule(Kind::Renew, id, next);
                None
            }
            Ok(Renewed::NotHeld) => Some(format!(
                "lease lost: {:?} is no longer held by this holder (it expired, was taken or was broken)",
                e.lease().key()
            )),
            Ok(Renewed::TooLate) => Some(format!(
                "lease lost: the renewal of {:?} reached the backend with less than the safety margin \
                 of its life left, and was refused",
                e.lease().key()
            )),
            Err(err) => {
                let text = err.to_string();
                renewal_failed(&state.stats, e, &text);
                e.last_error = Some(text.into());
                let at = ms(done + dur(e.tick));
                state.schedule(Kind::Renew, id, at);
                None
            }
        };
        if let Some(reason) = lost {
            if let Some(e) = state.remove_entry(id) {
                let cause = match answer_kind {
                    Some(Renewed::TooLate) => LostCause::TooLate,
                    _ => LostCause::NotHeld,
                };
                lost_hold(&state.stats, &e, cause, &reason);
                e.status.lost.store(true, Ordering::SeqCst);
                trips.push((e.signal, reason));
            }
        }
    }
    for (i, &id) in job.check_ids.iter().enumerate() {
        let Some(e) = state.entries.get_mut(id) else {
            continue;
        };
        match beat.flags.get(i) {
            Some(Ok(true)) => {
                // None: a push already stopped it (and trips it with the key).
                let Some(key) = e.stop_key.take() else {
                    continue;
                };
                let reason = format!("stop flag {key:?} raised");
                stopped(&state.stats, e, &reason);
                trips.push((e.signal.clone(), reason));
                state.unwatch(&key, id);
                state.disarm(Kind::Check, id);
                continue;
            }
            _ if e.stop_key.is_none() => continue,
            Some(Ok(false)) if !e.recheck => {
                let at = ms(job.collected.unwrap_or(sent) + dur(e.tick));
                state.schedule(Kind::Check, id, at);
            }
            _ if e.recheck => state.schedule(Kind::Check, id, ms(done)),
            _ => {
                let at = ms(done + dur(e.tick));
                state.schedule(Kind::Check, id, at);
            }
        }
    }
}

#[cfg(test)]
mod tests;
