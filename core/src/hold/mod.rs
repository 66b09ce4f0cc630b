//! [`Hold`]: a lease kept alive by the heartbeat engine while work runs.
//!
//! State machine (one way only):
//!
//! ```text
//!   acquire ──► renewing ──► deleting ──► released   (release() or Drop;
//!                  │             │             also when the lease's end
//!                  │             │             came first: Expired)
//!                  │             │  (the delete failed: release() again
//!                  │             │   retries it; no renewals meanwhile)
//!                  └──────► lost        (a renewal found it gone/taken, or
//!                                        no renewal was confirmed by its
//!                                        safe deadline; the signal is
//!                                        tripped)
//! ```
//!
//! A refused acquire makes no Hold at all (`Ok(None)`), so a refused caller
//! has nothing that could renew or delete the real holder's lease.
//!
//! `release` first takes the hold out of the engine (at once, without
//! waiting for a tick in flight), then compare-and-deletes the lease: a
//! renewal in flight compares the token too, so it either lands before the
//! delete (and is undone) or after (and finds nothing); once `release`
//! returns `Released`, no tick re-stamps the lease.
//!
//! The delete is bounded by the lease's own end as well as by the
//! adapter's I/O timeout ([`crate::Adapter::release_by`]): the engine keeps,
//! in the status it shares with the hold, the latest instant the lease can
//! be alive (the arrival of the answer to its last confirmed renewal, or to
//! the acquire, + ttl: the backend applied that renewal before answering)
//! and whether a renewal sent since is unanswered. A delete unanswered at
//! that instant reports [`ReleaseOutcome::Expired`] (the lease has lapsed),
//! unless a renewal is unanswered (the backend may have applied it: an
//! error, and a retry is bounded by the adapter's timeout). `release_in_background`
//! hands the delete to the engine's I/O thread instead (no I/O on the
//! caller's thread: for garbage collectors).
//!
//! Fork: a Hold copied into a forked child (it is not `Clone`, but `fork`
//! copies memory) neither renews nor releases: the child has no heartbeat
//! thread, and `release` there returns [`ReleaseOutcome::OtherProcess`]
//! without touching the backend. The copy is told: on its first use in the
//! child (`is_lost`, `signal`, `release`, or any use of the signal itself,
//! see [`crate::signal`]) it reports lost and its signal trips with a reason
//! naming the fork. The parent's hold is unaffected.

pub(crate) mod engine;

use crate::args::{check_duration, check_key, fork_generation};
use crate::contract::adapter::Lease;
use crate::contract::info::{default_label, Identity};
use crate::error::{Error, Result};
use crate::hold::engine::{default_margin, Engine, HoldStatus, Registration, Unregistered};
use crate::options::OptionValue;
use crate::signal::AbortSignal;
use crate::stats::{Event, EventKind, LostCause};
use crate::waiting::{waiting_for, Waiting};
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default lease TTL: 180 s.
pub const LEASE_TTL: Duration = Duration::from_secs(180);
/// Default heartbeat: 60 s.
pub const HEARTBEAT: Duration = Duration::from_secs(60);
/// The shortest ttl a hold accepts (a plain `acquire` takes any ttl).
pub const MIN_HOLD_TTL: Duration = Duration::from_millis(10);
/// Default flag TTL: 300 s.
pub const FLAG_TTL: Duration = Duration::from_secs(300);

