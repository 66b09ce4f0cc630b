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
//! Timers: the schedule is kept in binary heaps keyed by time, so a wake
//! costs O(log n) per hold that is due, never a scan of the holds that are
//! not. Renewals and flag reads each have one heap keyed by *due* time
//! (when the work must go: the scheduler's wake time); an item is *ready*
//! half an interval before it is due (when it may go early). A batch goes
//! only when some work is due, and takes from the top of each heap all
//! that is ready, so holds taken at different moments fall into one batch
//! within two intervals and stay there (one round trip per heartbeat); a
//! hold is renewed at most twice as often as it asks. (Holds of one
//! engine mostly share their intervals; where they differ, an item ready
//! behind a later-due one waits for the next batch, never past its due
//! time.)
//! Invalidation is lazy: a renew/check timer carries a sequence number and
//! is live while its entry's number matches (and, for reads, the entry
//! still watches a flag); the deadline heap holds one item per entry and an
//! item found earlier than its entry's (only ever later-moving) safe
//! deadline is pushed back at the current value. A heap with more than
//! twice as many items as entries is compacted, so churn cannot grow it.
//!
//! Outcomes: a renewal answered "not held" or "too late" marks the hold
//! *lost* at once; one that fails is retried; the safe deadline passing
//! marks it lost. Lost holds leave the engine; their signal is latched at
//! once (waiters wake) with a reason starting `lease lost:`, and its
//! callbacks run on the notifier thread ([`crate::notify`]), never here.
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
//! Push ([`crate::push`]): an engine with a hold that watches a stop key
//! registers with its adapter's flag listener (if the adapter has one)
//! *before* inserting the hold, and keeps that registration until its
//! scheduler retires. The listener's thread calls in: `raised(key)` trips
//! the holds watching `key` at once (as a poll that found the flag would);
//! `poll_now` makes every watched flag due now (flagging entries whose read
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

use crate::adapter::{Adapter, Lease, Renewal, Renewed};
use crate::error::{Error, Result};
use crate::fork::ForkLocal;
use crate::push::{FlagWatch, FlagWatcher};
use crate::signal::AbortSignal;
use crate::stats::{bump, Event, EventKind, LostCause, Stats};
use crate::sync::{Condvar, Mutex};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
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

/// What the engine and the [`crate::Hold`] share about one hold.
#[derive(Debug, Default)]
pub(crate) struct HoldStatus {
    pub(crate) lost: AtomicBool,
    /// When the work last called `touch` (nanoseconds since [`epoch`]).
    touched: AtomicU64,
}

/// A process-wide base for instants stored in atomics.
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl HoldStatus {
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
    pub lease: Lease,
    pub ttl: Duration,
    pub heartbeat: Duration,
    pub margin: Duration,
    pub stop_key: Option<String>,
    pub signal: AbortSignal,
    pub status: Arc<HoldStatus>,
    /// When the acquire was sent, and when its answer came.
    pub sent: Instant,
    pub confirmed: Instant,
    /// Hung-holder guard: no renewal past this age ([`crate::HoldOptions::max_hold`]).
    pub max_hold: Option<Duration>,
    /// Hung-holder guard, progress mode ([`crate::HoldOptions::progress_timeout`]).
    pub progress_timeout: Option<Duration>,
}

struct Entry {
    /// Shared with the batches that renew it (no token copy per renewal).
    lease: Arc<Lease>,
    ttl: Duration,
    margin: Duration,
    renew_every: Duration,
    tick: Duration,
    next_renew: Instant,
    safe_deadline: Instant,
    /// Round trip of the last confirmed renewal (or the acquire).
    rtt: Duration,
    last_error: Option<String>,
    stop_key: Option<String>,
    next_check: Instant,
    /// Asked to read the stop flag again (push) while a read of it may be
    /// in flight: that read's answer must not push the next one a tick away.
    recheck: bool,
    signal: AbortSignal,
    status: Arc<HoldStatus>,
    /// The sequence numbers of this entry's live renew and check timers.
    renew_seq: u64,
    check_seq: u64,
    /// Hung-holder guard: no renewal may make the lease outlive this.
    renew_until: Option<Instant>,
    /// Hung-holder guard, progress mode: the longest time without a touch.
    progress_timeout: Option<Duration>,
    /// Renewals stopped by the guard (the hold waits for its safe deadline).
    guard: Option<LostCause>,
    /// When the acquire was sent.
    acquired: Instant,
}

