//! Counters and events of one owner ([`crate::Locks`]): what its heartbeat
//! engine and its holds did, for operators ([`Locks::stats`]) and for hooks
//! ([`Locks::on_event`]).
//!
//! Counters are relaxed atomics bumped where the work happens (a hold is
//! made or released on the caller's thread; renewals, beats, losses and
//! stop flags on the engine's threads). The beat round-trip times live in a
//! fixed ring of [`RTT_WINDOW`] atomics, so recording one costs two atomic
//! stores; percentiles are computed when a snapshot is taken. Plain
//! `acquire`/`release` (no hold) are not counted: their hot path stays as
//! it was.
//!
//! Events ([`EventKind`], names are the contract in every face):
//! - `acquired`: a hold took its lease (`hold` returned one);
//! - `refused`: a hold's acquire found the lease held elsewhere (`hold`
//!   returned none); `fence` is 0;
//! - `at_risk`: a renewal attempt failed (an error or no answer; it is
//!   retried every tick) and it is the first failure since the last
//!   confirmed renewal: unless a retry is confirmed before the safe
//!   deadline, the hold will be lost. `reason` is the error;
//! - `renewed_late`: a renewal was confirmed after one or more failed
//!   attempts (that is, after an `at_risk`); the hold is safe again;
//! - `lost`: the hold is lost; `cause` says why ([`LostCause`]: `not_held`,
//!   `too_late`, `deadline`) and `reason` is the reason its signal was
//!   tripped with;
//! - `stopped`: the hold's stop flag was seen raised (by a poll or a push);
//!   `reason` is the signal's reason;
//! - `released`: the hold left the engine by `release` (or drop, or a
//!   background release) before being lost; the delete follows.
//!
//! Delivery: hooks never run on a heartbeat thread, nor under any library
//! lock. Engine events are queued in [`Stats`] under its own leaf lock
//! (taken under the engine's state lock, never the other way round) and
//! handed to the notifier thread ([`crate::signal::notify`], `mistri-notifier`)
//! once the engine lets go of its lock; events of the caller's own thread
//! (`acquired`, `refused`, `released`) go to the notifier too, so every hook
//! of every face runs there (Python and Ruby forward from there to their
//! host thread, [`crate::signal::delivery`]). Events of one owner arrive in the
//! order they happened. Lock order: the engine's state lock, then the
//! pending-events lock, then the notifier's queue lock; the hooks lock is
//! a leaf. A hook removed with [`Locks::remove_event_hook`]
//! gets nothing after the removal returns (other than a call already
//! running). A panicking hook is caught.

pub use crate::signal::event::{Event, EventKind, LostCause};
use parking_lot::Mutex;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many recent beat round trips the p50/p99 are computed over.
pub const RTT_WINDOW: usize = 128;

/// Identifies a hook registered with [`Locks::on_event`], to remove it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventHookHandle(u64);

impl EventHookHandle {
    /// The handle as a number, for faces.
    pub fn as_u64(self) -> u64 {
        self.0
    }
    /// Rebuilds a handle from [`EventHookHandle::as_u64`].
    pub fn from_u64(n: u64) -> Self {
        EventHookHandle(n)
    }
}

type Hook = Arc<dyn Fn(&Event) + Send + Sync>;