/// How to hold a lease. `HoldOptions::default()` is the contract's defaults:
/// ttl 180 s, heartbeat 60 s, no stop key, a fresh signal.
#[derive(Debug, Clone)]
pub struct HoldOptions {
    /// Lease TTL: how long the lease outlives its last renewal.
    pub ttl: Duration,
    /// The longest wait between renewals (the engine renews at least every
    /// ttl/3 whatever this says) and, capped at 1 s, the stop-flag tick.
    pub heartbeat: Duration,
    /// A flag that, once raised by anyone, trips the signal within a tick.
    pub stop_key: Option<String>,
    /// The signal to trip on stop or loss; `None` makes a fresh one.
    pub signal: Option<AbortSignal>,
    /// How long before the lease could expire the holder is told it may
    /// have lost it (when no renewal has been confirmed since): the safe
    /// deadline is the send time of the last confirmed renewal + ttl − this.
    /// `None`: [`crate::default_margin`], i.e.
    /// `min(ttl / 4, max(tick + the adapter's I/O timeout, 25 ms))`.
    /// Must be less than half the ttl.
    pub safety_margin: Option<Duration>,
    /// How this holder describes itself to `info` and `list`
    /// ([`crate::contract::info`]); `None`: the label of the [`crate::Locks`] it is
    /// made through, else `host:pid language`.
    pub label: Option<String>,
    /// How long to wait for the lease when it is held elsewhere: `None` (the
    /// default) does not wait (a refusal is `Ok(None)` at once);
    /// `Some(Duration::MAX)` waits without limit. Waiters are woken by the
    /// release or expiry of the lease ([`crate::waiting`]), served
    /// first-come first-served within a process, and stop waiting when the
    /// hold's `signal` is aborted (then `Ok(None)`).
    pub wait: Option<Duration>,
    /// Up to this many holders at once (an N-holder lease, a semaphore):
    /// each has its own owner token, renewal, fence and loss detection, and
    /// a crashed holder's slot frees itself at its ttl. 1 (the default) is
    /// the exclusive lease.
    pub limit: u32,
    /// Hung-holder guard: never renew the lease past this total age (from
    /// the acquire). The last renewal is the last one whose lease ends by
    /// then; the hold is then told (`lease lost: max_hold ...`) at its safe
    /// deadline, before the lease lapses. `None`: no limit.
    pub max_hold: Option<Duration>,
    /// Hung-holder guard, progress mode: the work calls [`Hold::touch`]
    /// at least this often; when no touch came for this long, renewals stop
    /// and the signal trips with a reason saying the work stalled (noticed
    /// at the next renewal or stop-flag tick). `None`: off.
    pub progress_timeout: Option<Duration>,
}

impl Default for HoldOptions {
    fn default() -> Self {
        HoldOptions {
            ttl: LEASE_TTL,
            heartbeat: HEARTBEAT,
            stop_key: None,
            signal: None,
            safety_margin: None,
            label: None,
            wait: None,
            limit: 1,
            max_hold: None,
            progress_timeout: None,
        }
    }
}

impl HoldOptions {
    /// Checks the options: ttl and heartbeat non-zero (and sane), stop key
    /// non-empty if given.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] naming the bad option.
    pub fn validate(&self) -> Result<()> {
        check_duration("ttl", self.ttl)?;
        check_duration("heartbeat", self.heartbeat)?;
        if self.ttl < MIN_HOLD_TTL {
            return Err(Error::InvalidArgument(format!(
                "ttl of a hold must be at least {} s (the heartbeat engine's resolution), got {}",
                MIN_HOLD_TTL.as_secs_f64(),
                self.ttl.as_secs_f64()
            )));
        }
        if let Some(margin) = self.safety_margin {
            check_duration("safety_margin", margin)?;
            if margin >= self.ttl / 2 {
                return Err(Error::InvalidArgument(format!(
                    "safety_margin must be less than half the ttl ({} s), got {}",
                    self.ttl.as_secs_f64() / 2.0,
                    margin.as_secs_f64()
                )));
            }
        }
        if let Some(stop) = &self.stop_key {
            check_key("stop_key", stop)?;
        }
        if let Some(label) = &self.label {
            crate::args::check_label("label", label)?;
        }
        crate::args::check_limit(self.limit)?;
        if let Some(max_hold) = self.max_hold {
            check_duration("max_hold", max_hold)?;
        }
        if let Some(progress) = self.progress_timeout {
            check_duration("progress_timeout", progress)?;
        }
        Ok(())
    }

