//! [`AbortSignal`]: a thread-safe, one-way latch with a reason and callbacks.
//!
//! Invariants:
//! - A signal goes from "not aborted" to "aborted" at most once; the reason
//!   given by the first `abort` wins and never changes afterwards.
//! - Every registered callback runs exactly once, after the state lock is
//!   released: on the thread that calls `abort`, or, when the heartbeat
//!   engine trips the signal (stop flag, lost lease), on the library's
//!   notifier thread ([`crate::signal::notify`]) — never on the heartbeat thread.
//!   The latch itself (and every waiter's wake-up) happens at once either
//!   way (a callback may freely call back into
//!   this signal, or any other). A callback registered after the abort runs
//!   at once, on the registering thread.
//! - A panicking callback is caught; the remaining callbacks still run.
//! - Children made by [`AbortSignal::derive`] hear their parent's abort (with
//!   its reason); a child's abort never reaches its parent.
//!
//! Fork: the state lock and condvar are `std::sync` ones (see
//! `crate::runtime::sync`), so a child whose parent had threads in `wait` can still
//! abort and wait. A signal knows how many live holds watch it and in which
//! process ([`AbortSignal::bind_hold`]); a forked child's copy of a signal
//! that live holds watched at the fork trips on its first use in the child
//! (any read, wait or registration: one atomic load when no hold watches),
//! with a reason naming the fork ([`forked_reason`]): the child's copies of
//! those holds neither renew nor release, so their lease is the parent's,
//! not the child's. The parent's signal is untouched.
//!
//! Lock order: a signal's own state lock is never held while any other lock
//! is taken, and never while callbacks run.

pub mod delivery;
#[cfg(all(test, loom))]
mod loom_models;
pub(crate) mod notify;

use crate::runtime::sync::{Condvar, Mutex};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

type Callback = Box<dyn FnOnce(Option<&str>) + Send + 'static>;

/// The callbacks of a tripped signal (and of its children), still to run.
pub(crate) struct PendingCallbacks {
    reason: Option<String>,
    callbacks: Vec<Callback>,
    children: Vec<PendingCallbacks>,
}

impl PendingCallbacks {
    /// A batch of one task that takes no reason ([`crate::signal::notify::run_task`]).
    pub(crate) fn task(task: impl FnOnce() + Send + 'static) -> Self {
        PendingCallbacks {
            reason: None,
            callbacks: vec![Box::new(move |_| task())],
            children: Vec::new(),
        }
    }

    /// Runs every callback, the signal's own first, then its children's; a
    /// panicking callback does not stop the ones after it.
    pub(crate) fn run(self) {
        let reason = self.reason.as_deref();
        for callback in self.callbacks {
            let _ = catch_unwind(AssertUnwindSafe(|| callback(reason)));
        }
        for child in self.children {
            child.run();
        }
    }
}

/// Identifies a callback registered with [`AbortSignal::on_abort`], to
/// remove it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallbackHandle(u64);

impl CallbackHandle {
    /// The handle as a number, for faces that hand it to C, Python or Ruby.
    pub fn as_u64(self) -> u64 {
        self.0
    }
    /// Rebuilds a handle from [`CallbackHandle::as_u64`].
    pub fn from_u64(n: u64) -> Self {
        CallbackHandle(n)
    }
}

/// A waiter's view of a wake count, read before it blocks (see
/// [`AbortSignal::wake_token`] and [`crate::signal::delivery::wake_token`]): a wake
/// that happens after the read ends the wait, however soon it comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeToken(pub(crate) u64);

/// How a [`AbortSignal::wait_or_wake`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// The signal is aborted.
    Aborted,
    /// The timeout passed first.
    TimedOut,
    /// [`AbortSignal::wake_waiters`] was called (e.g. by a Ruby unblock
    /// function); the caller should check for interrupts and wait again.
    Woken,
}

#[derive(Default)]
struct State {
    aborted: bool,
    reason: Option<String>,
    callbacks: Vec<(u64, Callback)>,
    next_handle: u64,
    children: Vec<Weak<Inner>>,
    wake_epoch: u64,
}

#[derive(Default)]
struct Inner {
    state: Mutex<State>,
    changed: Condvar,
    /// How many live holds watch this signal (module header, "Fork").
    holds: AtomicUsize,
    /// The fork generation of the process whose holds those are.
    generation: AtomicU64,
    /// That process's id, for the reason a forked copy reports.
    pid: AtomicU32,
}