/// A snapshot of one owner's counters ([`Locks::stats`]). Counts are since
/// the owner was made.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Holds being renewed now.
    pub holds_active: u64,
    /// Holds made (`acquired` events).
    pub holds_acquired: u64,
    /// Holds refused because the lease was held elsewhere.
    pub holds_refused: u64,
    /// Holds released before being lost.
    pub holds_released: u64,
    /// Renewals handed to the backend.
    pub renewals_sent: u64,
    /// Renewals confirmed.
    pub renewals_confirmed: u64,
    /// Renewal attempts that failed (error or no answer) and were retried.
    pub renewals_failed: u64,
    /// Renewals confirmed after failed attempts (`renewed_late` events).
    pub renewals_late: u64,
    /// Batches (renewals and stop-flag reads) sent to the backend.
    pub beats: u64,
    /// Batches that failed as a whole.
    pub beats_failed: u64,
    /// Median round trip of the last [`RTT_WINDOW`] beats; `None` before the first.
    pub beat_rtt_p50: Option<Duration>,
    /// 99th percentile of the same window.
    pub beat_rtt_p99: Option<Duration>,
    /// Holds lost because a renewal found the lease gone or taken.
    pub lost_not_held: u64,
    /// Holds lost because a renewal arrived with too little life left.
    pub lost_too_late: u64,
    /// Holds lost because their safe deadline passed.
    pub lost_deadline: u64,
    /// Holds whose renewals `max_hold` ended (hung-holder guard).
    pub lost_max_hold: u64,
    /// Holds whose work stopped calling `touch` (hung-holder guard).
    pub lost_stalled: u64,
    /// Stop flags seen raised (holds stopped).
    pub stop_flags_seen: u64,
    /// Stop-flag pushes received from the adapter's listener.
    pub pushes_received: u64,
    /// Run-time settings checks ([`crate::Adapter::check_settings`]: the
    /// Redis memory policy) that could not be made (`INFO` refused, a
    /// reply without a readable policy, no answer); the holds were told
    /// `at_risk`. Not in [`StatsSnapshot::entries`] yet (the C face's
    /// struct lists those).
    pub settings_checks_failed: u64,
    /// The smallest margin a confirmed renewal had left to its hold's safe
    /// deadline, over the last minute ([`MARGIN_BUCKET`]: the current and
    /// the previous 30 s); `None` without a confirmed renewal then. Near
    /// zero: a hold came close to being lost by deadline.
    pub safe_margin_min: Option<Duration>,
}

/// One named value of a [`StatsSnapshot`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StatValue {
    /// A count.
    Count(u64),
    /// Seconds; `None` when there is no sample yet.
    Seconds(Option<f64>),
}

impl StatsSnapshot {
    /// Every field by its name in every face, in a stable order (a Python
    /// dict, a Ruby Hash, the C getter by name all come from here).
    pub fn entries(&self) -> Vec<(&'static str, StatValue)> {
        use StatValue::{Count, Seconds};
        let secs = |d: Option<Duration>| Seconds(d.map(|d| d.as_secs_f64()));
        vec![
            ("holds_active", Count(self.holds_active)),
            ("holds_acquired", Count(self.holds_acquired)),
            ("holds_refused", Count(self.holds_refused)),
            ("holds_released", Count(self.holds_released)),
            ("renewals_sent", Count(self.renewals_sent)),
            ("renewals_confirmed", Count(self.renewals_confirmed)),
            ("renewals_failed", Count(self.renewals_failed)),
            ("renewals_late", Count(self.renewals_late)),
            ("beats", Count(self.beats)),
            ("beats_failed", Count(self.beats_failed)),
            ("beat_rtt_p50", secs(self.beat_rtt_p50)),
            ("beat_rtt_p99", secs(self.beat_rtt_p99)),
            ("lost_not_held", Count(self.lost_not_held)),
            ("lost_too_late", Count(self.lost_too_late)),
            ("lost_deadline", Count(self.lost_deadline)),
            ("lost_max_hold", Count(self.lost_max_hold)),
            ("lost_stalled", Count(self.lost_stalled)),
            ("stop_flags_seen", Count(self.stop_flags_seen)),
            ("pushes_received", Count(self.pushes_received)),
            ("safe_margin_min", secs(self.safe_margin_min)),
            ("settings_checks_failed", Count(self.settings_checks_failed)),
        ]
    }

    /// The field named `name` ([`StatsSnapshot::entries`]).
    pub fn get(&self, name: &str) -> Option<StatValue> {
        self.entries()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }
}