    /// The names [`HoldOptions::set`] takes (the signal is a host object,
    /// set by each face itself).
    pub const NAMES: [&'static str; 9] = [
        "ttl",
        "heartbeat",
        "stop_key",
        "safety_margin",
        "label",
        "wait",
        "limit",
        "max_hold",
        "progress_timeout",
    ];

    /// Sets option `name` (one of [`HoldOptions::NAMES`]) from a value a
    /// face read by name: seconds as a number (by the core's one rule,
    /// [`crate::duration_from_secs`]; `wait` infinite waits without
    /// limit), keys and labels as text, `limit` as an integer. A
    /// [`OptionValue::None`] leaves the option as it is. Faces pass their
    /// keyword arguments through it and [`HoldOptions::validate`] checks
    /// them together, so every face refuses the same things in the same
    /// words.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`]: an unknown name (naming the
    /// nearest known one) or a value out of range;
    /// [`crate::Error::WrongType`]: a value of the wrong kind.
    pub fn set(&mut self, name: &str, value: OptionValue) -> Result<&mut Self> {
        if value == OptionValue::None {
            if !Self::NAMES.contains(&name) {
                return Err(unknown_option(name));
            }
            return Ok(self);
        }
        let secs = |v: &OptionValue| -> Result<Duration> {
            crate::args::duration_from_secs(name, v.seconds(name)?)
        };
        let text = |v: OptionValue| -> Result<String> {
            match v {
                OptionValue::Text(t) => Ok(t),
                other => Err(Error::WrongType(format!(
                    "{name} must be text, got {other}"
                ))),
            }
        };
        match name {
            "ttl" => self.ttl = secs(&value)?,
            "heartbeat" => self.heartbeat = secs(&value)?,
            "safety_margin" => self.safety_margin = Some(secs(&value)?),
            "max_hold" => self.max_hold = Some(secs(&value)?),
            "progress_timeout" => self.progress_timeout = Some(secs(&value)?),
            "wait" => {
                self.wait = Some(
                    crate::args::wait_timeout_from_secs(name, value.seconds(name)?)?
                        .unwrap_or(Duration::MAX),
                );
            }
            "limit" => {
                let n = value.integer(name)?;
                self.limit = u32::try_from(n).map_err(|_| {
                    Error::InvalidArgument(format!("limit must be an integer >= 1, got {n}"))
                })?;
                crate::args::check_limit(self.limit)?;
            }
            "stop_key" => {
                let key = text(value)?;
                check_key(name, &key)?;
                self.stop_key = Some(key);
            }
            "label" => {
                let label = text(value)?;
                crate::args::check_label(name, &label)?;
                self.label = Some(label);
            }
            _ => return Err(unknown_option(name)),
        }
        Ok(self)
    }

    /// The safety margin this hold will use with `adapter`.
    pub fn margin_for(&self, adapter: &dyn crate::Adapter) -> Duration {
        self.safety_margin
            .unwrap_or_else(|| default_margin(self.ttl, self.heartbeat, adapter.io_timeout()))
    }
}

fn unknown_option(name: &str) -> Error {
    let hint = crate::options::nearest(name, &HoldOptions::NAMES)
        .map(|n| format!("; did you mean {n:?}?"))
        .unwrap_or_default();
    Error::InvalidArgument(format!(
        "unknown hold option {name:?}{hint} (known: {})",
        HoldOptions::NAMES.join(", ")
    ))
}

/// What [`Hold::release`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// The lease was ours and is deleted.
    Released,
    /// The hold was renewing, but the lease had already gone (expired or
    /// taken) by the time of the delete; nothing was deleted.
    NotHeld,
    /// The hold had been lost before; nothing was deleted.
    Lost,
    /// An earlier release already ran.
    AlreadyReleased,
    /// This is a forked child's copy: the parent's lease was left alone.
    OtherProcess,
    /// No answer to the delete came before the lease's end — the arrival
    /// of the answer to its last confirmed renewal (or to the acquire) +
    /// ttl, the latest instant it can be alive on the backend — and no
    /// renewal of it was left unanswered: it has lapsed by expiry (unless
    /// the delete itself took and only its answer was lost). Either way it
    /// is gone, and nothing is left to retry; later calls report
    /// [`ReleaseOutcome::AlreadyReleased`].
    Expired,
}