/// A one-way "please stop" latch that work loops check cooperatively.
///
/// Cloning gives another handle to the same signal.
///
/// # Examples
/// ```
/// use mistri_locks::AbortSignal;
/// use std::time::Duration;
///
/// let signal = AbortSignal::new();
/// let child = signal.derive();
/// assert!(!signal.wait(Some(Duration::from_millis(1))));
/// signal.abort(Some("shutting down"));
/// assert!(child.is_aborted());
/// assert_eq!(child.reason().as_deref(), Some("shutting down"));
/// ```
#[derive(Clone, Default)]
pub struct AbortSignal {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AbortSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("AbortSignal")
            .field("aborted", &state.aborted)
            .field("reason", &state.reason)
            .finish()
    }
}

impl AbortSignal {
    /// A new signal, not aborted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trips the signal. Returns `true` if this call tripped it, `false` if it
    /// was already aborted (the first reason stays).
    ///
    /// Callbacks run on this thread before `abort` returns; the signal's
    /// children are aborted with the same reason.
    pub fn abort(&self, reason: Option<&str>) -> bool {
        match self.trip(reason) {
            Some(pending) => {
                pending.run();
                true
            }
            None => false,
        }
    }

    /// Latches the signal (and its children) now, waking every waiter, and
    /// hands back the callbacks to run, so the caller decides on which
    /// thread user code runs (the heartbeat engine hands them to
    /// [`crate::signal::notify`]). `None` if it was already aborted.
    pub(crate) fn trip(&self, reason: Option<&str>) -> Option<PendingCallbacks> {
        let (callbacks, children) = {
            let mut state = self.inner.state.lock();
            if state.aborted {
                return None;
            }
            state.aborted = true;
            state.reason = reason.map(str::to_owned);
            self.inner.changed.notify_all();
            (
                std::mem::take(&mut state.callbacks),
                std::mem::take(&mut state.children),
            )
        };
        let mut pending = PendingCallbacks {
            reason: reason.map(str::to_owned),
            callbacks: callbacks.into_iter().map(|(_, cb)| cb).collect(),
            children: Vec::new(),
        };
        for child in children.iter().filter_map(Weak::upgrade) {
            if let Some(more) = (AbortSignal { inner: child }).trip(reason) {
                pending.children.push(more);
            }
        }
        Some(pending)
    }

    /// Has the signal been tripped?
    pub fn is_aborted(&self) -> bool {
        self.forked_copy();
        self.inner.state.lock().aborted
    }

    /// The reason given to the first `abort`, if any.
    pub fn reason(&self) -> Option<String> {
        self.forked_copy();
        self.inner.state.lock().reason.clone()
    }

    /// A hold of this process starts watching this signal (module header,
    /// "Fork"). A signal inherited from a parent whose holds watched it
    /// trips first.
    pub(crate) fn bind_hold(&self) {
        self.forked_copy();
        let generation = crate::runtime::fork::generation();
        self.inner.generation.store(generation, Ordering::SeqCst);
        self.inner.pid.store(std::process::id(), Ordering::SeqCst);
        self.inner.holds.fetch_add(1, Ordering::SeqCst);
    }

    /// A hold bound by [`AbortSignal::bind_hold`] stopped watching this
    /// signal (released, or lost).
    pub(crate) fn unbind_hold(&self) {
        if self.inner.generation.load(Ordering::SeqCst) == crate::runtime::fork::generation() {
            let _ = (self.inner.holds)
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
    }

    /// Trips this signal if it is a forked child's copy of a signal that
    /// live holds of the parent watched at the fork (module header,
    /// "Fork"): those holds are the parent's.
    pub(crate) fn forked_copy(&self) {
        if self.inner.holds.load(Ordering::SeqCst) == 0 {
            return;
        }
        let generation = crate::runtime::fork::generation();
        if self.inner.generation.load(Ordering::SeqCst) == generation {
            return;
        }
        let parent = self.inner.pid.load(Ordering::SeqCst);
        self.inner.holds.store(0, Ordering::SeqCst);
        self.inner.generation.store(generation, Ordering::SeqCst);
        self.abort(Some(&forked_reason(parent)));
    }

    /// Registers `callback` to run once when the signal is aborted. If it is
    /// aborted already, `callback` runs now, on this thread.
    pub fn on_abort<F>(&self, callback: F) -> CallbackHandle
    where
        F: FnOnce(Option<&str>) + Send + 'static,
    {
        self.forked_copy();
        let mut state = self.inner.state.lock();
        state.next_handle += 1;
        let handle = CallbackHandle(state.next_handle);
        if state.aborted {
            let reason = state.reason.clone();
            drop(state);
            let _ = catch_unwind(AssertUnwindSafe(|| callback(reason.as_deref())));
        } else {
            state.callbacks.push((handle.0, Box::new(callback)));
        }
        handle
    }

    /// Removes a callback that has not run yet. Returns whether it was found.
    pub fn remove_callback(&self, handle: CallbackHandle) -> bool {
        let removed = {
            let mut state = self.inner.state.lock();
            let at = state.callbacks.iter().position(|(h, _)| *h == handle.0);
            at.map(|i| state.callbacks.remove(i))
        };
        // Dropped here, with no lock held: dropping a closure may run code
        // (a C finalizer, a host object's release) that uses this signal.
        removed.is_some()
    }

    /// Blocks until the signal is aborted or `timeout` passes (`None`: no
    /// timeout). Returns whether it is aborted.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        self.forked_copy();
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut state = self.inner.state.lock();
        while !state.aborted {
            match deadline {
                Some(d) => {
                    let (guard, timed_out) = self.inner.changed.wait_until(state, d);
                    state = guard;
                    if timed_out {
                        break;
                    }
                }
                None => state = self.inner.changed.wait(state),
            }
        }
        state.aborted
    }

