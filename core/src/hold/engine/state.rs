//! The engine's state under its one lock, and what the threads share.

use super::clocks::{ClockReading, ServerClock, SuspendWatch};
use super::slab::index_of;
use super::slab::Entry;
use super::slab::Slab;
use super::status::dur;
use super::status::instant;
use super::status::ms;
use super::status::HoldStatus;
use super::status::Ms;
use super::timers::Kind;
use super::timers::Schedule;
use crate::contract::adapter::{Adapter, Lease};
use crate::contract::push::{FlagWatch, FlagWatcher};
use crate::runtime::sync::{Condvar, Mutex};
use crate::signal::AbortSignal;
use crate::stats::{bump, Event, EventKind, LostCause, Stats};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A batch for the I/O thread.
#[derive(Default)]
pub(crate) struct Job {
    pub(crate) renew_ids: Vec<u64>,
    pub(crate) renewals: Vec<(Arc<HoldStatus>, Duration, Duration)>,
    pub(crate) check_ids: Vec<u64>,
    pub(crate) checks: Vec<Arc<str>>,
    /// Leases to delete, each with the latest instant it can be alive.
    pub(crate) deletes: Vec<(Lease, Instant)>,
    pub(crate) deadline: Option<Instant>,
    /// When the scheduler collected it: the next renewals and reads of its
    /// holds are due an interval after this (not after the send, which
    /// comes a little later: holds would drift a little each round, and
    /// two batches half an interval apart would never merge).
    pub(crate) collected: Option<Instant>,
    /// Read the backend's settings after the beat ([`Adapter::check_settings`]).
    pub(crate) check_settings: bool,
    /// [`super::clocks::suspended_ns`] just before the beat was sent (`None`: not sent).
    pub(crate) offset_sent: Option<u64>,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) entries: Slab,
    pub(crate) scheduler_running: bool,
    pub(crate) io_running: bool,
    /// A job is with the I/O thread (waiting or running).
    pub(crate) io_busy: bool,
    pub(crate) job: Option<Job>,
    /// Entries lost by deadline while a renewal of theirs was in flight.
    pub(crate) orphans: rustc_hash::FxHashSet<u64>,
    /// Leases to delete in the background (holds dropped without release),
    /// each with the instant past which the delete is not worth waiting for.
    pub(crate) deletes: Vec<(Lease, Instant)>,
    /// This engine's registration with the adapter's flag listener.
    pub(crate) watch: Option<FlagWatch>,
    /// The owner's counters and event queue ([`crate::stats`]; its locks
    /// are leaves below this state's).
    pub(crate) stats: Arc<Stats>,
    pub(crate) sched: Schedule,
    /// The entries watching each stop key (so a push finds them without a
    /// scan of every hold), and whether the listener was asked for it.
    pub(crate) watching: HashMap<Arc<str>, Watchers>,
    /// When a push or a poll of the listener last made reads due
    /// ([`Shared::read_now`]): a hold whose acquire was sent before it may
    /// have missed it (module header, "Push").
    pub(crate) last_push: Option<Instant>,
    /// When the backend's settings are read next (while there are holds
    /// and the adapter asks for it: [`Adapter::settings_check_every`]).
    pub(crate) settings_due: Option<Ms>,
    /// What the last settings check found wrong: every hold was told
    /// (`at_risk`), and so is each new one while it stands.
    pub(crate) settings_risk: Option<Arc<str>>,
    /// The host's suspended time the deadlines account for
    /// ([`super::clocks`]).
    pub(crate) suspend: SuspendWatch,
    /// The server's clock as the beats saw it ([`super::clocks`]).
    pub(crate) server_clock: ServerClock,
    /// What the scheduler is doing ([`Sleep`]): who changes the schedule
    /// notifies it only when it would otherwise wake too late.
    pub(crate) sleep: Sleep,
    /// How many times the scheduler's wait returned (for tests).
    pub(crate) scheduler_wakes: u64,
    /// Until when the scheduler plans a wake at most
    /// [`super::SUBSCRIBE_AFTER`] ahead: holds whose subscription waits
    /// keep coming (a stream of short jobs), so each one's register finds
    /// a wake planned in time and needs no notify (module header,
    /// "Wakes").
    pub(crate) churn_until: Option<Instant>,
}