/// A held lease, renewed in the background until released or lost.
/// Releases on Drop (ignoring errors; call [`Hold::release`] to see them).
///
/// # Examples
/// ```
/// use mistri_locks::{HoldOptions, Locks};
/// use std::time::Duration;
///
/// let locks = Locks::memory();
/// let opts = HoldOptions { ttl: Duration::from_secs(2), heartbeat: Duration::from_millis(200), ..Default::default() };
/// let hold = locks.hold("nightly-report", opts.clone())?.expect("free");
/// assert!(locks.hold("nightly-report", opts)?.is_none()); // refused: held
/// while !hold.signal().is_aborted() {
///     // ... one unit of work ...
///     break;
/// }
/// hold.release()?;
/// # Ok::<(), mistri_locks::Error>(())
/// ```
pub struct Hold {
    engine: Engine,
    id: u64,
    signal: AbortSignal,
    /// The lease (shared with the engine) and whether it is lost.
    status: Arc<HoldStatus>,
    /// The stop flag it watches, named by [`Hold::interruption`].
    stop_key: Option<String>,
    generation: u64,
    release: Mutex<Releasing>,
}

/// Why a hold's work should stop ([`Hold::interruption`]): the one
/// answer every face maps onto its own idiom (Python's and Ruby's
/// `Interrupted`, C's `mistri_hold_interruption`), so none reads the
/// signal's reason text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Interruption {
    /// Asked to stop: the stop flag `flag` was raised, or (`None`) the
    /// caller's own signal was aborted. The lease is still held.
    Stopped {
        /// The stop flag seen raised.
        flag: Option<String>,
    },
    /// The lease may be anyone's now: a renewal found it gone or was
    /// refused, no renewal was confirmed in time, or the hung-holder guard
    /// ended it (`cause`); `None`: a forked child's copy of a parent's hold.
    Lost {
        /// Why.
        cause: Option<LostCause>,
    },
}

impl Interruption {
    /// `"stopped"` or `"lost"`: the name every face uses.
    pub fn name(&self) -> &'static str {
        match self {
            Interruption::Stopped { .. } => "stopped",
            Interruption::Lost { .. } => "lost",
        }
    }

    /// Whether the lease may be lost (the work must not write as its holder).
    pub fn is_lost(&self) -> bool {
        matches!(self, Interruption::Lost { .. })
    }
}

