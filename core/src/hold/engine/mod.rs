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
//! after its hold left never finds the hold that reuses the cell); an
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
//! the process subscribes exactly the stop keys its holds watch. A hold
//! whose acquire read its flag ([`Registration::stop_up`]) asks for its
//! key only once it is [`SUBSCRIBE_AFTER`] old (its check timer marks the
//! moment; the scheduler is not woken for it before twice that), so a
//! shorter hold never subscribes; the listener's confirmation read covers
//! what was raised since the acquire. A hold joining a key already asked
//! for reads its flag at once if a push or poll came after its acquire was
//! sent (`last_push`: it was not watching yet), else at its tick. The listener's thread calls in: `raised(key)` (a
//! push: a hint anyone able to publish could send, never a verdict) makes
//! the reads of the holds watching `key` due now, and only a flag that read
//! finds raised trips them; `poll_flag(key)` (its subscription just became live) makes that key's
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
//! Clocks ([`clocks`]): the scheduler reads `CLOCK_BOOTTIME −
//! CLOCK_MONOTONIC` at every wake (at least once per [`MAX_TICK`] while it
//! has holds) and moves every safe deadline earlier by a host suspend
//! (past ones are lost at once, their reason naming the suspend); the I/O
//! thread hands each beat's server clock ([`Beat::server_clock`]) to a
//! detector that tells `at_risk` the holds whose margin a jump ahead
//! exceeds.
//!
//! Settings: an adapter with [`Adapter::settings_check_every`] (Redis: the
//! memory policy) gets one [`Adapter::check_settings`] per period from the
//! I/O thread while the engine has holds (after a beat, bounded like one);
//! a risk found is told to every hold once (`at_risk`), and to each new
//! hold while it stands. A check that fails (an error: the settings could
//! not be read) is counted (`settings_checks_failed`) and stands as a risk
//! of its own until a check finds them safe: fail closed.
//!
//! Wakes: the scheduler records under the state lock when it plans to wake
//! ([`state::Sleep`]: awake, until an instant, or until notified) and
//! sleeps on the condvar in the same critical section. Who changes the
//! schedule notifies it only when the new work is due before that planned
//! wake (or it waits with no plan): a [`Engine::register`] whose entry's
//! earliest timer (or a tick from now, the clocks' reading) comes first,
//! a push making reads due now, the I/O thread at the end of each batch
//! (renewals and reads are not planned while one is in flight), queued
//! deletes and settings verdicts. [`Engine::unregister`] never notifies:
//! the scheduler wakes at its planned time, finds the entry gone and plans
//! again. A change made while the scheduler is awake (mid-batch, tripping
//! signals) is seen when it plans under the lock. A short hold thus wakes
//! no engine thread, where each register and unregister used to. While
//! holds whose subscription waits ([`SUBSCRIBE_AFTER`]) keep coming, the
//! scheduler plans its wakes at most `SUBSCRIBE_AFTER` ahead (until
//! `2 × SUBSCRIBE_AFTER` after the last of them), so a stream of short
//! jobs costs one scheduler wake per `SUBSCRIBE_AFTER`, not two per job.
//!
//! Both threads exit after [`IDLE_EXIT`] with nothing to do and are started
//! again by the next registration.

mod clocks;
#[cfg(all(test, loom))]
mod loom_models;
mod slab;
mod state;
mod status;
#[cfg(test)]
mod tests;
mod threads;
mod timers;

pub(crate) use state::Unregistered;
pub use status::{default_margin, MAX_TICK, MIN_HEARTBEAT, SUBSCRIBE_AFTER};
pub(crate) use status::{HoldStatus, Registration};