/// One timer queue: `(at, seq, id)`, earliest first; stale items are
/// dropped when they reach the top (see the module header).
#[derive(Default)]
struct Timers(BinaryHeap<Reverse<(Instant, u64, u64)>>);

impl Timers {
    fn push(&mut self, at: Instant, seq: u64, id: u64) {
        self.0.push(Reverse((at, seq, id)));
    }

    /// The earliest live timer's time.
    fn peek(&mut self, live: impl Fn(u64, u64) -> bool) -> Option<Instant> {
        while let Some(Reverse((at, seq, id))) = self.0.peek() {
            if live(*id, *seq) {
                return Some(*at);
            }
            self.0.pop();
        }
        None
    }

    /// Pops the earliest live timer that may go at `now`: its time, less
    /// its entry's `early` allowance, is at or before `now`. Its id.
    fn pop_ready(
        &mut self,
        now: Instant,
        live: impl Fn(u64, u64) -> bool,
        early: impl Fn(u64) -> Duration,
    ) -> Option<u64> {
        while let Some(Reverse((at, seq, id))) = self.0.peek() {
            let (at, seq, id) = (*at, *seq, *id);
            if !live(id, seq) {
                self.0.pop();
                continue;
            }
            if at.checked_sub(early(id)).unwrap_or(at) > now {
                return None;
            }
            self.0.pop();
            return Some(id);
        }
        None
    }

    /// Drops every stale item once the heap holds more than twice as many
    /// items as there are entries (amortized O(1) per push).
    fn compact(&mut self, entries: usize, live: impl Fn(u64, u64) -> bool) {
        if self.0.len() > 2 * entries + 1024 {
            let items = std::mem::take(&mut self.0).into_vec();
            self.0 = items
                .into_iter()
                .filter(|Reverse((_, seq, id))| live(*id, *seq))
                .collect();
        }
    }
}

fn renew_live(entries: &HashMap<u64, Entry>) -> impl Fn(u64, u64) -> bool + '_ {
    |id, seq| entries.get(&id).is_some_and(|e| e.renew_seq == seq)
}

/// How early an entry's timer may go: half its `interval` (module header,
/// "Timers").
fn early(
    entries: &HashMap<u64, Entry>,
    interval: fn(&Entry) -> Duration,
) -> impl Fn(u64) -> Duration + '_ {
    move |id| entries.get(&id).map_or(Duration::ZERO, |e| interval(e) / 2)
}

fn check_live(entries: &HashMap<u64, Entry>) -> impl Fn(u64, u64) -> bool + '_ {
    |id, seq| {
        entries
            .get(&id)
            .is_some_and(|e| e.check_seq == seq && e.stop_key.is_some())
    }
}

/// The schedule of one engine's entries (module header, "Timers").
#[derive(Default)]
struct Schedule {
    seq: u64,
    renew_due: Timers,
    check_due: Timers,
    /// One item per entry, `(safe deadline as pushed, 0, id)`.
    deadlines: Timers,
}

impl Schedule {
    /// (Re)arms `e`'s renewal at `e.next_renew`.
    fn renew(&mut self, id: u64, e: &mut Entry) {
        self.seq += 1;
        e.renew_seq = self.seq;
        self.renew_due.push(e.next_renew, self.seq, id);
    }

    /// (Re)arms `e`'s flag read at `e.next_check`.
    fn check(&mut self, id: u64, e: &mut Entry) {
        self.seq += 1;
        e.check_seq = self.seq;
        self.check_due.push(e.next_check, self.seq, id);
    }

    /// The earliest safe deadline of any entry, bringing items whose entry
    /// has since renewed up to date on the way.
    fn earliest_deadline(&mut self, entries: &HashMap<u64, Entry>) -> Option<Instant> {
        while let Some(Reverse((at, _, id))) = self.deadlines.0.peek() {
            let (at, id) = (*at, *id);
            match entries.get(&id) {
                None => {
                    self.deadlines.0.pop();
                }
                Some(e) if e.safe_deadline > at => {
                    self.deadlines.0.pop();
                    self.deadlines.push(e.safe_deadline, 0, id);
                }
                Some(_) => return Some(at),
            }
        }
        None
    }

    fn compact(&mut self, entries: &HashMap<u64, Entry>) {
        let n = entries.len();
        self.renew_due.compact(n, renew_live(entries));
        self.check_due.compact(n, check_live(entries));
        self.deadlines.compact(n, |id, _| entries.contains_key(&id));
    }
}

