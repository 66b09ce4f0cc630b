//! The heartbeat engine: one thread per [`crate::Locks`] renews every hold
//! made through it and reads their stop flags, batching all work due in the
//! same tick into one [`Adapter::beat`] call (one pipelined round trip on
//! Redis). A process holding 10,000 leases runs one heartbeat thread, not
//! 10,000.
//!
//! Schedule per hold:
//! - renew every `min(heartbeat, ttl / 3)`, so a lease never lapses between
//!   renewals even when the caller passes `heartbeat >= ttl`;
//! - read the stop flag every tick, `tick = min(heartbeat, 1 s)`, until it is
//!   seen up once;
//! - work due within a quarter interval of now is pulled into the current
//!   batch, so holds drift into shared ticks instead of each waking alone.
//!
//! Outcomes: a renewal answered "not yours" (gone, expired or taken) marks
//! the hold *lost* at once. A renewal that errors is retried every tick; when
//! the lease's own deadline (send time of the last good renewal + ttl) has
//! passed, the hold is lost. Lost holds leave the engine and their signal is
//! tripped with a reason that says the lease was lost.
//!
//! Release protocol: [`Engine::unregister`] waits while the entry is in an
//! in-flight batch, then removes it under the lock, so once it returns no
//! tick will ever touch that lease again.
//!
//! Fork: the engine's mutex and condvars are `std::sync` ones (see
//! `crate::sync`): parking_lot would leave the parent's parked heartbeat
//! thread queued on them in the child, and the child's first `hold` would
//! hang.
//!
//! Lock order: the engine's state mutex is never held while calling the
//! adapter or tripping a signal (callbacks run with no engine lock held, so
//! a callback may release holds).
//!
//! The thread exits after [`IDLE_EXIT`] with no entries and is started again
//! on the next registration. After `fork`, the child's engine state is
//! discarded on first use: the child has no heartbeat thread and never
//! renews its parent's leases.

use crate::adapter::{Adapter, Lease};
use crate::args::fork_generation;
use crate::error::{Error, Result};
use crate::signal::AbortSignal;
use crate::sync::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an idle heartbeat thread lingers before exiting.
pub const IDLE_EXIT: Duration = Duration::from_secs(2);
/// Upper bound of the stop-flag tick.
pub const MAX_TICK: Duration = Duration::from_secs(1);

/// What the engine and the [`crate::Hold`] share about one hold.
#[derive(Debug, Default)]
pub(crate) struct HoldStatus {
    pub(crate) lost: AtomicBool,
}

pub(crate) struct Registration {
    pub lease: Lease,
    pub ttl: Duration,
    pub heartbeat: Duration,
    pub stop_key: Option<String>,
    pub signal: AbortSignal,
    pub status: Arc<HoldStatus>,
}

struct Entry {
    lease: Lease,
    ttl: Duration,
    renew_every: Duration,
    tick: Duration,
    next_renew: Instant,
    deadline: Instant,
    stop_key: Option<String>,
    next_check: Instant,
    signal: AbortSignal,
    status: Arc<HoldStatus>,
}

impl Entry {
    fn checks_flag(&self) -> bool {
        self.stop_key.is_some()
    }
    fn next_due(&self) -> Instant {
        if self.checks_flag() {
            self.next_renew.min(self.next_check)
        } else {
            self.next_renew
        }
    }
}

#[derive(Default)]
struct State {
    generation: u64,
    entries: HashMap<u64, Entry>,
    next_id: u64,
    running: bool,
    in_flight: Vec<u64>,
}

struct Shared {
    adapter: Arc<dyn Adapter>,
    state: Mutex<State>,
    /// Wakes the heartbeat thread (new entry, or shutdown).
    wake: Condvar,
    /// Wakes releasers waiting for an in-flight batch.
    batch_done: Condvar,
}

/// A handle to one engine. Cloning shares it.
#[derive(Clone)]
pub(crate) struct Engine {
    shared: Arc<Shared>,
}

/// What [`Engine::unregister`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unregistered {
    /// It was renewing; it is out now.
    Removed,
    /// It had already left (lost).
    Gone,
}

impl Engine {
    pub(crate) fn new(adapter: Arc<dyn Adapter>) -> Self {
        Engine {
            shared: Arc::new(Shared {
                adapter,
                state: Mutex::new(State {
                    generation: fork_generation(),
                    ..State::default()
                }),
                wake: Condvar::new(),
                batch_done: Condvar::new(),
            }),
        }
    }

    /// Adds a hold; starts the heartbeat thread if none runs.
    pub(crate) fn register(&self, reg: Registration, acquired_at: Instant) -> Result<u64> {
        let renew_every = reg
            .heartbeat
            .min(reg.ttl / 3)
            .max(Duration::from_micros(100));
        let tick = reg.heartbeat.min(MAX_TICK).min(renew_every);
        let entry = Entry {
            next_renew: acquired_at + renew_every,
            deadline: acquired_at + reg.ttl,
            // Read the stop flag right away: it may be up already.
            next_check: acquired_at,
            lease: reg.lease,
            ttl: reg.ttl,
            renew_every,
            tick,
            stop_key: reg.stop_key,
            signal: reg.signal,
            status: reg.status,
        };
        let mut state = self.shared.state.lock();
        let generation = fork_generation();
        if state.generation != generation {
            // A forked child: the parent's entries and thread are not ours.
            *state = State {
                generation,
                ..State::default()
            };
        }
        state.next_id += 1;
        let id = state.next_id;
        state.entries.insert(id, entry);
        if !state.running {
            let shared = self.shared.clone();
            std::thread::Builder::new()
                .name("mistri-heartbeat".into())
                .spawn(move || run(shared))
                .map_err(|e| {
                    state.entries.remove(&id);
                    Error::System(format!("cannot start the heartbeat thread: {e}"))
                })?;
            state.running = true;
        }
        self.shared.wake.notify_one();
        Ok(id)
    }