/// The live counters and hooks of one owner.
pub(crate) struct Stats {
    pub(crate) holds_acquired: AtomicU64,
    pub(crate) holds_refused: AtomicU64,
    pub(crate) holds_released: AtomicU64,
    pub(crate) renewals_sent: AtomicU64,
    pub(crate) renewals_confirmed: AtomicU64,
    pub(crate) renewals_failed: AtomicU64,
    pub(crate) renewals_late: AtomicU64,
    pub(crate) beats: AtomicU64,
    pub(crate) beats_failed: AtomicU64,
    pub(crate) lost_not_held: AtomicU64,
    pub(crate) lost_too_late: AtomicU64,
    pub(crate) lost_deadline: AtomicU64,
    pub(crate) lost_max_hold: AtomicU64,
    pub(crate) lost_stalled: AtomicU64,
    pub(crate) stop_flags_seen: AtomicU64,
    pub(crate) pushes_received: AtomicU64,
    pub(crate) settings_checks_failed: AtomicU64,
    rtt_nanos: [AtomicU64; RTT_WINDOW],
    rtt_count: AtomicU64,
    /// The smallest safe-deadline margins of the last two buckets.
    margins: Margins,
    has_hooks: AtomicBool,
    hooks: Mutex<Vec<(u64, Hook)>>,
    /// Engine events waiting for [`Stats::flush`] (a leaf lock).
    pending: Mutex<Vec<Event>>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            holds_acquired: AtomicU64::new(0),
            holds_refused: AtomicU64::new(0),
            holds_released: AtomicU64::new(0),
            renewals_sent: AtomicU64::new(0),
            renewals_confirmed: AtomicU64::new(0),
            renewals_failed: AtomicU64::new(0),
            renewals_late: AtomicU64::new(0),
            beats: AtomicU64::new(0),
            beats_failed: AtomicU64::new(0),
            lost_not_held: AtomicU64::new(0),
            lost_too_late: AtomicU64::new(0),
            lost_deadline: AtomicU64::new(0),
            lost_max_hold: AtomicU64::new(0),
            lost_stalled: AtomicU64::new(0),
            stop_flags_seen: AtomicU64::new(0),
            pushes_received: AtomicU64::new(0),
            settings_checks_failed: AtomicU64::new(0),
            rtt_nanos: std::array::from_fn(|_| AtomicU64::new(0)),
            rtt_count: AtomicU64::new(0),
            margins: Margins::default(),
            has_hooks: AtomicBool::new(false),
            hooks: Mutex::new(Vec::new()),
            pending: Mutex::new(Vec::new()),
        }
    }
}

/// The width of one bucket of [`StatsSnapshot::safe_margin_min`]: the
/// minimum is kept per bucket, and a snapshot reads the current and the
/// previous one (so "the last minute" covers 30 to 60 s, at the cost of
/// two numbers, not a sample per renewal).
pub const MARGIN_BUCKET: Duration = Duration::from_secs(30);

/// The per-bucket minima of the safe-deadline margin ([`MARGIN_BUCKET`]):
/// two atomics, one per bucket parity, each `(bucket + 1) << 32 | ms`
/// (0: never written). Lock-free, so a fork can't leave it locked, and a
/// snapshot only reads. Writers are the owner's engine (one at a time,
/// under its state lock); a compare-and-swap keeps a second one correct.
#[derive(Default)]
struct Margins {
    slots: [AtomicU64; 2],
}

/// The [`MARGIN_BUCKET`] `at` falls in, counted from the first use.
fn margin_bucket(at: Instant) -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    (at.saturating_duration_since(start).as_nanos() / MARGIN_BUCKET.as_nanos()) as u64
}

impl Margins {
    /// Keeps `left` (whole ms, at most `u32::MAX`) if it is the smallest
    /// of `bucket`.
    fn record(&self, left: Duration, bucket: u64) {
        let ms = u64::try_from(left.as_millis())
            .unwrap_or(u64::MAX)
            .min(u64::from(u32::MAX));
        let tag = (bucket + 1) << 32;
        let slot = &self.slots[(bucket % 2) as usize];
        let mut seen = slot.load(Ordering::Relaxed);
        loop {
            let want = if seen >> 32 == bucket + 1 {
                tag | (seen & 0xffff_ffff).min(ms)
            } else if seen >> 32 > bucket + 1 {
                return; // a later bucket is there already
            } else {
                tag | ms
            };
            if want == seen {
                return;
            }
            match slot.compare_exchange_weak(seen, want, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => seen = now,
            }
        }
    }