/// A batch for the I/O thread.
#[derive(Default)]
struct Job {
    renew_ids: Vec<u64>,
    renewals: Vec<(Arc<Lease>, Duration, Duration)>,
    check_ids: Vec<u64>,
    checks: Vec<String>,
    deletes: Vec<Lease>,
    deadline: Option<Instant>,
}

#[derive(Default)]
struct State {
    entries: HashMap<u64, Entry>,
    next_id: u64,
    scheduler_running: bool,
    io_running: bool,
    /// A job is with the I/O thread (waiting or running).
    io_busy: bool,
    job: Option<Job>,
    /// Entries lost by deadline while a renewal of theirs was in flight.
    orphans: HashSet<u64>,
    in_flight: HashSet<u64>,
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
    watching: HashMap<String, rustc_hash::FxHashSet<u64>>,
}

impl State {
    /// `id` no longer watches `key`.
    fn unwatch(&mut self, key: &str, id: u64) {
        if let Some(ids) = self.watching.get_mut(key) {
            ids.remove(&id);
            if ids.is_empty() {
                self.watching.remove(key);
            }
        }
    }

    /// Removes entry `id` (and its stop-key watch).
    fn remove_entry(&mut self, id: u64) -> Option<Entry> {
        let e = self.entries.remove(&id)?;
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
            for id in ids {
                let Some(e) = state.entries.get_mut(&id) else {
                    continue;
                };
                if e.stop_key.as_deref() == Some(key) {
                    e.stop_key = None;
                    let reason = format!("stop flag {key:?} raised");
                    stopped(&self.stats, e, &reason);
                    trips.push((e.signal.clone(), reason));
                }
            }
        }
        trip_all(trips);
        self.stats.flush();
    }

    fn poll_now(&self) {
        let mut state = self.state.lock();
        let now = Instant::now();
        let mut any = false;
        let state = &mut *state;
        for (id, e) in state.entries.iter_mut() {
            if e.stop_key.is_some() {
                e.next_check = now;
                e.recheck = true;
                state.sched.check(*id, e);
                any = true;
            }
        }
        if any {
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
        ..Event::new(EventKind::Stopped, e.lease.key(), e.lease.fence())
    });
}

/// Counts a lost hold and queues its `lost` event.
fn lost_hold(stats: &Stats, e: &Entry, cause: LostCause, reason: &str) {
    stats.lost(cause);
    stats.emit(|| Event {
        reason: Some(reason.to_owned()),
        cause: Some(cause),
        ..Event::new(EventKind::Lost, e.lease.key(), e.lease.fence())
    });
}

