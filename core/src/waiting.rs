//! Waiting acquire: block until a lease is free, woken by its release or
//! expiry, not by a spin.
//!
//! [`Waiting`] is one caller's place in line for a key. It is driven by
//! [`Waiting::poll`] (one bounded step: try, then sleep until woken, the
//! slice passes, the wait runs out or the signal trips) or by
//! [`Waiting::wait`] (steps until done). Faces use `poll` with the host's
//! interrupt machinery: Python in short slices between
//! `check_signals`, Ruby without the GVL with [`WaitWaker::wake`] as the
//! unblock function; dropping a `Waiting` leaves the line.
//!
//! A refusal at the end of the wait (it ran out, or the signal tripped) is
//! not an error: `Ok(None)` / `Ok(false)`, as for a plain refused acquire.

use crate::adapter::Lease;
use crate::error::{Error, Result};
use crate::hold::{Hold, HoldOptions};
use crate::signal::{AbortSignal, WakeToken};
use crate::sync::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most holders an N-holder lease may have.
pub const MAX_LIMIT: u32 = 1_000_000;

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

/// Checks a wait: any duration (zero: try once; `Duration::MAX`: forever).
pub(crate) fn check_wait(wait: Duration) -> Result<()> {
    let _ = wait;
    Ok(())
}

/// Checks an N-holder limit: 1 ..= [`MAX_LIMIT`].
pub(crate) fn check_limit(limit: u32) -> Result<()> {
    if limit == 0 || limit > MAX_LIMIT {
        return Err(Error::InvalidArgument(format!(
            "limit must be between 1 and {MAX_LIMIT}, got {limit}"
        )));
    }
    Ok(())
}

/// One step of a [`Waiting`].
#[derive(Debug)]
pub enum Poll<T> {
    /// Done: acquired, or refused at the end of the wait.
    Ready(T),
    /// Not done yet: the slice passed, or [`WaitWaker::wake`] was called.
    Pending,
}

#[derive(Default)]
struct Bell {
    epoch: Mutex<u64>,
    rung: Condvar,
}

impl Bell {
    fn ring(&self) {
        let mut epoch = self.epoch.lock();
        *epoch = epoch.wrapping_add(1);
        self.rung.notify_all();
    }
}

/// Wakes a [`Waiting`] blocked in [`Waiting::poll`] (which then returns
/// [`Poll::Pending`]); for a host's unblock function. Cheap to clone, any
/// thread.
#[derive(Clone)]
pub struct WaitWaker {
    bell: Arc<Bell>,
}

impl WaitWaker {
    /// Makes the current (or next, if its token predates this call) poll
    /// return [`Poll::Pending`].
    pub fn wake(&self) {
        self.bell.ring();
    }
}

type Attempt = Box<dyn FnMut() -> Result<Option<(Lease, Instant)>> + Send>;
type Finish<T> = Box<dyn FnMut(Option<(Lease, Instant)>) -> Result<T> + Send>;

/// A place in line for a lease (module header).
pub struct Waiting<T> {
    attempt: Attempt,
    finish: Finish<T>,
    deadline: Option<Instant>,
    signal: Option<AbortSignal>,
    bell: Arc<Bell>,
    tried: bool,
}

impl<T> std::fmt::Debug for Waiting<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiting")
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// The slow safety-net poll of a waiter (expiries and lost messages).
const SAFETY_POLL: Duration = Duration::from_millis(50);

impl<T> Waiting<T> {
    fn new(
        wait: Duration,
        signal: Option<AbortSignal>,
        attempt: Attempt,
        finish: Finish<T>,
    ) -> Self {
        Waiting {
            attempt,
            finish,
            deadline: Instant::now().checked_add(wait),
            signal,
            bell: Arc::default(),
            tried: false,
        }
    }

    /// Where the wake count stands: read it before releasing a host lock,
    /// pass it to [`Waiting::poll`].
    pub fn wake_token(&self) -> WakeToken {
        WakeToken(*self.bell.epoch.lock())
    }

    /// A handle that wakes this waiter's poll.
    pub fn waker(&self) -> WaitWaker {
        WaitWaker {
            bell: self.bell.clone(),
        }
    }