    /// Takes a hold out; returns once no tick can touch its lease again.
    pub(crate) fn unregister(&self, id: u64) -> Unregistered {
        let mut state = self.shared.state.lock();
        if state.generation != fork_generation() {
            return Unregistered::Gone;
        }
        while state.in_flight.contains(&id) {
            state = self.shared.batch_done.wait(state);
        }
        match state.entries.remove(&id) {
            Some(_) => {
                self.shared.wake.notify_one();
                Unregistered::Removed
            }
            None => Unregistered::Gone,
        }
    }

    pub(crate) fn adapter(&self) -> &Arc<dyn Adapter> {
        &self.shared.adapter
    }

    /// How many holds are renewing (for tests and inspection).
    pub(crate) fn len(&self) -> usize {
        let state = self.shared.state.lock();
        if state.generation != fork_generation() {
            0
        } else {
            state.entries.len()
        }
    }
}

struct Batch {
    renew_ids: Vec<u64>,
    renewals: Vec<(Lease, Duration)>,
    check_ids: Vec<u64>,
    checks: Vec<String>,
}

fn collect_due(state: &mut State, now: Instant) -> Batch {
    let mut batch = Batch {
        renew_ids: Vec::new(),
        renewals: Vec::new(),
        check_ids: Vec::new(),
        checks: Vec::new(),
    };
    for (id, e) in &state.entries {
        if e.next_renew <= now + e.renew_every / 4 {
            batch.renew_ids.push(*id);
            batch.renewals.push((e.lease.clone(), e.ttl));
        }
        if let Some(stop_key) = &e.stop_key {
            if e.next_check <= now + e.tick / 4 {
                batch.check_ids.push(*id);
                batch.checks.push(stop_key.clone());
            }
        }
    }
    batch
}

fn run(shared: Arc<Shared>) {
    let mut idle_since: Option<Instant> = None;
    loop {
        let mut state = shared.state.lock();
        if state.generation != fork_generation() {
            return;
        }
        let now = Instant::now();
        if state.entries.is_empty() {
            let since = *idle_since.get_or_insert(now);
            if now >= since + IDLE_EXIT {
                state.running = false;
                return;
            }
            drop(shared.wake.wait_until(state, since + IDLE_EXIT));
            continue;
        }
        idle_since = None;
        let next = state
            .entries
            .values()
            .map(Entry::next_due)
            .min()
            .unwrap_or(now);
        if next > now {
            drop(shared.wake.wait_until(state, next));
            continue;
        }
        let batch = collect_due(&mut state, now);
        state.in_flight = batch
            .renew_ids
            .iter()
            .chain(&batch.check_ids)
            .copied()
            .collect();
        drop(state);

        let sent = Instant::now();
        let renewals: Vec<(&Lease, Duration)> =
            batch.renewals.iter().map(|(l, t)| (l, *t)).collect();
        let checks: Vec<&str> = batch.checks.iter().map(String::as_str).collect();
        let result = shared.adapter.beat(&renewals, &checks);
        let done = Instant::now();

        let mut trips: Vec<(AbortSignal, String)> = Vec::new();
        let mut state = shared.state.lock();
        match &result {
            Ok(beat) => {
                for (i, id) in batch.renew_ids.iter().enumerate() {
                    let renewed = beat.renewed.get(i).copied().unwrap_or(false);
                    if renewed {
                        if let Some(e) = state.entries.get_mut(id) {
                            e.deadline = sent + e.ttl;
                            e.next_renew = sent + e.renew_every;
                        }
                    } else if let Some(e) = state.entries.remove(id) {
                        let reason = format!(
                            "lease lost: {:?} is no longer held by this holder (it expired, was taken or was broken)",
                            e.lease.key()
                        );
                        e.status.lost.store(true, Ordering::SeqCst);
                        trips.push((e.signal, reason));
                    }
                }
                for (i, id) in batch.check_ids.iter().enumerate() {
                    let up = beat.flags.get(i).copied().unwrap_or(false);
                    if let Some(e) = state.entries.get_mut(id) {
                        if up {
                            let key = e.stop_key.take().unwrap_or_default();
                            trips.push((e.signal.clone(), format!("stop flag {key:?} raised")));
                        } else {
                            e.next_check = sent + e.tick;
                        }
                    }
                }
            }
            Err(err) => {
                for id in &batch.renew_ids {
                    let lost = match state.entries.get_mut(id) {
                        Some(e) if done >= e.deadline => true,
                        Some(e) => {
                            e.next_renew = done + e.tick;
                            false
                        }
                        None => false,
                    };
                    if lost {
                        if let Some(e) = state.entries.remove(id) {
                            let reason = format!(
                                "lease lost: renewals of {:?} failed until its deadline passed: {err}",
                                e.lease.key()
                            );
                            e.status.lost.store(true, Ordering::SeqCst);
                            trips.push((e.signal, reason));
                        }
                    }
                }
                for id in &batch.check_ids {
                    if let Some(e) = state.entries.get_mut(id) {
                        e.next_check = done + e.tick;
                    }
                }
            }
        }
        state.in_flight.clear();
        shared.batch_done.notify_all();
        drop(state);
        for (signal, reason) in trips {
            signal.abort(Some(&reason));
        }
    }
}