/// The entries that watch one stop key.
#[derive(Default)]
pub(crate) struct Watchers {
    pub(crate) ids: rustc_hash::FxHashSet<u64>,
    /// The listener was asked for the key ([`FlagWatch::watch_flag`]):
    /// once the oldest watcher is [`super::SUBSCRIBE_AFTER`] old, or at
    /// once for a hold whose acquire did not read its flag.
    pub(crate) subscribed: bool,
}

/// The scheduler's plan, recorded under the state lock (module header,
/// "Wakes").
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) enum Sleep {
    /// Awake (or not started): it looks at the state under the lock before
    /// it sleeps again, so a change made meanwhile needs no notify.
    #[default]
    Awake,
    /// Waiting until this instant (or a notify).
    Until(Instant),
    /// Waiting for a notify, with no planned wake.
    Forever,
}

impl State {
    /// Whether work due at `due` needs the scheduler woken: it is waiting
    /// and plans to wake later than that (or not at all). A scheduler that
    /// is awake re-plans under the lock before it waits again.
    pub(crate) fn must_wake_for(&self, due: Instant) -> bool {
        match self.sleep {
            Sleep::Awake => false,
            Sleep::Until(at) => due < at,
            Sleep::Forever => true,
        }
    }

    /// `id` no longer watches `key`.
    pub(crate) fn unwatch(&mut self, key: &str, id: u64) {
        if let Some(w) = self.watching.get_mut(key) {
            w.ids.remove(&id);
            if w.ids.is_empty() {
                let subscribed = w.subscribed;
                self.watching.remove(key);
                if let (true, Some(watch)) = (subscribed, &self.watch) {
                    watch.unwatch_flag(key);
                }
            }
        }
    }

    /// `id` watches `key`; `subscribe`: ask the listener for it now (the
    /// listener subscribes a key's channel while it is asked for:
    /// crate::contract::push), else [`State::subscribe`] does later.
    pub(crate) fn watch_key(&mut self, key: Arc<str>, id: u64, subscribe: bool) {
        self.watching.entry(key.clone()).or_default().ids.insert(id);
        if subscribe {
            self.subscribe(&key);
        }
    }

    /// Asks the listener for `key` (once while anyone watches it).
    pub(crate) fn subscribe(&mut self, key: &str) {
        if let Some(w) = self.watching.get_mut(key) {
            if !w.subscribed {
                w.subscribed = true;
                if let Some(watch) = &self.watch {
                    watch.watch_flag(key);
                }
            }
        }
    }

    /// Whether the listener was asked for `key`.
    pub(crate) fn subscribed(&self, key: &str) -> bool {
        self.watching.get(key).is_some_and(|w| w.subscribed)
    }

    /// (Re)arms timer `kind` of entry `id` at its entry's time.
    pub(crate) fn arm(&mut self, kind: Kind, id: u64) {
        self.sched.of(kind).arm(&mut self.entries, index_of(id));
    }