    /// One step: tries to acquire; if refused, sleeps until woken by a
    /// release, the lease's expiry, [`WaitWaker::wake`] (since `since`), the
    /// end of `slice` (`None`: no slice), the end of the wait or the
    /// signal's abort. `Ready` once acquired or refused for good.
    ///
    /// # Errors
    /// The backend's errors (the wait ends).
    pub fn poll(&mut self, since: WakeToken, slice: Option<Duration>) -> Result<Poll<T>> {
        let aborted = self.signal.as_ref().is_some_and(AbortSignal::is_aborted);
        if aborted {
            return (self.finish)(None).map(Poll::Ready);
        }
        if let Some(got) = (self.attempt)()? {
            return (self.finish)(Some(got)).map(Poll::Ready);
        }
        self.tried = true;
        let now = Instant::now();
        if self.deadline.is_some_and(|d| now >= d) {
            return (self.finish)(None).map(Poll::Ready);
        }
        let mut until = now + SAFETY_POLL;
        if let Some(d) = self.deadline {
            until = until.min(d);
        }
        if let Some(s) = slice.and_then(|s| now.checked_add(s)) {
            until = until.min(s);
        }
        let mut epoch = self.bell.epoch.lock();
        while *epoch == since.0 && Instant::now() < until {
            epoch = self.bell.rung.wait_until(epoch, until).0;
        }
        Ok(Poll::Pending)
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

/// A waiting hold on `engine` (`opts.wait` is set and `opts` validated).
pub(crate) fn hold_waiting(
    engine: &crate::engine::Engine,
    key: &str,
    opts: HoldOptions,
) -> Result<Waiting<Option<Hold>>> {
    let wait = opts.wait.unwrap_or(Duration::ZERO);
    let signal = opts.signal.clone();
    let attempt = {
        let engine = engine.clone();
        let key = key.to_owned();
        let opts = opts.clone();
        Box::new(move || {
            let sent = Instant::now();
            Ok(Hold::try_acquire(&engine, &key, &opts)?.map(|lease| (lease, sent)))
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
                Hold::adopt(&engine, lease, opts, sent).map(Some)
            }
            None => {
                Hold::refused(&engine, &key);
                Ok(None)
            }
        })
    };
    Ok(Waiting::new(wait, signal, attempt, finish))
}

/// A waiting plain acquire: `attempt` tries once, `finish` records the
/// lease (`true`) or the refusal (`false`).
pub(crate) fn acquire_waiting(
    wait: Duration,
    signal: Option<AbortSignal>,
    attempt: impl FnMut() -> Result<Option<Lease>> + Send + 'static,
    finish: impl FnMut(Option<Lease>) -> Result<bool> + Send + 'static,
) -> Waiting<bool> {
    let mut attempt = attempt;
    let mut finish = finish;
    Waiting::new(
        wait,
        signal,
        Box::new(move || Ok(attempt()?.map(|lease| (lease, Instant::now())))),
        Box::new(move |got| finish(got.map(|(lease, _)| lease))),
    )
}

#[cfg(test)]
mod tests {
    use crate::{AcquireOptions, HoldOptions, Locks};
    use std::time::{Duration, Instant};

    #[test]
    fn a_waiting_acquire_gets_the_lease_when_it_is_released() {
        let locks = Locks::memory();
        let other = locks.new_owner();
        assert!(locks.acquire("k", Duration::from_secs(10)).unwrap());
        let t = std::thread::spawn(move || {
            let opts = AcquireOptions {
                wait: Some(Duration::from_secs(10)),
                ..AcquireOptions::default()
            };
            other
                .acquire_with("k", Duration::from_secs(10), &opts)
                .unwrap()
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(locks.release("k").unwrap());
        assert!(t.join().unwrap());
    }

    #[test]
    fn a_wait_that_runs_out_is_a_refusal() {
        let locks = Locks::memory();
        assert!(locks.acquire("k", Duration::from_secs(10)).unwrap());
        let opts = HoldOptions {
            wait: Some(Duration::from_millis(100)),
            ..HoldOptions::default()
        };
        let started = Instant::now();
        assert!(locks.new_owner().hold("k", opts).unwrap().is_none());
        assert!(started.elapsed() >= Duration::from_millis(100));
    }
}