/// Counts a failed renewal attempt; the first since the last confirmed
/// renewal (`e.last_error` still empty) queues `at_risk`.
fn renewal_failed(stats: &Stats, e: &Entry, error: &str) {
    bump(&stats.renewals_failed, 1);
    if e.last_error.is_none() {
        stats.emit(|| Event {
            reason: Some(error.to_owned()),
            ..Event::new(EventKind::AtRisk, e.lease.key(), e.lease.fence())
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
            crate::notify::run_later(pending);
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
        let entry = Entry {
            next_renew: reg.sent + renew_every,
            safe_deadline: (reg.sent + reg.ttl)
                .checked_sub(reg.margin)
                .unwrap_or(reg.sent),
            rtt: reg.confirmed.saturating_duration_since(reg.sent),
            last_error: None,
            // Read the stop flag right away: it may be up already.
            next_check: reg.confirmed,
            recheck: false,
            lease: Arc::new(reg.lease),
            ttl: reg.ttl,
            margin: reg.margin,
            renew_every,
            tick,
            stop_key: reg.stop_key,
            signal: reg.signal,
            status: reg.status,
            renew_seq: 0,
            check_seq: 0,
            renew_until: reg.max_hold.and_then(|m| reg.sent.checked_add(m)),
            progress_timeout: reg.progress_timeout,
            guard: None,
            acquired: reg.sent,
        };
        let mut entry = entry;
        let shared = self.shared();
        let mut state = shared.state.lock();
        if entry.stop_key.is_some() && state.watch.is_none() {
            // Register for push before the entry exists (module header of
            // crate::push); the listener starts without I/O on this thread.
            drop(state);
            let weak: std::sync::Weak<Shared> = Arc::downgrade(shared);
            let watcher: std::sync::Weak<dyn FlagWatcher> = weak;
            let watch = shared.adapter.watch_flags(watcher);
            state = shared.state.lock();
            if state.watch.is_none() {
                state.watch = watch;
            }
        }
        ensure_threads(shared, &mut state)?;
        state.next_id += 1;
        let id = state.next_id;
        let state = &mut *state;
        state.sched.renew(id, &mut entry);
        if entry.stop_key.is_some() {
            state.sched.check(id, &mut entry);
        }
        state.sched.deadlines.push(entry.safe_deadline, 0, id);
        if let Some(key) = &entry.stop_key {
            state.watching.entry(key.clone()).or_default().insert(id);
        }
        state.entries.insert(id, entry);
        state.sched.compact(&state.entries);
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
        self.shared().state.lock().entries.len()
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
fn expire(state: &mut State, now: Instant, trips: &mut Trips) {
    while state
        .sched
        .earliest_deadline(&state.entries)
        .is_some_and(|at| at <= now)
    {
        let Some(Reverse((_, _, id))) = state.sched.deadlines.0.pop() else {
            break;
        };
        let Some(e) = state.remove_entry(id) else {
            continue;
        };
        if state.in_flight.contains(&id) {
            state.orphans.insert(id);
        }
        match e.guard {
            // Told (and counted) when the work was found stalled.
            Some(LostCause::Stalled) => continue,
            Some(cause) => {
                let reason = format!(
                    "lease lost: max_hold reached: the hold of {:?} is not renewed past {:.3} s \
                     after its acquire; it may expire within {:.3} s",
                    e.lease.key(),
                    e.renew_until
                        .map_or(0.0, |u| (u - e.acquired).as_secs_f64()),
                    e.margin.as_secs_f64(),
                );
                e.status.lost.store(true, Ordering::SeqCst);
                lost_hold(&state.stats, &e, cause, &reason);
                trips.push((e.signal, reason));
                continue;
            }
            None => {}
        }
        let why = match &e.last_error {
            Some(err) => format!("; last error: {err}"),
            None => String::new(),
        };
        let reason = format!(
            "lease lost: no renewal of {:?} was confirmed before its safe deadline (ttl {:.3} s, \
             safety margin {:.3} s); it may expire within {:.3} s{why}",
            e.lease.key(),
            e.ttl.as_secs_f64(),
            e.margin.as_secs_f64(),
            e.margin.as_secs_f64(),
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
    if let Some(timeout) = e.progress_timeout {
        if now.saturating_duration_since(e.status.touched()) >= timeout {
            return Some(LostCause::Stalled);
        }
    }
    match e.renew_until {
        Some(until) if now.checked_add(e.ttl).is_none_or(|end| end > until) => {
            Some(LostCause::MaxHold)
        }
        _ => None,
    }
}

/// The due work, as a job bounded by the earliest safe deadline: nothing
/// unless some renewal or read is due (or a delete is queued), then all
/// that is ready (module header, "Timers").
fn collect_due(state: &mut State, now: Instant, trips: &mut Trips) -> Option<Job> {
    let State {
        entries,
        sched,
        deletes,
        ..
    } = state;
    let due = sched
        .renew_due
        .peek(renew_live(entries))
        .is_some_and(|at| at <= now)
        || sched
            .check_due
            .peek(check_live(entries))
            .is_some_and(|at| at <= now);
    if !due && deletes.is_empty() {
        return None;
    }
    let mut job = Job::default();
    if due {
        while let Some(id) =
            sched
                .renew_due
                .pop_ready(now, renew_live(entries), early(entries, |e| e.renew_every))
        {
            let Some(e) = entries.get_mut(&id) else {
                continue;
            };
            if let Some(cause) = guard_stops(e, now) {
                // No renewal from now on (a sequence number no timer has).
                e.renew_seq = u64::MAX;
                e.guard = Some(cause);
                if cause == LostCause::Stalled {
                    let reason = format!(
                        "work stalled: no touch() on the hold of {:?} for {:.3} s \
                         (progress_timeout); renewals stopped, the lease lapses within its ttl",
                        e.lease.key(),
                        e.progress_timeout.unwrap_or_default().as_secs_f64(),
                    );
                    e.status.lost.store(true, Ordering::SeqCst);
                    lost_hold(&state.stats, e, cause, &reason);
                    trips.push((e.signal.clone(), reason));
                }
                continue;
            }
            job.renew_ids.push(id);
            job.renewals
                .push((e.lease.clone(), e.ttl, e.margin.saturating_add(e.rtt)));
        }
        while let Some(id) =
            sched
                .check_due
                .pop_ready(now, check_live(entries), early(entries, |e| e.tick))
        {
            let Some(e) = entries.get_mut(&id) else {
                continue;
            };
            let Some(stop_key) = &e.stop_key else {
                continue;
            };
            job.check_ids.push(id);
            job.checks.push(stop_key.clone());
            e.recheck = false;
        }
    }
    job.deletes = std::mem::take(deletes);
    if job.renew_ids.is_empty() && job.check_ids.is_empty() && job.deletes.is_empty() {
        return None;
    }
    job.deadline = sched.earliest_deadline(entries);
    state.in_flight = job.renew_ids.iter().copied().collect();
    Some(job)
}

fn run_scheduler(shared: Arc<Shared>) {
    let mut idle_since: Option<Instant> = None;
    let mut state = shared.state.lock();
    loop {
        let now = Instant::now();
        let mut trips = Trips::new();
        expire(&mut state, now, &mut trips);
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
        let idle = state.entries.is_empty() && !state.io_busy && state.deletes.is_empty();
        let st = &mut *state;
        let mut wake_at = st.sched.earliest_deadline(&st.entries);
        if !st.io_busy {
            let State { entries, sched, .. } = st;
            let renew = sched.renew_due.peek(renew_live(entries));
            let check = sched.check_due.peek(check_live(entries));
            wake_at = [wake_at, renew, check].into_iter().flatten().min();
        }
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
            .map(|(lease, ttl, min_left)| Renewal {
                lease,
                ttl: *ttl,
                min_left: *min_left,
            })
            .collect();
        let checks: Vec<&str> = job.checks.iter().map(String::as_str).collect();
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
            state.in_flight.clear();
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
    result: Result<crate::adapter::Beat>,
    sent: Instant,
    done: Instant,
    trips: &mut Trips,
    deletes: &mut Vec<Lease>,
) {
    let beat = match result {
        Ok(beat) => beat,
        Err(err) => {
            let text = err.to_string();
            for id in &job.renew_ids {
                if let Some(e) = state.entries.get_mut(id) {
                    renewal_failed(&state.stats, e, &text);
                    e.next_renew = done + e.tick;
                    e.last_error = Some(text.clone());
                    state.sched.renew(*id, e);
                }
            }
            for id in &job.check_ids {
                if let Some(e) = state.entries.get_mut(id) {
                    e.next_check = if e.recheck { done } else { done + e.tick };
                    state.sched.check(*id, e);
                }
            }
            return;
        }
    };
    for (i, id) in job.renew_ids.iter().enumerate() {
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
            if answer.as_ref().is_ok_and(|r| *r == Renewed::Yes) && state.orphans.contains(id) {
                deletes.push(Lease::clone(&job.renewals[i].0));
            }
            continue;
        };
        let answer_kind = answer.as_ref().ok().copied();
        let lost = match answer {
            Ok(Renewed::Yes) => {
                bump(&state.stats.renewals_confirmed, 1);
                if e.last_error.is_some() {
                    bump(&state.stats.renewals_late, 1);
                    state.stats.emit(|| {
                        Event::new(EventKind::RenewedLate, e.lease.key(), e.lease.fence())
                    });
                }
                e.safe_deadline = (sent + e.ttl).checked_sub(e.margin).unwrap_or(sent);
                e.rtt = done.saturating_duration_since(sent);
                e.next_renew = sent + e.renew_every;
                e.last_error = None;
                state.sched.renew(*id, e);
                None
            }
            Ok(Renewed::NotHeld) => Some(format!(
                "lease lost: {:?} is no longer held by this holder (it expired, was taken or was broken)",
                e.lease.key()
            )),
            Ok(Renewed::TooLate) => Some(format!(
                "lease lost: the renewal of {:?} reached the backend with less than the safety margin \
                 of its life left, and was refused",
                e.lease.key()
            )),
            Err(err) => {
                let text = err.to_string();
                renewal_failed(&state.stats, e, &text);
                e.next_renew = done + e.tick;
                e.last_error = Some(text);
                state.sched.renew(*id, e);
                None
            }
        };
        if let Some(reason) = lost {
            if let Some(e) = state.remove_entry(*id) {
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
    for (i, id) in job.check_ids.iter().enumerate() {
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
                state.unwatch(&key, *id);
                continue;
            }
            Some(Ok(false)) if e.recheck => e.next_check = done,
            Some(Ok(false)) => e.next_check = sent + e.tick,
            _ if e.recheck => e.next_check = done,
            _ => e.next_check = done + e.tick,
        }
        state.sched.check(*id, e);
    }
}
