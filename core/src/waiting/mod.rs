//! Waiting acquire: block until a lease is free, woken by its release or
//! expiry, not by a spin.
//!
//! [`Waiting`] is one caller's place in line for a key. It is driven by
//! [`Waiting::poll`] (one bounded step: try when there is reason to, then
//! sleep until woken, the slice passes, the wait runs out or the signal
//! trips) or by [`Waiting::wait`] (steps until done). Faces use `poll` with
//! the host's interrupt machinery: Python in short slices between
//! `check_signals`, Ruby without the GVL with [`WaitWaker::wake`] as the
//! unblock function. A poll that returns [`Poll::Pending`] costs no I/O:
//! slices do not turn into polling. Dropping a `Waiting` leaves the line;
//! a `Waiting` holds its place until then, so drive it or drop it.
//!
//! A refusal at the end of the wait (it ran out, or the signal tripped) is
//! not an error: `Ok(None)` / `Ok(false)`, as for a plain refused acquire.
//!
//! # Lines, and who tries when
//!
//! Waiters of one process form a line per (adapter object, key), kept in a
//! process-wide registry ([`ForkLocal`]: a forked child starts with none).
//! Only the line's *head* ever asks the backend; the others sleep on their
//! own condition variable until they become head. The head tries:
//! - when it is rung: a release of the key made in this process
//!   ([`crate::Locks::release`], [`Hold::release`], the engine's background
//!   delete, [`crate::Locks::break_lease`]) rings it directly, with no
//!   message (its announcement, heard later, rings nobody: releases are
//!   recognised by fence); a release elsewhere reaches it through the
//!   adapter's listener ([`crate::contract::push`]) when this line is the next in the
//!   backend's queue: the release names the queue's first live line (of an
//!   N-holder key, the first `free` ones; Redis: a message on
//!   `{ns}:next:{KEY}:LINE`, sharded on a cluster; Local: the doorbell of
//!   that line's bucket), so a hand-off wakes one process, not every
//!   process that waits. Each line's channel is subscribed while the
//!   line exists (and [`crate::contract::push::LINGER`] after; a line that starts
//!   again at once takes the same id, but not while the backend is being
//!   asked to forget it: a forget that arrived after the new line's first
//!   try would take its entry away, `lines::Forget`); once the subscription is live, and
//!   after a reconnect, the head tries once (an announcement may have been
//!   missed). Until the listener has confirmed the line's subscription (a
//!   new one waits for the listener's next wake-up: up to
//!   [`crate::contract::listen::COLD_SLICE`] on a Redis Cluster, whose
//!   readers can't be woken), a refused head does not count on being told: it
//!   tries again after [`QUICK_RETRY`], doubling to 40 ms, for at most a
//!   second;
//! - when the lease could have lapsed: after a refused try the head asks
//!   [`Adapter::expires_in`] and sleeps at most that long (plus
//!   [`EXPIRY_SLACK`]), so a crashed holder's lease is retaken at its
//!   expiry;
//! - at the latest every [`SAFETY_POLL`] (2 s): the safety net for lost
//!   messages and adapters that can't push (Memory needs none: every
//!   release is made in the process).
//!
//! When the head acquires it leaves the line; the next waiter becomes head
//! without a try (the lease was just taken) and sets its timer to the
//! acquirer's ttl (at most [`SAFETY_POLL`]). With `limit > 1` it is rung at
//! once instead (another slot may be free). A head that leaves without the
//! lease (its wait ran out, its signal tripped, it was dropped) hands its
//! timer to the next one, and rings it if a ring came that it had not
//! acted on yet.
//!
//! # Fairness
//!
//! Within a process, waiters on one key are served first come, first
//! served: only the head tries, and it is rung before anyone else.
//!
//! Across processes the backend keeps a queue of lines per key
//! ([`Adapter::acquire_queued`]; Redis, its Sentinel and Cluster modes, and
//! Local; Memory is one process). Each line has a random id, kept while the
//! line exists; the head's tries carry it. A refused try queues the line
//! (or keeps its place); a free lease goes only to the live line at the
//! head of the queue, and a plain (non-waiting) acquire is refused while a
//! live line is queued. When a head acquires, its line leaves the queue;
//! the next waiter of the process becomes head and its next try queues the
//! line again, at the back: processes take turns (measured with two
//! processes of two waiters each cycling one key for 3 s: 270 vs 269
//! turns; without the queue shares ran from 1:12 to even). An entry lives
//! [`QUEUE_ENTRY_TTL`] (1.5 s) after its line's last try, and a queued
//! line's head tries at least every [`QUEUE_REFRESH`] (0.5 s, a third of
//! that), whatever else it waits for: the refused try refreshes the entry
//! (no extra call: it is the try the line makes anyway; one made only for
//! this keeps the head's timer and asks nothing more). So a live line keeps
//! its place through two refreshes lost or late, and an unreachable line
//! (its process cut off, frozen or killed) holds a free lease back at most
//! [`QUEUE_ENTRY_TTL`] after its last try, plus [`QUEUE_REFRESH`] until the
//! next line's head tries again. A head that takes over from one that left
//! without the lease takes over its refresh timer too. A
//! line whose last waiter leaves without the lease asks the backend to
//! forget it ([`Adapter::leave_queue`], best effort). While another line
//! heads the queue the lease may be free: a head refused then does not poll
//! (that line was told, and its holder's release will name the next line):
//! after one quick retry (the lease may instead have lapsed between its try
//! and its question), it waits for its own announcement, the lease's expiry
//! or its next refresh ([`QUEUE_REFRESH`]; a line whose entry lapsed is
//! then passed); without a listener it backs off (5 ms doubling, its
//! refresh at the latest). N-holder leases queue the same way: a free slot goes to the
//! first `free` live lines (`free` = limit minus live slots). See
//! `docs/PROTOCOL.md`, "Waiting".
//!
//! # Interruption
//!
//! The signal's abort rings the waiter at once (an `on_abort` callback,
//! removed when the wait ends); [`WaitWaker::wake`] makes the current poll
//! return [`Poll::Pending`] at once.
//!
//! Lock order: the registry lock, then a waiter's bell lock; a bell lock is
//! never held while the registry lock is taken, nor while the backend is
//! called.