    /// Moves timer `kind` of entry `id` to `at` (out of the queue at its
    /// old time first: a queue finds an entry by its time).
    pub(crate) fn schedule(&mut self, kind: Kind, id: u64, at: Ms) {
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

    pub(crate) fn disarm(&mut self, kind: Kind, id: u64) {
        self.sched.of(kind).disarm(&mut self.entries, index_of(id));
    }

    /// Removes entry `id` (its timers and its stop-key watch).
    pub(crate) fn remove_entry(&mut self, id: u64) -> Option<Entry> {
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

pub(crate) struct Shared {
    pub(crate) adapter: Arc<dyn Adapter>,
    pub(crate) state: Mutex<State>,
    /// Wakes the scheduler (new entry, batch done, deletes queued).
    pub(crate) wake: Condvar,
    /// Wakes the I/O thread (a job is ready).
    pub(crate) io_wake: Condvar,
    pub(crate) stats: Arc<Stats>,
    /// The adapter's [`Adapter::settings_check_every`].
    pub(crate) settings_every: Option<Duration>,
}

impl Shared {
    pub(crate) fn new(adapter: Arc<dyn Adapter>, stats: Arc<Stats>) -> Arc<Shared> {
        Arc::new(Shared {
            settings_every: adapter.settings_check_every(),
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
    /// A push is a hint, never a verdict: anyone who can publish on the
    /// channel (any Redis client, any Postgres role that can log in) could
    /// send it. It makes the holds watching `key` read the flag now, and
    /// only a raised flag trips them (the poll's path). Costs one round
    /// trip on top of the push.
    fn raised(&self, key: &str) {
        bump(&self.stats.pushes_received, 1);
        self.poll_flag(key);
    }

    fn poll_now(&self) {
        // The stop-key index names exactly the entries that watch a flag.
        self.read_now(|state| {
            state
                .watching
                .values()
                .flat_map(|w| w.ids.iter().copied())
                .collect()
        });
    }

    fn poll_flag(&self, key: &str) {
        self.read_now(|state| {
            state
                .watching
                .get(key)
                .map(|w| w.ids.iter().copied().collect())
                .unwrap_or_default()
        });
    }
}

impl Shared {
    /// Makes the flag reads of the entries `which` picks due now (read
    /// again if one is in flight) and wakes the scheduler.
    pub(crate) fn read_now(&self, which: impl FnOnce(&State) -> Vec<u64>) {
        let mut state = self.state.lock();
        state.last_push = Some(Instant::now());
        let now = ms(Instant::now());
        let ids = which(&state);
        for &id in &ids {
            if let Some(e) = state.entries.get_mut(id) {
                e.recheck = true;
            }
            state.schedule(Kind::Check, id, now);
        }
        // A batch in flight: the I/O thread wakes the scheduler when done.
        if !ids.is_empty() && !state.io_busy && state.must_wake_for(instant(now)) {
            self.wake.notify_one();
        }
    }
}

/// Counts a stop flag seen for a hold and queues its `stopped` event.
pub(crate) fn stopped(stats: &Stats, status: &HoldStatus, reason: &str) {
    status.mark_stopped();
    bump(&stats.stop_flags_seen, 1);
    stats.emit(|| Event {
        reason: Some(reason.to_owned()),
        ..Event::new(EventKind::Stopped, status.lease.key(), status.lease.fence())
    });
}

/// Counts a lost hold and queues its `lost` event.
pub(crate) fn lost_hold(stats: &Stats, e: &Entry, cause: LostCause, reason: &str) {
    e.status.mark_lost(cause);
    stats.lost(cause);
    stats.emit(|| Event {
        reason: Some(reason.to_owned()),
        cause: Some(cause),
        ..Event::new(EventKind::Lost, e.lease().key(), e.lease().fence())
    });
}

/// Counts a failed renewal attempt; the first since the last confirmed
/// renewal (`e.last_error` still empty) queues `at_risk`.
pub(crate) fn renewal_failed(stats: &Stats, e: &Entry, error: &str) {
    bump(&stats.renewals_failed, 1);
    if e.last_error.is_none() {
        stats.emit(|| Event {
            reason: Some(error.to_owned()),
            ..Event::new(EventKind::AtRisk, e.lease().key(), e.lease().fence())
        });
    }
}

/// Queues `at_risk` for `e` with `risk` as its reason: the backend's
/// settings may break its promise ([`Adapter::check_settings`]), or the
/// host was suspended ([`State::suspended`]).
pub(crate) fn tell_at_risk(stats: &Stats, e: &Entry, risk: &str) {
    stats.emit(|| Event {
        reason: Some(risk.to_owned()),
        ..Event::new(EventKind::AtRisk, e.lease().key(), e.lease().fence())
    });
}

impl State {
    /// Applies a settings check's verdict: a risk found while none stood
    /// is told to every hold (once per risk episode, not once per check,
    /// and not again when only its wording changes: a check on a pooled
    /// connection words it from `INFO memory`, one that had to open a
    /// connection from the connect-time refusal; a clean-clone run under
    /// load told a hold twice that way); none clears it. A check that
    /// failed (the adapter's error: `INFO` refused, a policy it could not
    /// read, no answer) fails closed: it is counted
    /// (`settings_checks_failed`) and stands as a risk of its own, told
    /// like one (once to every hold while no risk stands, and to each new
    /// hold), until a check finds the settings safe (issue 39, finding 5;
    /// before, an error silently kept the last verdict). The next check
    /// is due `every` after `now` while there are holds.
    pub(crate) fn settings_checked(
        &mut self,
        verdict: crate::error::Result<Option<String>>,
        now: Instant,
        every: Duration,
    ) {
        self.settings_due = (self.entries.len > 0).then(|| ms(now + every));
        match verdict {
            Ok(Some(risk)) => {
                if self.settings_risk.is_none() {
                    for e in self.entries.iter() {
                        tell_at_risk(&self.stats, e, &risk);
                    }
                }
                self.settings_risk = Some(risk.into());
            }
            Ok(None) => self.settings_risk = None,
            Err(e) => {
                bump(&self.stats.settings_checks_failed, 1);
                if self.settings_risk.is_none() {
                    let risk = format!("the settings check failed: {e}");
                    for e in self.entries.iter() {
                        tell_at_risk(&self.stats, e, &risk);
                    }
                    self.settings_risk = Some(risk.into());
                }
            }
        }
    }
}

impl State {
    /// The host was suspended for `grew` (seen at schedule time `now`):
    /// every safe deadline moves that much earlier ([`super::clocks`]). A
    /// hold whose deadline is then past is lost by [`super::threads::expire`]
    /// with a reason naming the suspend; one whose deadline moved by its
    /// safety margin or more is told `at_risk`.
    pub(crate) fn suspended(&mut self, grew: Duration, now: Ms) {
        let by = u64::try_from(grew.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
        let what = format!(
            "the host was suspended for {:.3} s (CLOCK_BOOTTIME ran ahead of the monotonic \
             clock): the lease ends that much sooner than the engine's clock said",
            grew.as_secs_f64()
        );
        let holds: Vec<(u64, Ms, u64)> = self
            .entries
            .iter_ids()
            .map(|(id, e)| (id, e.safe_deadline, e.margin))
            .collect();
        for (id, deadline, margin) in holds {
            let at = deadline.saturating_sub(by);
            self.schedule(Kind::Deadline, id, at);
            let Some(e) = self.entries.get_mut(id) else {
                continue;
            };
            if at <= now {
                e.last_error = Some(what.clone().into());
            } else if grew >= dur(margin) {
                tell_at_risk(&self.stats, e, &what);
            }
        }
    }
}

impl State {
    /// A beat's reading of the server's clock: a jump ahead by more than a
    /// hold's safety margin tells it `at_risk` (the server expires its
    /// lease that much early). A step back only makes leases outlive their
    /// holders' count: nobody is told.
    pub(crate) fn server_clock_read(&mut self, reading: ClockReading) {
        let Some(step) = self.server_clock.observe(reading) else {
            return;
        };
        let Ok(ahead) = u64::try_from(step) else {
            return;
        };
        let what = format!(
            "the server's clock jumped ahead by {:.3} s against this host's clock: leases on it \
             may expire up to that much early (a clock step, or a promoted replica whose clock \
             is ahead)",
            dur(ahead).as_secs_f64()
        );
        for e in self.entries.iter() {
            if ahead > e.margin {
                tell_at_risk(&self.stats, e, &what);
            }
        }
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

pub(crate) type Trips = Vec<(AbortSignal, String)>;

pub(crate) fn trip_all(trips: Trips) {
    for (signal, reason) in trips {
        if let Some(pending) = signal.trip(Some(&reason)) {
            crate::signal::notify::run_later(pending);
        }
    }
}