    /// The smallest margin of `bucket` and the one before it.
    fn last_minute(&self, bucket: u64) -> Option<Duration> {
        self.slots
            .iter()
            .map(|slot| slot.load(Ordering::Relaxed))
            .filter(|v| {
                let b = v >> 32; // the bucket + 1, 0 for never
                b != 0 && (b == bucket + 1 || b == bucket)
            })
            .map(|v| Duration::from_millis(v & 0xffff_ffff))
            .min()
    }
}

/// `counter += n`, relaxed: counters order nothing.
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

fn percentile(sorted: &[u64], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    // Nearest rank.
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(Duration::from_nanos(sorted[rank - 1]))
}

impl Stats {
    /// Records one beat's round trip.
    pub(crate) fn beat(&self, rtt: Duration, ok: bool) {
        bump(&self.beats, 1);
        if !ok {
            bump(&self.beats_failed, 1);
            return;
        }
        let n = self.rtt_count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX);
        self.rtt_nanos[(n % RTT_WINDOW as u64) as usize].store(nanos, Ordering::Relaxed);
    }

    /// Records the margin a renewal confirmed at `at` had left to its
    /// hold's safe deadline ([`StatsSnapshot::safe_margin_min`]).
    pub(crate) fn margin(&self, left: Duration, at: Instant) {
        self.margins.record(left, margin_bucket(at));
    }

    /// Counts a lost hold by its cause.
    pub(crate) fn lost(&self, cause: LostCause) {
        bump(
            match cause {
                LostCause::NotHeld => &self.lost_not_held,
                LostCause::TooLate => &self.lost_too_late,
                LostCause::Deadline => &self.lost_deadline,
                LostCause::MaxHold => &self.lost_max_hold,
                LostCause::Stalled => &self.lost_stalled,
            },
            1,
        );
    }

    /// Are any hooks registered? (Build no event when not.)
    pub(crate) fn wants_events(&self) -> bool {
        self.has_hooks.load(Ordering::Relaxed)
    }

    /// Queues an engine event for the next [`Stats::flush`]. May be called
    /// under the engine's state lock.
    pub(crate) fn emit(&self, event: impl FnOnce() -> Event) {
        if self.wants_events() {
            self.pending.lock().push(event());
        }
    }

    /// Hands the queued events to the notifier thread. Call with no engine
    /// lock held.
    pub(crate) fn flush(self: &Arc<Self>) {
        if !self.wants_events() {
            return;
        }
        // Queued to the notifier under the pending lock, so two threads
        // flushing at once can't swap their batches' order (the notifier's
        // queue lock is a leaf below this one).
        let mut pending = self.pending.lock();
        if pending.is_empty() {
            return;
        }
        let events = std::mem::take(&mut *pending);
        let me = self.clone();
        crate::signal::notify::run_task(move || me.deliver(&events));
    }

    /// Emits an event of the caller's own thread (no lock held).
    pub(crate) fn emit_now(self: &Arc<Self>, event: impl FnOnce() -> Event) {
        if self.wants_events() {
            self.emit(event);
            self.flush();
        }
    }

    /// Runs the hooks registered now (on the notifier thread).
    fn deliver(&self, events: &[Event]) {
        for event in events {
            let hooks: Vec<Hook> = self.hooks.lock().iter().map(|(_, h)| h.clone()).collect();
            for hook in hooks {
                let _ = catch_unwind(AssertUnwindSafe(|| hook(event)));
            }
        }
    }

    pub(crate) fn add_hook(&self, hook: Hook) -> EventHookHandle {
        // Unique in the process: a handle given to the wrong owner removes nothing.
        static NEXT_HOOK: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_HOOK.fetch_add(1, Ordering::Relaxed);
        let mut hooks = self.hooks.lock();
        hooks.push((id, hook));
        self.has_hooks.store(true, Ordering::Relaxed);
        EventHookHandle(id)
    }

    pub(crate) fn remove_hook(&self, handle: EventHookHandle) -> bool {
        let removed = {
            let mut hooks = self.hooks.lock();
            let before = hooks.len();
            hooks.retain(|(id, _)| *id != handle.0);
            self.has_hooks.store(!hooks.is_empty(), Ordering::Relaxed);
            hooks.len() != before
        };
        // The hook (and what it owns: a C finalizer, a face's listener) is
        // dropped here, after the lock is let go.
        removed
    }

    pub(crate) fn snapshot(&self, holds_active: usize) -> StatsSnapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let n = (load(&self.rtt_count) as usize).min(RTT_WINDOW);
        let mut rtts: Vec<u64> = self.rtt_nanos[..n].iter().map(load).collect();
        rtts.sort_unstable();
        StatsSnapshot {
            holds_active: holds_active as u64,
            holds_acquired: load(&self.holds_acquired),
            holds_refused: load(&self.holds_refused),
            holds_released: load(&self.holds_released),
            renewals_sent: load(&self.renewals_sent),
            renewals_confirmed: load(&self.renewals_confirmed),
            renewals_failed: load(&self.renewals_failed),
            renewals_late: load(&self.renewals_late),
            beats: load(&self.beats),
            beats_failed: load(&self.beats_failed),
            beat_rtt_p50: percentile(&rtts, 0.50),
            beat_rtt_p99: percentile(&rtts, 0.99),
            lost_not_held: load(&self.lost_not_held),
            lost_too_late: load(&self.lost_too_late),
            lost_deadline: load(&self.lost_deadline),
            lost_max_hold: load(&self.lost_max_hold),
            lost_stalled: load(&self.lost_stalled),
            stop_flags_seen: load(&self.stop_flags_seen),
            pushes_received: load(&self.pushes_received),
            settings_checks_failed: load(&self.settings_checks_failed),
            safe_margin_min: self.margins.last_minute(margin_bucket(Instant::now())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_over_the_window() {
        let s = Stats::default();
        assert_eq!(s.snapshot(0).beat_rtt_p50, None);
        for ms in 1..=200u64 {
            s.beat(Duration::from_millis(ms), true);
        }
        s.beat(Duration::from_secs(9), false);
        let snap = s.snapshot(0);
        // the window holds 73..=200 ms
        assert_eq!(snap.beat_rtt_p50, Some(Duration::from_millis(136)));
        assert_eq!(snap.beat_rtt_p99, Some(Duration::from_millis(199)));
        assert_eq!((snap.beats, snap.beats_failed), (201, 1));
    }

    #[test]
    fn the_margin_minimum_covers_the_last_two_buckets() {
        let m = Margins::default();
        let ms = Duration::from_millis;
        assert_eq!(m.last_minute(0), None);
        m.record(ms(900), 0);
        m.record(ms(400), 0);
        m.record(ms(700), 0);
        assert_eq!(m.last_minute(0), Some(ms(400)));
        // Next bucket: the previous one's minimum still counts.
        m.record(ms(800), 1);
        assert_eq!(m.last_minute(1), Some(ms(400)));
        // Two buckets on, the 400 ms of bucket 0 is forgotten.
        assert_eq!(m.last_minute(2), Some(ms(800)));
        // A quiet minute: nothing.
        assert_eq!(m.last_minute(4), None);
        m.record(ms(50), 4);
        assert_eq!(m.last_minute(4), Some(ms(50)));
        // A late writer of an older bucket changes nothing.
        m.record(ms(1), 2);
        assert_eq!(m.last_minute(4), Some(ms(50)));
        // Long margins are kept to the millisecond, capped at u32::MAX ms.
        m.record(Duration::from_secs(1 << 40), 5);
        assert_eq!(m.last_minute(5), Some(ms(50)));
        assert_eq!(m.last_minute(6), Some(ms(u64::from(u32::MAX))));
    }
}