pub(crate) mod lines;
#[cfg(all(test, loom))]
mod loom_models;
pub(crate) mod observe;

pub use lines::WaitWaker;

use crate::contract::adapter::{Adapter, Lease};
use crate::error::{Error, Result};
use crate::signal::{AbortSignal, CallbackHandle, WakeToken};
use lines::join;
use lines::leave;
use lines::pushes;
use lines::Bell;
use lines::Handoff;
use lines::Place;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::args::MAX_LIMIT;

pub use crate::contract::{QUEUE_ENTRY_TTL, QUEUE_REFRESH, SAFETY_POLL};

/// Added to a lease's remaining life before the head retries (the
/// backend's clock rounds to milliseconds).
pub const EXPIRY_SLACK: Duration = Duration::from_millis(2);

/// A refused try after which the backend said no lease is there (it
/// lapsed or was released in between): retry after this.
const QUICK_RETRY: Duration = Duration::from_millis(5);

/// The longest a head waits between tries while its line's subscription
/// is not confirmed (an announcement to the line may be lost meanwhile):
/// [`QUICK_RETRY`] doubling up to this.
const UNHEARD_RETRY_MAX: Duration = Duration::from_millis(40);

/// How long a head keeps trying every [`UNHEARD_RETRY_MAX`] at most while
/// its line's subscription is not confirmed: beyond the listener's
/// slowest wake-up ([`crate::contract::listen::COLD_SLICE`]) plus a round
/// trip the listener is evidently cut off (it rings every line once it
/// is back), and the head's own timers serve.
const UNHEARD_FOR: Duration = Duration::from_secs(1);

/// Whether the head's retry timer for `at` has fired by `now`.
#[cfg(not(loom))]
fn timer_due(at: Instant, now: Instant) -> bool {
    now >= at
}

/// Under loom never: loom has no clock, and a timed wait never times out
/// there (`crate::runtime::sync`), so the models (`loom_models.rs`) see a
/// head try only when it is rung or first heads the line — a wake-up that
/// only a timer would give shows as a deadlock — and no run of a model
/// depends on how long the machine took.
#[cfg(loom)]
fn timer_due(at: Instant, now: Instant) -> bool {
    let _ = (at, now);
    false
}