    /// Where this signal's wake count stands: read it *before* a host
    /// releases its interpreter lock, then pass it to
    /// [`AbortSignal::wait_or_wake`], so that a [`AbortSignal::wake_waiters`]
    /// landing in between (Ruby may call its unblock function the moment
    /// the GVL is released) is seen, never lost.
    pub fn wake_token(&self) -> WakeToken {
        WakeToken(self.inner.state.lock().wake_epoch)
    }

    /// Like [`AbortSignal::wait`], but also returns [`WaitOutcome::Woken`]
    /// once [`AbortSignal::wake_waiters`] has been called since `since` was
    /// read. Faces use it to make a blocked wait interruptible (Ruby's
    /// unblock function wakes it; the waiting thread then checks for
    /// interrupts and waits again with a fresh token).
    ///
    /// # Examples
    /// ```
    /// use mistri_locks::{AbortSignal, WaitOutcome};
    ///
    /// let signal = AbortSignal::new();
    /// let since = signal.wake_token();
    /// signal.wake_waiters(); // lands before the wait begins: not lost
    /// assert_eq!(signal.wait_or_wake(since, None), WaitOutcome::Woken);
    /// ```
    pub fn wait_or_wake(&self, since: WakeToken, timeout: Option<Duration>) -> WaitOutcome {
        self.forked_copy();
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut state = self.inner.state.lock();
        loop {
            if state.aborted {
                return WaitOutcome::Aborted;
            }
            if state.wake_epoch != since.0 {
                return WaitOutcome::Woken;
            }
            match deadline {
                Some(d) => {
                    let (guard, timed_out) = self.inner.changed.wait_until(state, d);
                    state = guard;
                    if timed_out {
                        return if state.aborted {
                            WaitOutcome::Aborted
                        } else {
                            WaitOutcome::TimedOut
                        };
                    }
                }
                None => state = self.inner.changed.wait(state),
            }
        }
    }

    /// Wakes every thread blocked in [`AbortSignal::wait_or_wake`] without
    /// aborting (and every later wait whose token was read before this).
    /// Safe to call from any thread, any number of times.
    pub fn wake_waiters(&self) {
        let mut state = self.inner.state.lock();
        state.wake_epoch = state.wake_epoch.wrapping_add(1);
        self.inner.changed.notify_all();
    }

    /// A child signal: aborted (with the parent's reason) when this one is,
    /// but aborting it leaves this one alone.
    pub fn derive(&self) -> AbortSignal {
        self.forked_copy();
        let child = AbortSignal::new();
        let mut state = self.inner.state.lock();
        if state.aborted {
            let reason = state.reason.clone();
            drop(state);
            child.abort(reason.as_deref());
        } else {
            state.children.retain(|w| w.strong_count() > 0);
            state.children.push(Arc::downgrade(&child.inner));
        }
        child
    }

