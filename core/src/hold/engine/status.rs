//! What a hold registers with the engine ([`Registration`]), the status
//! it shares with it ([`HoldStatus`]), the engine's constants and its
//! clock (schedule milliseconds since one epoch).

use crate::contract::adapter::Lease;
use crate::signal::event::LostCause;
use crate::signal::AbortSignal;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Upper bound of the stop-flag tick.
pub const MAX_TICK: Duration = Duration::from_secs(1);
/// How old a hold whose acquire read its stop flag
/// ([`crate::Adapter::acquire_reading_flag`]) is before its stop key is
/// asked of the push listener (the scheduler asks between this and twice
/// this): a hold shorter than that never subscribes, and a stop raised in
/// its first moments is heard once the subscription is confirmed (its
/// read covers the gap), or at the tick poll (docs/RELIABILITY.md, the
/// stop-latency promise). 5 ms: short against the listener's own
/// subscribe time, long enough that a stream of short jobs (about one per
/// millisecond on one Sidekiq thread) costs the scheduler one wake per
/// 5 ms instead of two per job (bench_jobs.rb, concurrency 1: 1 ms cost
/// 2.3 context switches per job; 5 ms with the scheduler keeping pace,
/// 0.2: issue 40, item 7).
pub const SUBSCRIBE_AFTER: Duration = Duration::from_millis(5);
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
pub(crate) fn intervals(ttl: Duration, heartbeat: Duration) -> (Duration, Duration) {
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
    /// Why it was lost (`0`: not lost; else 1 + the cause's place in
    /// [`LOST_CAUSES`]), set by the engine with [`HoldStatus::mark_lost`].
    cause: AtomicU8,
    /// The engine tripped the signal because the stop flag was raised.
    stopped: AtomicBool,
    /// When the work last called `touch` (nanoseconds since [`epoch`]).
    touched: AtomicU64,
    /// The latest instant the lease can be alive on the backend as far as
    /// the confirmed answers go (nanoseconds since [`epoch`]): the arrival
    /// of the answer to its last confirmed renewal (or to the acquire) +
    /// ttl. The backend applied that renewal before it answered, so the
    /// lease lapses by then unless a later renewal took ([`HoldStatus::unanswered`]).
    /// The bound of a release ([`crate::Hold::release`]).
    alive_until: AtomicU64,
    /// A renewal was sent after the last confirmed one and no answer came
    /// (it is in flight, or it failed): the backend may have applied it,
    /// so the lease may outlive `alive_until`.
    unanswered: AtomicBool,
}

/// The causes [`HoldStatus`] records, in the order of their codes.
const LOST_CAUSES: [LostCause; 5] = [
    LostCause::NotHeld,
    LostCause::TooLate,
    LostCause::Deadline,
    LostCause::MaxHold,
    LostCause::Stalled,
];

/// A process-wide base for instants stored as numbers (an hour before its
/// first use, so no instant of this process's holds comes before it).
pub(crate) fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(3600)).unwrap_or(now)
    })
}

/// The schedule's clock: whole milliseconds since [`epoch`].
pub(crate) type Ms = u64;

/// `t` in schedule milliseconds, rounded down (a due time or deadline
/// rounded down comes early, never late).
pub(crate) fn ms(t: Instant) -> Ms {
    u64::try_from(t.saturating_duration_since(epoch()).as_millis()).unwrap_or(u64::MAX)
}

/// The instant of schedule millisecond `m`.
pub(crate) fn instant(m: Ms) -> Instant {
    epoch() + Duration::from_millis(m)
}

/// `t` as nanoseconds since [`epoch`].
fn since_epoch(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX)
}

/// `d` in nanoseconds (durations are kept as numbers: 8 bytes, not 16).
pub(crate) fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

pub(crate) fn dur(n: u64) -> Duration {
    Duration::from_nanos(n)
}

impl HoldStatus {
    /// The status of `lease`, whose acquire was answered when it can be
    /// alive until `alive_until` at the latest.
    pub(crate) fn new(lease: Lease, alive_until: Instant) -> Self {
        let status = HoldStatus {
            lease,
            lost: AtomicBool::new(false),
            cause: AtomicU8::new(0),
            stopped: AtomicBool::new(false),
            touched: AtomicU64::new(0),
            alive_until: AtomicU64::new(since_epoch(alive_until)),
            unanswered: AtomicBool::new(false),
        };
        status.touch();
        status
    }

    /// The engine found the hold lost for `cause` (recorded before its
    /// signal trips, so [`crate::Hold::interruption`] never sees a tripped
    /// signal without its cause).
    pub(crate) fn mark_lost(&self, cause: LostCause) {
        let code = LOST_CAUSES
            .iter()
            .position(|c| *c == cause)
            .map_or(0, |i| i + 1);
        let _ = self.cause.compare_exchange(
            0,
            u8::try_from(code).unwrap_or(0),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    /// Why the hold was lost, once the engine said so.
    pub(crate) fn lost_cause(&self) -> Option<LostCause> {
        let code = usize::from(self.cause.load(Ordering::SeqCst));
        code.checked_sub(1)
            .and_then(|i| LOST_CAUSES.get(i).copied())
    }

    /// The engine saw the hold's stop flag raised.
    pub(crate) fn mark_stopped(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Whether the engine saw the hold's stop flag raised.
    pub(crate) fn was_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// A renewal of the lease is being sent.
    pub(crate) fn renewing(&self) {
        self.unanswered.store(true, Ordering::SeqCst);
    }

    /// A renewal was confirmed by an answer that arrived when the lease
    /// could be alive until `until` at the latest (answer time + ttl).
    pub(crate) fn renewed(&self, until: Instant) {
        self.alive_until
            .fetch_max(since_epoch(until), Ordering::SeqCst);
        self.unanswered.store(false, Ordering::SeqCst);
    }

    /// Until when a delete of the lease is worth waiting for, seen at
    /// `now`: the latest instant it can be alive ([`HoldStatus::alive_until`]).
    /// `None` when that has passed and no renewal is unanswered: the lease
    /// has lapsed, nothing is left to delete. Past it with a renewal
    /// unanswered, the lease may have been extended by that renewal: the
    /// adapter's own I/O timeout bounds the delete then (`now` + an hour;
    /// every networked adapter caps it).
    pub(crate) fn delete_by(&self, now: Instant) -> Option<Instant> {
        let (until, unanswered) = self.alive_until();
        if until > now {
            Some(until)
        } else if unanswered {
            Some(now + Duration::from_secs(3600))
        } else {
            None
        }
    }

    /// The latest instant the lease can be alive as the confirmed answers
    /// tell, and whether a renewal since is unanswered (then it may live
    /// longer).
    pub(crate) fn alive_until(&self) -> (Instant, bool) {
        let until = epoch() + Duration::from_nanos(self.alive_until.load(Ordering::SeqCst));
        (until, self.unanswered.load(Ordering::SeqCst))
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
    /// The stop flag as the acquire's own round trip read it
    /// ([`crate::Adapter::acquire_reading_flag`]): up stops the hold at
    /// once, down makes its first read due a tick after the acquire;
    /// `None` (not read): the engine reads it at once.
    pub stop_up: Option<bool>,
    pub signal: AbortSignal,
    /// When the acquire was sent, and when its answer came.
    pub sent: Instant,
    pub confirmed: Instant,
    /// Hung-holder guard: no renewal past this age ([`crate::HoldOptions::max_hold`]).
    pub max_hold: Option<Duration>,
    /// Hung-holder guard, progress mode ([`crate::HoldOptions::progress_timeout`]).
    pub progress_timeout: Option<Duration>,
}