/// How to take a lease with [`crate::Locks::acquire_with`].
#[derive(Debug, Clone)]
pub struct AcquireOptions {
    /// How long to wait when the lease is held elsewhere: `None` (the
    /// default) does not wait; `Some(Duration::MAX)` waits without limit.
    pub wait: Option<Duration>,
    /// Up to this many holders at once; 1 (the default) is exclusive.
    pub limit: u32,
    /// Stops the wait when aborted (the acquire then reports a refusal).
    pub signal: Option<AbortSignal>,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            wait: None,
            limit: 1,
            signal: None,
        }
    }
}

/// One step of a [`Waiting`].
#[derive(Debug)]
pub enum Poll<T> {
    /// Done: acquired, or refused at the end of the wait.
    Ready(T),
    /// Not done yet: the slice passed, or [`WaitWaker::wake`] was called.
    Pending,
}

// ---------------------------------------------------------------------------

/// One try; the argument is the line's id when the try is made from a
/// line ([`Adapter::acquire_queued`]).
pub(crate) type Attempt = Box<dyn FnMut(Option<&str>) -> Result<Option<(Lease, Instant)>> + Send>;
pub(crate) type Finish<T> = Box<dyn FnMut(Option<(Lease, Instant)>) -> Result<T> + Send>;

/// A place in line for a lease (module header).
pub struct Waiting<T> {
    attempt: Attempt,
    finish: Finish<T>,
    adapter: Arc<dyn Adapter>,
    key: Arc<str>,
    ttl: Duration,
    limit: u32,
    /// `None`: no wait (one try, no line).
    deadline: Option<Instant>,
    waits: bool,
    signal: Option<AbortSignal>,
    on_abort: Option<CallbackHandle>,
    bell: Arc<Bell>,
    place: Option<Place>,
    /// The first try is made (or, for a waiter that joined behind others,
    /// skipped).
    started: bool,
    /// The rings seen when this waiter last tried.
    seen_rings: u64,
    was_head: bool,
    /// When the head tries again without a ring.
    retry_at: Option<Instant>,
    /// When the head tries again to refresh its line's queue entry
    /// ([`QUEUE_REFRESH`] after the line's last try); `None` while the line
    /// has no entry to keep.
    refresh_at: Option<Instant>,
    /// The adapter has told a lease's remaining life at least once.
    knows_expiry: bool,
    /// Quick retries in a row since the adapter last told a lease's life
    /// (the lease was free but another process's line was ahead).
    quick: u32,
    /// This waiter tried with its line's id.
    tried_in_line: bool,
    /// Since when, and how many tries, this head found its line's
    /// subscription not confirmed ([`Waiting::unheard_retry`]).
    unheard: Option<(Instant, u32)>,
    finished: bool,
}

impl<T> std::fmt::Debug for Waiting<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiting")
            .field("key", &self.key)
            .field("deadline", &self.deadline)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

/// What a waiting acquire is for.
struct Target {
    adapter: Arc<dyn Adapter>,
    key: Arc<str>,
    ttl: Duration,
    limit: u32,
}

impl<T> Waiting<T> {
    fn new(
        target: Target,
        wait: Duration,
        signal: Option<AbortSignal>,
        attempt: Attempt,
        finish: Finish<T>,
    ) -> Self {
        let bell = Arc::new(Bell::default());
        let on_abort = signal.as_ref().filter(|_| !wait.is_zero()).map(|s| {
            let bell = Arc::downgrade(&bell);
            s.on_abort(move |_| {
                if let Some(bell) = bell.upgrade() {
                    let mut state = bell.state.lock();
                    state.aborted = true;
                    bell.changed.notify_all();
                }
            })
        });
        Waiting {
            attempt,
            finish,
            adapter: target.adapter,
            key: target.key,
            ttl: target.ttl,
            limit: target.limit,
            deadline: Instant::now().checked_add(wait),
            waits: !wait.is_zero(),
            signal,
            on_abort,
            bell,
            place: None,
            started: false,
            seen_rings: 0,
            was_head: false,
            retry_at: None,
            refresh_at: None,
            knows_expiry: false,
            quick: 0,
            tried_in_line: false,
            unheard: None,
            finished: false,
        }
    }

