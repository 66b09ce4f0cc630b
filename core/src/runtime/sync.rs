//! Fork-tolerant blocking primitives for the state that threads wait on
//! (the heartbeat engine, abort signals, the waiting lines' bells).
//!
//! Why not `parking_lot` here: parking_lot keeps its queue of parked
//! threads in user-space memory, which `fork` copies. In a forked child, a
//! condvar on which a parent thread was parked still lists that thread;
//! `notify_one` then hands the mutex to a thread that does not exist and
//! the next `lock` hangs forever. `std::sync` primitives are futex words
//! with the wait queue in the kernel, so a child inherits no phantom
//! waiters. (Short, uncontended locks elsewhere keep `parking_lot`.)
//!
//! Poisoning is ignored: every critical section leaves the state
//! consistent before anything that could panic.
//!
//! Model checking (as tokio-util does): built with `RUSTFLAGS="--cfg loom"`,
//! [`Mutex`] and [`Condvar`] wrap `loom`'s types instead of std's, so the
//! models (`signal/loom_models.rs`,
//! `waiting/loom_models.rs`, `hold/engine/loom_models.rs`;
//! docs/RELIABILITY.md, "Model-checked") explore every interleaving of
//! the real code at each lock and wait. Under loom a
//! timed wait never times out (loom has no clock): a model whose waiter
//! needs its deadline to get out reports a deadlock, which is how the
//! models prove that no wake-up is lost. Atomics stay std's: the
//! modelled code's atomics are SeqCst flags and counters, which a std
//! atomic in a model gives exactly (loads see the latest store of the
//! interleaving), while loom's treat SeqCst as AcqRel (loom's README,
//! "Unsupported features") and report stale reads that SeqCst forbids.
//! The normal build is std's types, unchanged.

use std::sync::PoisonError;
use std::time::Instant;

#[cfg(not(loom))]
use std::sync as imp;

#[cfg(loom)]
use loom::sync as imp;

pub(crate) use imp::MutexGuard;

/// A `std::sync::Mutex` whose `lock` ignores poisoning.
#[derive(Default)]
pub(crate) struct Mutex<T>(imp::Mutex<T>);

impl<T> Mutex<T> {
    #[cfg(not(loom))]
    pub(crate) const fn new(value: T) -> Self {
        Mutex(imp::Mutex::new(value))
    }

    #[cfg(loom)]
    pub(crate) fn new(value: T) -> Self {
        Mutex(imp::Mutex::new(value))
    }

    // Under loom a deadlock report names the caller's line.
    #[cfg_attr(loom, track_caller)]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lock if it is free now (a forked child's copy of a value whose
    /// lock a parent thread may have held at the fork).
    #[cfg(loom)]
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

/// A `std::sync::Condvar` with deadline waits.
#[derive(Default)]
pub(crate) struct Condvar(imp::Condvar);

impl Condvar {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Condvar(imp::Condvar::new())
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Condvar(imp::Condvar::new())
    }

    #[cfg_attr(loom, track_caller)]
    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until notified or `deadline`; the flag says whether the
    /// deadline has passed.
    #[cfg(not(loom))]
    pub(crate) fn wait_until<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Instant,
    ) -> (MutexGuard<'a, T>, bool) {
        let now = Instant::now();
        if now >= deadline {
            return (guard, true);
        }
        let (guard, result) = self
            .0
            .wait_timeout(guard, deadline - now)
            .unwrap_or_else(PoisonError::into_inner);
        (guard, result.timed_out() || Instant::now() >= deadline)
    }

    /// Under loom: a wait until notified; it never times out (module
    /// header), so the wall clock cannot make a model's runs differ.
    #[cfg(loom)]
    #[track_caller]
    pub(crate) fn wait_until<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Instant,
    ) -> (MutexGuard<'a, T>, bool) {
        let _ = deadline;
        (self.wait(guard), false)
    }

    pub(crate) fn notify_one(&self) {
        self.0.notify_one();
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}
