//! Fork-tolerant blocking primitives for the state that threads wait on
//! (the heartbeat engine, abort signals).
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

use std::sync::{MutexGuard, PoisonError};
use std::time::Instant;

/// A `std::sync::Mutex` whose `lock` ignores poisoning.
#[derive(Default)]
pub(crate) struct Mutex<T>(std::sync::Mutex<T>);

impl<T> Mutex<T> {
    pub(crate) const fn new(value: T) -> Self {
        Mutex(std::sync::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A `std::sync::Condvar` with deadline waits.
#[derive(Default)]
pub(crate) struct Condvar(std::sync::Condvar);

impl Condvar {
    pub(crate) const fn new() -> Self {
        Condvar(std::sync::Condvar::new())
    }

    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until notified or `deadline`; the flag says whether the
    /// deadline has passed.
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

    pub(crate) fn notify_one(&self) {
        self.0.notify_one();
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}