    /// Whether this acquire waits at all (`false`: one try, no line).
    pub fn waits(&self) -> bool {
        self.waits
    }

    /// Where the wake count stands: read it before releasing a host lock,
    /// pass it to [`Waiting::poll`].
    pub fn wake_token(&self) -> WakeToken {
        WakeToken(self.bell.state.lock().wakes)
    }

    /// A handle that wakes this waiter's poll.
    pub fn waker(&self) -> WaitWaker {
        WaitWaker {
            bell: self.bell.clone(),
        }
    }

    /// One step: tries to acquire when there is reason to (first poll at
    /// the head of the line, a release, the lease's expiry, the safety
    /// poll); otherwise sleeps until one of those, [`WaitWaker::wake`]
    /// (since `since`), the end of `slice` (`None`: no slice), the end of
    /// the wait or the signal's abort. `Ready` once acquired or refused for
    /// good; `Pending` after a wake or at the end of the slice.
    ///
    /// # Errors
    /// The backend's errors (the wait ends); polling a finished waiter.
    pub fn poll(&mut self, since: WakeToken, slice: Option<Duration>) -> Result<Poll<T>> {
        if self.finished {
            return Err(Error::InvalidArgument(
                "this wait has already finished".into(),
            ));
        }
        let slice_end = slice.and_then(|s| Instant::now().checked_add(s));
        loop {
            // An aborted signal ends a wait; a single try (no wait) is made
            // anyway, as `Locks::hold` makes it (the hold starts aborted).
            if self.waits && self.signal.as_ref().is_some_and(AbortSignal::is_aborted) {
                return self.end(None);
            }
            if self.waits
                && self
                    .place
                    .as_ref()
                    .is_none_or(|p| p.generation != crate::runtime::fork::generation())
            {
                self.place = Some(join(&self.adapter, &self.key, &self.bell));
            }
            let (rings, head, lapse, refresh_at) = {
                let state = self.bell.state.lock();
                (state.rings, state.head, state.lapse, state.refresh_at)
            };
            let now = Instant::now();
            let in_line = self.place.is_some();
            if in_line && !self.started && !head {
                // Behind others: first come, first served.
                self.started = true;
                self.seen_rings = rings;
            }
            if head && !self.was_head {
                self.was_head = true;
                if self.started {
                    // Promoted: the lease was just taken (or rung below).
                    let wait = lapse.map_or(SAFETY_POLL, |l| (l + EXPIRY_SLACK).min(SAFETY_POLL));
                    self.retry_at = Some(now + wait);
                    self.refresh_at = refresh_at;
                }
            }
            let may_try = head || !in_line;
            let tries = !self.started
                || rings != self.seen_rings
                || self.retry_at.is_some_and(|t| timer_due(t, now));
            // The line's entry is due for a refresh: a try keeps it (a
            // refused try refreshes the entry; a free lease at the head of
            // the queue is taken).
            // Not once the wait is over: the place is given up anyway (a
            // wait's waiters all ending at once each made one, every
            // promoted head in turn).
            let refresh = head
                && self.refresh_at.is_some_and(|t| timer_due(t, now))
                && !self.deadline.is_some_and(|d| timer_due(d, now));
            if may_try && (tries || refresh) {
                let rung = rings != self.seen_rings;
                self.started = true;
                self.seen_rings = rings;
                let line = self.place.as_ref().map(|p| p.line.clone());
                self.tried_in_line |= line.is_some();
                // A try a ring caused: the ring is acted on (the test hook
                // hears of it, `observe.rs`).
                if rung {
                    let ring = self.bell.state.lock().rung.take();
                    if let (Some(ring), Some(line)) = (ring, line.as_deref()) {
                        observe::rung_try(&self.key, line, ring);
                    }
                }
                // The backend stamps the entry after this: its deadline is
                // at least QUEUE_ENTRY_TTL past `sent`.
                let sent = Instant::now();
                if let Some(got) = (self.attempt)(line.as_deref())? {
                    return self.end(Some(got));
                }
                if self.deadline.is_some_and(|d| Instant::now() >= d) || !self.waits {
                    return self.end(None);
                }
                if line.is_some() {
                    self.refresh_at = Some(sent + QUEUE_REFRESH);
                }
                // A try made only to refresh keeps the head's timer (the
                // lease's expiry it was told): no question asked.
                if tries || self.retry_at.is_none() {
                    let next = self.next_retry();
                    self.retry_at = Some(Instant::now() + next);
                }
                continue;
            }
            if self.deadline.is_some_and(|d| now >= d) {
                return self.end(None);
            }
            let mut until = self.deadline;
            let mut earliest = |t: Option<Instant>| {
                if let Some(t) = t {
                    until = Some(until.map_or(t, |u| u.min(t)));
                }
            };
            earliest(slice_end);
            if head {
                earliest(self.retry_at);
                earliest(self.refresh_at);
            }
            let mut state = self.bell.state.lock();
            loop {
                if state.wakes != since.0 {
                    return Ok(Poll::Pending);
                }
                if state.rings != rings || state.head != head || state.aborted {
                    break;
                }
                match until {
                    Some(u) => {
                        let (guard, passed) = self.bell.changed.wait_until(state, u);
                        state = guard;
                        if passed {
                            break;
                        }
                    }
                    None => state = self.bell.changed.wait(state),
                }
            }
            let woken = state.wakes != since.0;
            drop(state);
            if woken || slice_end.is_some_and(|s| Instant::now() >= s) {
                return Ok(Poll::Pending);
            }
        }
    }