/// How far [`Hold::release`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Releasing {
    /// Still in the engine.
    Holding,
    /// Out of the engine; the delete has not been confirmed yet.
    Deleting,
    /// Done (with whatever outcome was reported).
    Done,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("key", &self.status.lease.key())
            .field("fence", &self.status.lease.fence())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl Hold {
    /// Acquires `key` and starts renewing it; `Ok(None)` when it's held
    /// elsewhere.
    pub(crate) fn start(engine: &Engine, key: &str, opts: HoldOptions) -> Result<Option<Hold>> {
        check_key("key", key)?;
        opts.validate()?;
        if opts.wait.is_some() {
            return hold_waiting(engine, key, opts)?.wait();
        }
        let sent = Instant::now();
        let got = match &opts.stop_key {
            // The acquire's round trip reads the flag where it can.
            Some(flag) => engine.adapter().acquire_reading_flag(
                key,
                opts.ttl,
                &Hold::identity(&opts),
                opts.limit,
                flag,
            )?,
            None => Hold::try_acquire(engine, key, &opts, None)?.map(|lease| (lease, None)),
        };
        let Some((lease, stop_up)) = got else {
            Hold::refused(engine, key);
            return Ok(None);
        };
        Hold::adopt(engine, lease, opts, sent, stop_up).map(Some)
    }

    /// The identity a hold with `opts` stores with its lease.
    pub(crate) fn identity(opts: &HoldOptions) -> Identity {
        Identity {
            label: opts.label.clone().unwrap_or_else(default_label),
            heartbeat: opts.heartbeat,
            stop_key: opts.stop_key.clone(),
        }
    }

    /// One acquire attempt for a hold with (validated) `opts`; `line`: the
    /// waiting line's id ([`crate::Adapter::acquire_queued`]).
    pub(crate) fn try_acquire(
        engine: &Engine,
        key: &str,
        opts: &HoldOptions,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        let who = Hold::identity(opts);
        let adapter = engine.adapter();
        match line {
            Some(line) => adapter.acquire_queued(key, opts.ttl, &who, opts.limit, line),
            None => adapter.acquire_limited(key, opts.ttl, &who, opts.limit),
        }
    }

    /// Counts a refused hold.
    pub(crate) fn refused(engine: &Engine, key: &str) {
        crate::stats::bump(&engine.stats().holds_refused, 1);
        engine
            .stats()
            .emit_now(|| Event::new(EventKind::Refused, key, 0));
    }

    /// Starts renewing `lease`, acquired with `opts` by a request sent at
    /// `sent` (its answer came just now); `stop_up`: the stop flag as that
    /// round trip read it ([`Registration::stop_up`]). On failure the
    /// lease is released.
    pub(crate) fn adopt(
        engine: &Engine,
        lease: Lease,
        opts: HoldOptions,
        sent: Instant,
        stop_up: Option<bool>,
    ) -> Result<Hold> {
        let confirmed = Instant::now();
        let adapter = engine.adapter();
        let margin = opts.margin_for(adapter.as_ref());
        let key = lease.key().to_owned();
        let signal = opts.signal.unwrap_or_default();
        // The backend applied the acquire before it answered: the lease
        // lapses by the answer's arrival + ttl unless renewed.
        let status = Arc::new(HoldStatus::new(lease, confirmed + opts.ttl));
        let stop_key = opts.stop_key.clone();
        let reg = Registration {
            ttl: opts.ttl,
            heartbeat: opts.heartbeat,
            margin,
            stop_key: opts.stop_key,
            stop_up,
            signal: signal.clone(),
            status: status.clone(),
            sent,
            confirmed,
            max_hold: opts.max_hold,
            progress_timeout: opts.progress_timeout,
        };
        let id = match engine.register(reg) {
            Ok(id) => id,
            Err(e) => {
                let _ = adapter.release(&status.lease);
                return Err(e);
            }
        };
        signal.bind_hold();
        crate::stats::bump(&engine.stats().holds_acquired, 1);
        engine
            .stats()
            .emit_now(|| Event::new(EventKind::Acquired, &key, status.lease.fence()));
        Ok(Hold {
            engine: engine.clone(),
            id,
            signal,
            status,
            stop_key,
            generation: fork_generation(),
            release: Mutex::new(Releasing::Holding),
        })
    }

    /// The key held.
    pub fn key(&self) -> &str {
        self.status.lease.key()
    }

    /// The fencing number of this acquisition.
    pub fn fence(&self) -> u64 {
        self.status.lease.fence()
    }

    /// The lease itself (key, token, fence).
    pub fn lease(&self) -> &Lease {
        &self.status.lease
    }

    /// Has the lease been lost (its signal is tripped, with a reason saying
    /// so)?
    pub fn is_lost(&self) -> bool {
        if self.forked() {
            return true;
        }
        self.status.lost.load(Ordering::SeqCst)
    }

    /// Is this a forked child's copy of the hold (module header, "Fork")?
    /// Then its signal is tripped, with a reason naming the fork.
    fn forked(&self) -> bool {
        if self.generation == fork_generation() {
            return false;
        }
        self.signal.forked_copy();
        true
    }

    /// Why the work should stop, once its signal has tripped: the stop flag
    /// was raised ([`Interruption::Stopped`] with its key; without one, the
    /// caller's own signal was aborted), or the lease may be lost
    /// ([`Interruption::Lost`] with its cause; without one, this is a forked
    /// child's copy). `None` while the signal is not tripped. Cheap (atomic
    /// loads): job faces call it at each checkpoint and map it onto their
    /// own exception, so no face reads the signal's reason text.
    pub fn interruption(&self) -> Option<Interruption> {
        if self.forked() {
            return Some(Interruption::Lost { cause: None });
        }
        // The engine records the cause before it trips the signal, so a
        // tripped signal always finds it.
        if !self.signal.is_aborted() {
            return None;
        }
        if self.status.lost.load(Ordering::SeqCst) {
            return Some(Interruption::Lost {
                cause: self.status.lost_cause(),
            });
        }
        let flag = if self.status.was_stopped() {
            self.stop_key.clone()
        } else {
            None
        };
        Some(Interruption::Stopped { flag })
    }

    /// Reports progress for the hung-holder guard
    /// ([`HoldOptions::progress_timeout`]): the work is alive. Cheap (one
    /// clock read and an atomic store); a no-op without a progress timeout.
    pub fn touch(&self) {
        self.status.touch();
    }

    /// The signal tripped on stop flag or loss (and, in a forked child,
    /// on its first use there).
    pub fn signal(&self) -> &AbortSignal {
        self.forked();
        &self.signal
    }

    /// Stops renewing and deletes the lease if it is still ours. Idempotent.
    ///
    /// Returns without waiting for the heartbeat: from the moment the hold
    /// leaves the engine no tick renews it, and a renewal already in flight
    /// can't outlive the delete (renewals compare the owner token, so one
    /// that reaches the backend after the delete finds nothing to extend).
    ///
    /// The delete is bounded twice: by the adapter's I/O timeout (Redis: its
    /// `timeout`, 5 s by default; Local: 5 s of lock wait; Memory: none) and
    /// by the lease's own end — the arrival of the answer to its last
    /// confirmed renewal (or to the acquire) + ttl, after which the lease
    /// can't be alive on the backend any more. Reaching the lease's end
    /// first is [`ReleaseOutcome::Expired`], not an error: the lease is
    /// gone.
    ///
    /// # Errors
    /// The adapter's error if the delete could not be confirmed before the
    /// lease's end (e.g. Redis unreachable, the connection reset): the hold
    /// has stopped renewing, so the lease expires within its ttl, and
    /// calling `release` again retries the delete. Also
    /// [`Error::Connection`] when the lease's end passed without an answer
    /// but a renewal of it was left unanswered (in flight, or failed): the
    /// backend may have applied that renewal, so the lease may live until
    /// a ttl after it arrived; calling `release` again retries the delete,
    /// bounded by the adapter's timeout.
    pub fn release(&self) -> Result<ReleaseOutcome> {
        if self.forked() {
            return Ok(ReleaseOutcome::OtherProcess);
        }
        let mut state = self.release.lock();
        match *state {
            Releasing::Done => return Ok(ReleaseOutcome::AlreadyReleased),
            Releasing::Holding => {
                if self.engine.unregister(self.id) == Unregistered::Gone {
                    *state = Releasing::Done;
                    self.signal.unbind_hold();
                    return Ok(ReleaseOutcome::Lost);
                }
                self.released();
                *state = Releasing::Deleting;
            }
            Releasing::Deleting => {}
        }
        let Some(by) = self.status.delete_by(Instant::now()) else {
            *state = Releasing::Done;
            return Ok(ReleaseOutcome::Expired);
        };
        let deleted = match self.engine.adapter().release_by(&self.status.lease, by) {
            Ok(deleted) => deleted,
            Err(e) => {
                let (until, unanswered) = self.status.alive_until();
                if Instant::now() < until {
                    // Before the lease's end: may still be alive (retry).
                    return Err(e);
                }
                if !unanswered {
                    *state = Releasing::Done;
                    return Ok(ReleaseOutcome::Expired);
                }
                return Err(Error::Connection(format!(
                    "{e}; the release of {:?} could not be confirmed before the lease's end, \
                     and a renewal of it was left unanswered: if the backend applied it, the \
                     lease lives until a ttl after it arrived",
                    self.status.lease.key()
                )));
            }
        };
        *state = Releasing::Done;
        if deleted {
            // This process's waiters on the key: the head tries now.
            crate::waiting::lines::released(self.engine.adapter(), &self.status.lease);
        }
        Ok(if deleted {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    /// Stops renewing now and leaves the delete to the engine's I/O thread:
    /// no I/O on this thread. For places where blocking is not allowed (a
    /// garbage collector's free function). Later calls to
    /// [`Hold::release`] report [`ReleaseOutcome::AlreadyReleased`].
    pub fn release_in_background(&self) {
        if self.generation != fork_generation() {
            return;
        }
        let mut state = self.release.lock();
        let was = std::mem::replace(&mut *state, Releasing::Done);
        let removed = match was {
            Releasing::Holding => self.engine.unregister(self.id) == Unregistered::Removed,
            Releasing::Deleting => true,
            Releasing::Done => false,
        };
        if removed {
            if was == Releasing::Holding {
                self.released();
            }
            if let Some(until) = self.status.delete_by(Instant::now()) {
                self.engine.delete_later(self.status.lease.clone(), until);
            }
        }
    }

    /// Counts the hold's leaving the engine by release; queues `released`.
    fn released(&self) {
        self.signal.unbind_hold();
        let stats = self.engine.stats();
        crate::stats::bump(&stats.holds_released, 1);
        stats.emit_now(|| {
            Event::new(
                EventKind::Released,
                self.status.lease.key(),
                self.status.lease.fence(),
            )
        });
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// A waiting hold on `engine` (`opts` validated; `opts.wait` of `None` is
/// one try).
pub(crate) fn hold_waiting(
    engine: &Engine,
    key: &str,
    opts: HoldOptions,
) -> Result<Waiting<Option<Hold>>> {
    let wait = opts.wait.unwrap_or(Duration::ZERO);
    let signal = opts.signal.clone();
    let (adapter, ttl, limit) = (engine.adapter().clone(), opts.ttl, opts.limit);
    // The stop flag as the last successful try read it (a try from a
    // waiting line does not read it): 0 not read, 1 down, 2 up.
    let stop_up = Arc::new(std::sync::atomic::AtomicU8::new(0));
    let attempt = {
        let engine = engine.clone();
        let key = key.to_owned();
        let opts = opts.clone();
        let stop_up = stop_up.clone();
        Box::new(move |line: Option<&str>| {
            let sent = Instant::now();
            let got = match (&opts.stop_key, line) {
                (Some(flag), None) => engine.adapter().acquire_reading_flag(
                    &key,
                    opts.ttl,
                    &Hold::identity(&opts),
                    opts.limit,
                    flag,
                )?,
                _ => Hold::try_acquire(&engine, &key, &opts, line)?.map(|lease| (lease, None)),
            };
            Ok(got.map(|(lease, up)| {
                let code = up.map_or(0, |up| 1 + u8::from(up));
                stop_up.store(code, Ordering::SeqCst);
                (lease, sent)
            }))
        })
    };
    let finish = {
        let engine = engine.clone();
        let key = key.to_owned();
        let mut opts = Some(opts);
        Box::new(move |got: Option<(Lease, Instant)>| match got {
            Some((lease, sent)) => {
                let opts = opts.take().ok_or_else(|| {
                    Error::InvalidArgument("this wait has already finished".into())
                })?;
                let up = match stop_up.load(Ordering::SeqCst) {
                    0 => None,
                    code => Some(code == 2),
                };
                Hold::adopt(&engine, lease, opts, sent, up).map(Some)
            }
            None => {
                Hold::refused(&engine, &key);
                Ok(None)
            }
        })
    };
    Ok(waiting_for(
        adapter, key, ttl, limit, wait, signal, attempt, finish,
    ))
}