    /// Do two handles point at the same signal?
    pub fn same_as(&self, other: &AbortSignal) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// The reason a forked child's copy of a hold (and of the signal its
/// holds watch) reports: it names the fork, the two processes, and what it
/// means.
pub(crate) fn forked_reason(parent: u32) -> String {
    format!(
        "lost: forked (process {} is a fork of process {parent}, which holds the lease; \
         a forked copy of a hold neither renews nor releases it: take a hold in the child)",
        std::process::id()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn abort_is_one_way_and_first_reason_wins() {
        let s = AbortSignal::new();
        assert!(!s.is_aborted());
        assert_eq!(s.reason(), None);
        assert!(s.abort(Some("first")));
        assert!(!s.abort(Some("second")));
        assert!(s.is_aborted());
        assert_eq!(s.reason().as_deref(), Some("first"));
    }

    #[test]
    fn callbacks_fire_exactly_once_even_past_a_panic() {
        let s = AbortSignal::new();
        let n = Arc::new(AtomicUsize::new(0));
        let n1 = n.clone();
        s.on_abort(move |r| {
            assert_eq!(r, Some("why"));
            n1.fetch_add(1, Ordering::SeqCst);
        });
        s.on_abort(|_| panic!("a bad callback"));
        let n2 = n.clone();
        s.on_abort(move |_| {
            n2.fetch_add(10, Ordering::SeqCst);
        });
        s.abort(Some("why"));
        s.abort(Some("again"));
        assert_eq!(n.load(Ordering::SeqCst), 11);
        // registered after the abort: runs at once
        let n3 = n.clone();
        s.on_abort(move |_| {
            n3.fetch_add(100, Ordering::SeqCst);
        });
        assert_eq!(n.load(Ordering::SeqCst), 111);
    }

    #[test]
    fn removed_callbacks_do_not_fire() {
        let s = AbortSignal::new();
        let n = Arc::new(AtomicUsize::new(0));
        let n1 = n.clone();
        let h = s.on_abort(move |_| {
            n1.fetch_add(1, Ordering::SeqCst);
        });
        assert!(s.remove_callback(h));
        assert!(!s.remove_callback(h));
        s.abort(None);
        assert_eq!(n.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_callback_may_reenter_the_signal() {
        let s = AbortSignal::new();
        let s2 = s.clone();
        let seen = Arc::new(parking_lot::Mutex::new(None));
        let seen2 = seen.clone();
        s.on_abort(move |_| {
            *seen2.lock() = Some((s2.is_aborted(), s2.reason()));
        });
        s.abort(Some("r"));
        assert_eq!(*seen.lock(), Some((true, Some("r".to_owned()))));
    }

    #[test]
    fn wait_times_out_then_sees_abort_from_another_thread() {
        let s = AbortSignal::new();
        let t0 = Instant::now();
        assert!(!s.wait(Some(Duration::from_millis(30))));
        assert!(t0.elapsed() >= Duration::from_millis(30));
        let s2 = s.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            s2.abort(None);
        });
        assert!(s.wait(Some(Duration::from_secs(10))));
        assert!(s.wait(None));
        t.join().unwrap();
    }

    #[test]
    fn wake_waiters_wakes_without_aborting() {
        let s = AbortSignal::new();
        let s2 = s.clone();
        let t = std::thread::spawn(move || {
            s2.wait_or_wake(s2.wake_token(), Some(Duration::from_secs(10)))
        });
        std::thread::sleep(Duration::from_millis(30));
        s.wake_waiters();
        assert_eq!(t.join().unwrap(), WaitOutcome::Woken);
        assert!(!s.is_aborted());
        assert_eq!(
            s.wait_or_wake(s.wake_token(), Some(Duration::from_millis(5))),
            WaitOutcome::TimedOut
        );
        // A wake between reading the token and waiting is not lost.
        let since = s.wake_token();
        s.wake_waiters();
        assert_eq!(s.wait_or_wake(since, None), WaitOutcome::Woken);
        s.abort(None);
        assert_eq!(s.wait_or_wake(s.wake_token(), None), WaitOutcome::Aborted);
    }

    #[test]
    fn derive_hears_the_parent_never_the_reverse() {
        let parent = AbortSignal::new();
        let child = parent.derive();
        let grandchild = child.derive();
        let sibling = parent.derive();
        sibling.abort(Some("sibling"));
        assert!(!parent.is_aborted());
        assert!(!child.is_aborted());
        parent.abort(Some("parent"));
        assert_eq!(child.reason().as_deref(), Some("parent"));
        assert_eq!(grandchild.reason().as_deref(), Some("parent"));
        assert_eq!(sibling.reason().as_deref(), Some("sibling"));
        let late = parent.derive();
        assert!(late.is_aborted());
        assert_eq!(late.reason().as_deref(), Some("parent"));
    }

    #[test]
    fn concurrent_aborts_fire_callbacks_once() {
        for _ in 0..50 {
            let s = AbortSignal::new();
            let n = Arc::new(AtomicUsize::new(0));
            let n1 = n.clone();
            s.on_abort(move |_| {
                n1.fetch_add(1, Ordering::SeqCst);
            });
            let wins: usize = (0..4)
                .map(|i| {
                    let s = s.clone();
                    std::thread::spawn(move || s.abort(Some(&i.to_string())))
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|t| usize::from(t.join().unwrap()))
                .sum();
            assert_eq!(wins, 1);
            assert_eq!(n.load(Ordering::SeqCst), 1);
        }
    }
}