    /// How long the head sleeps after a refused try (module header).
    fn next_retry(&mut self) -> Duration {
        let wait = self.retry_after_refusal();
        match self.unheard_retry() {
            Some(soon) => wait.min(soon),
            None => wait,
        }
    }

    /// While the listener has not confirmed this line's subscription, a
    /// release announced to the line is not heard (a new line's
    /// subscription waits for the listener's next wake-up: up to
    /// [`crate::contract::listen::COLD_SLICE`] on a Redis Cluster): the head then
    /// tries again soon, [`QUICK_RETRY`] doubling to [`UNHEARD_RETRY_MAX`],
    /// for at most [`UNHEARD_FOR`]; the listener rings it once the
    /// subscription is live. `None` when announcements are heard (or
    /// there are none).
    fn unheard_retry(&mut self) -> Option<Duration> {
        let place = self.place.as_ref()?;
        if lines::announced(&self.adapter, &self.key, &place.line) != Some(false) {
            self.unheard = None;
            return None;
        }
        let now = Instant::now();
        let (since, tries) = self.unheard.get_or_insert((now, 0));
        if now.saturating_duration_since(*since) >= UNHEARD_FOR {
            return None;
        }
        let wait = QUICK_RETRY
            .saturating_mul(1 << (*tries).min(4))
            .min(UNHEARD_RETRY_MAX);
        *tries += 1;
        Some(wait)
    }

    /// How long the head sleeps after a refused try, announcements aside.
    fn retry_after_refusal(&mut self) -> Duration {
        match self.adapter.expires_in(&self.key) {
            Ok(Some(left)) => {
                self.knows_expiry = true;
                self.quick = 0;
                (left + EXPIRY_SLACK).min(SAFETY_POLL)
            }
            // No lease now, though the try was refused: first suppose it
            // lapsed (or was released) between the try and this question, a
            // try made just before the expiry (a ring, a descheduled
            // thread), and try once more soon; only a second refusal in a
            // row with no lease there means another line is ahead. (Sleeping
            // the safety poll at once left a free key untaken for 2 s.)
            Ok(None) if self.quick == 0 => {
                self.quick = 1;
                QUICK_RETRY
            }
            // Gone since the try: it lapsed or was released in between, or
            // it is free and another process's line is ahead in the
            // backend's queue (that one's release rings this head; the
            // retries back off).
            // With push, that line's holder's release is announced to the
            // line next in the queue, by name: this head is rung when its
            // turn comes, and does not poll meanwhile (a refused head never
            // polls faster than the lease could change hands).
            Ok(None) if self.knows_expiry && pushes(&self.adapter) => SAFETY_POLL,
            Ok(None) if self.knows_expiry => {
                let wait = QUICK_RETRY.saturating_mul(1 << self.quick.min(10));
                self.quick += 1;
                wait.min(SAFETY_POLL)
            }
            _ => SAFETY_POLL,
        }
    }