#[cfg(doc)]
use crate::contract::adapter::Beat;
use crate::contract::adapter::{Adapter, Lease};
use crate::contract::push::FlagWatcher;
use crate::error::Result;
use crate::runtime::fork::ForkLocal;
use crate::stats::Stats;
use slab::Entry;
use slab::Guard;
use slab::NOWHERE;
use state::Shared;
use status::instant;
use status::intervals;
use status::ms;
use status::ns;
use std::sync::Arc;
use threads::ensure_threads;
use timers::Kind;
/// A handle to one engine. Cloning shares it.
#[derive(Clone)]
pub(crate) struct Engine {
    pub(crate) shared: Arc<ForkLocal<Arc<Shared>>>,
    pub(crate) adapter: Arc<dyn Adapter>,
    pub(crate) stats: Arc<Stats>,
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

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        self.shared.get()
    }

    /// Adds a hold; starts the heartbeat threads if they are not running.
    ///
    /// # Errors
    /// [`Error::System`] if a thread cannot be started.
    pub(crate) fn register(&self, mut reg: Registration) -> Result<u64> {
        // A flag the acquire found up: the hold is stopped at once, with
        // no read of its own and no watch (as a read that finds it up).
        let raised = match reg.stop_up {
            Some(true) => reg.stop_key.take(),
            _ => None,
        };
        let (signal, status) = (reg.signal.clone(), reg.status.clone());
        let id = self.insert(reg)?;
        if let Some(key) = raised {
            let reason = format!("stop flag {key:?} raised");
            state::stopped(&self.stats, &status, &reason);
            state::trip_all(vec![(signal, reason)]);
            self.stats.flush();
        }
        Ok(id)
    }

    /// [`Engine::register`]'s entry, its timers and its watch.
    fn insert(&self, reg: Registration) -> Result<u64> {
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
            // Read the stop flag right away (it may be up already), unless
            // the acquire's round trip read it ([`Registration::stop_up`]).
            next_check: match reg.stop_up {
                Some(false) => ms(reg.confirmed + tick),
                _ => ms(reg.confirmed),
            },
            recheck: false,
            in_flight: false,
            subscribe_pending: false,
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
                    for (key, w) in &state.watching {
                        if w.subscribed {
                            watch.watch_flag(key);
                        }
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
        // When its key is asked of the listener (module header, "Push"):
        // at once unless the acquire read the flag; else, unless the key
        // is asked for already, once the hold is SUBSCRIBE_AFTER old (its
        // check timer marks the moment; a hold that ends before never
        // subscribes).
        let mut check_due = entry.next_check;
        let subscribe_now = match (&watches, reg.stop_up) {
            (Some(key), Some(false)) => {
                if state.subscribed(key) {
                    // A push or poll since the acquire was sent may have
                    // passed this hold by (it was not watching yet).
                    if state.last_push.is_some_and(|at| at >= reg.sent) {
                        entry.next_check = ms(reg.confirmed);
                        check_due = entry.next_check;
                    }
                } else {
                    entry.subscribe_pending = true;
                    entry.next_check = ms(reg.confirmed + SUBSCRIBE_AFTER);
                    // The scheduler is not woken for it before the next
                    // SUBSCRIBE_AFTER: any wake meanwhile takes it.
                    check_due = ms(reg.confirmed + 2 * SUBSCRIBE_AFTER);
                    state.churn_until = Some(reg.confirmed + 2 * SUBSCRIBE_AFTER);
                }
                false
            }
            _ => true,
        };
        if let Some(risk) = &state.settings_risk {
            // A settings check found a risk that still stands.
            state::tell_at_risk(&state.stats, &entry, risk);
        }
        if let (Some(every), None) = (shared.settings_every, state.settings_due) {
            state.settings_due = Some(ms(std::time::Instant::now() + every));
        }
        // The earliest work of the new entry the scheduler acts on: its
        // renewals and reads wait while a batch is in flight (the I/O
        // thread wakes the scheduler when it is done), its deadline never.
        let mut due = entry.safe_deadline;
        if !state.io_busy {
            due = due.min(entry.next_renew);
            if watches.is_some() {
                due = due.min(check_due);
            }
            if let Some(at) = state.settings_due {
                due = due.min(at);
            }
        }
        // Clocks are read at least once a tick while there are holds.
        let due = instant(due).min(std::time::Instant::now() + MAX_TICK);
        let id = state.entries.insert(entry);
        state.arm(Kind::Renew, id);
        state.arm(Kind::Deadline, id);
        if let Some(key) = watches {
            state.arm(Kind::Check, id);
            state.watch_key(key, id, subscribe_now);
        }
        if state.must_wake_for(due) {
            shared.wake.notify_one();
        }
        Ok(id)
    }

    /// Takes a hold out. Returns at once: from now on no batch touches the
    /// entry, and no renewal of it can outlive the holder's delete (see the
    /// module header).
    pub(crate) fn unregister(&self, id: u64) -> Unregistered {
        let shared = self.shared();
        let mut state = shared.state.lock();
        // No notify: the scheduler wakes at its planned time, finds the
        // entry gone and plans again (module header, "Wakes").
        match state.remove_entry(id) {
            Some(_) => Unregistered::Removed,
            None => Unregistered::Gone,
        }
    }

    /// Deletes `lease` on the I/O thread, soon; for holds dropped where no
    /// I/O may happen (a Ruby GC free function). If no thread can be
    /// started, the lease is left to expire at its ttl.
    /// `until`: the instant past which the delete is not worth waiting for
    /// ([`HoldStatus::delete_by`]).
    pub(crate) fn delete_later(&self, lease: Lease, until: std::time::Instant) {
        let shared = self.shared();
        let mut state = shared.state.lock();
        if ensure_threads(shared, &mut state).is_ok() {
            state.deletes.push((lease, until));
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