    /// Leaves the line and finishes with `got`.
    fn end(&mut self, got: Option<(Lease, Instant)>) -> Result<Poll<T>> {
        self.finished = true;
        self.quit(got.is_some());
        (self.finish)(got).map(Poll::Ready)
    }

    /// Leaves the line (if in it) and drops the abort callback.
    fn quit(&mut self, acquired: bool) {
        if let Some(place) = self.place.take() {
            let handoff = if acquired {
                // Exclusive: the lease was just taken, nothing to try
                // before it could lapse. N slots: another may be free.
                Handoff {
                    ring: self.limit > 1,
                    seen: None,
                    lapse: Some(self.ttl),
                    refresh_at: None,
                    acquired: true,
                    tried: true,
                }
            } else {
                // Without the lease (timeout, abort, dropped): the next
                // head takes over this one's timer, and a ring it had not
                // acted on yet (also one that comes while it leaves).
                let now = Instant::now();
                Handoff {
                    ring: !self.started,
                    seen: self.started.then_some(self.seen_rings),
                    lapse: self.retry_at.map(|t| t.saturating_duration_since(now)),
                    refresh_at: self.refresh_at,
                    acquired: false,
                    tried: self.tried_in_line,
                }
            };
            if let Some(forget) = leave(&place, &self.key, handoff) {
                // Best effort, one bounded round trip: an entry left
                // behind lapses on its own (docs/PROTOCOL.md, "Waiting").
                // The line's id is taken again only once it is forgotten.
                if self.adapter.leave_queue(&self.key, &place.line).is_ok() {
                    forget.done();
                }
            }
        }
        if let (Some(signal), Some(handle)) = (&self.signal, self.on_abort.take()) {
            signal.remove_callback(handle);
        }
    }

    /// Steps until done (not interruptible but by the signal and the wait's
    /// end).
    ///
    /// # Errors
    /// The backend's errors.
    pub fn wait(mut self) -> Result<T> {
        loop {
            let since = self.wake_token();
            if let Poll::Ready(done) = self.poll(since, None)? {
                return Ok(done);
            }
        }
    }
}

impl<T> Drop for Waiting<T> {
    fn drop(&mut self) {
        self.quit(false);
    }
}

/// A waiting acquire of `key` on `adapter` whose `attempt` returns the
/// lease with the time its request was sent, and whose `finish` makes the
/// result (a hold, [`crate::hold`]) from it or from the refusal.
#[allow(clippy::too_many_arguments)]
pub(crate) fn waiting_for<T>(
    adapter: Arc<dyn Adapter>,
    key: &str,
    ttl: Duration,
    limit: u32,
    wait: Duration,
    signal: Option<AbortSignal>,
    attempt: Attempt,
    finish: Finish<T>,
) -> Waiting<T> {
    let target = Target {
        adapter,
        key: Arc::from(key),
        ttl,
        limit,
    };
    Waiting::new(target, wait, signal, attempt, finish)
}

/// A waiting plain acquire of `key` on `adapter`: `attempt` tries once,
/// `finish` records the lease (`true`) or the refusal (`false`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn acquire_waiting(
    adapter: Arc<dyn Adapter>,
    key: &str,
    ttl: Duration,
    limit: u32,
    wait: Duration,
    signal: Option<AbortSignal>,
    attempt: impl FnMut(Option<&str>) -> Result<Option<Lease>> + Send + 'static,
    finish: impl FnMut(Option<Lease>) -> Result<bool> + Send + 'static,
) -> Waiting<bool> {
    let mut attempt = attempt;
    let mut finish = finish;
    let target = Target {
        adapter,
        key: Arc::from(key),
        ttl,
        limit,
    };
    Waiting::new(
        target,
        wait,
        signal,
        Box::new(move |line: Option<&str>| Ok(attempt(line)?.map(|lease| (lease, Instant::now())))),
        Box::new(move |got| finish(got.map(|(lease, _)| lease))),
    )
}

#[cfg(test)]
mod tests;
