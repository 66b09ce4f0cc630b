//! The idle-connection pool every network backend keeps: one stack of idle
//! connections per address, at most [`MAX_IDLE`] each, held in a
//! [`ForkLocal`] so a forked child starts with an empty pool.
//!
//! The lock is a leaf, held only to push or pop: a connection the pool lets
//! go (over the cap, of an earlier epoch, the parent's in a child) is
//! dropped after the lock is released, since closing a socket is a system
//! call (and TLS may try to write a close alert).
//!
//! What may go back is the caller's rule (open, succeeded, not broken): the
//! pool only bounds how many and forgets those of an earlier epoch.
//!
//! An epoch is the caller's count of "everything I had is stale" (with a
//! Redis Sentinel: how many times the master was forgotten). A
//! [`IdlePool::take`] in a new epoch clears every stack first; a
//! [`IdlePool::put`] of a connection taken in an older epoch drops it.
//! Callers without one pass 0.

use crate::runtime::fork::ForkLocal;
use parking_lot::Mutex;
use std::collections::HashMap;

/// Idle connections kept per address.
pub(crate) const MAX_IDLE: usize = 16;

struct Idle<C> {
    stacks: HashMap<String, Vec<C>>,
    /// The epoch the idle connections were taken (and put back) in.
    epoch: u64,
}

impl<C> Idle<C> {
    fn empty() -> Self {
        Idle {
            stacks: HashMap::new(),
            epoch: 0,
        }
    }

    /// A forked child's pool: empty. The parent's connections are dropped
    /// (our copies of its sockets only; nothing is written to them) if its
    /// pool can be had without blocking, else leaked with the parent's
    /// pool.
    fn for_child(parent: &Mutex<Idle<C>>) -> Mutex<Idle<C>> {
        let inherited = parent.try_lock().map(|mut p| std::mem::take(&mut p.stacks));
        drop(inherited);
        Mutex::new(Idle::empty())
    }
}

/// Per-address stacks of idle connections `C`, fork-local (see the module
/// header).
pub(crate) struct IdlePool<C> {
    idle: ForkLocal<Mutex<Idle<C>>>,
}

impl<C> Default for IdlePool<C> {
    fn default() -> Self {
        IdlePool {
            idle: ForkLocal::new(Mutex::new(Idle::empty()), Idle::for_child),
        }
    }
}

impl<C> IdlePool<C> {
    /// The most recently put idle connection to `addr`, if any. `epoch` is
    /// the caller's epoch now: a newer one than the pool's clears the pool
    /// first.
    pub(crate) fn take(&self, addr: &str, epoch: u64) -> Option<C> {
        let mut idle = self.idle.get().lock();
        let stale = if idle.epoch != epoch {
            idle.epoch = epoch;
            std::mem::take(&mut idle.stacks)
        } else {
            HashMap::new()
        };
        let con = idle.stacks.get_mut(addr).and_then(Vec::pop);
        drop(idle);
        drop(stale);
        con
    }

    /// Puts back `con` to `addr`, taken when the caller's epoch was
    /// `epoch`. Kept if that is still the pool's epoch and `addr` has fewer
    /// than [`MAX_IDLE`] idle; else dropped (outside the lock).
    pub(crate) fn put(&self, addr: &str, epoch: u64, con: C) {
        let mut idle = self.idle.get().lock();
        if idle.epoch != epoch {
            drop(idle);
            drop(con);
            return;
        }
        let rest = match idle.stacks.get_mut(addr) {
            Some(stack) if stack.len() >= MAX_IDLE => Some(con),
            Some(stack) => {
                stack.push(con);
                None
            }
            None => {
                idle.stacks.insert(addr.to_owned(), vec![con]);
                None
            }
        };
        drop(idle);
        drop(rest);
    }

    /// How many connections to `addr` are idle (tests).
    #[cfg(test)]
    fn idle(&self, addr: &str) -> usize {
        self.idle.get().lock().stacks.get(addr).map_or(0, Vec::len)
    }
}

#[cfg(test)]
mod tests {
    use super::{IdlePool, MAX_IDLE};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A connection that counts its drops.
    struct Con(usize, Arc<AtomicUsize>);

    impl Drop for Con {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn keeps_at_most_max_idle_per_address_and_drops_the_rest() {
        let pool = IdlePool::default();
        let dropped = Arc::new(AtomicUsize::new(0));
        for i in 0..MAX_IDLE + 3 {
            pool.put("a", 0, Con(i, dropped.clone()));
        }
        assert_eq!(pool.idle("a"), MAX_IDLE);
        assert_eq!(dropped.load(Ordering::SeqCst), 3);
        // Last in, first out: the newest kept comes back first.
        assert_eq!(pool.take("a", 0).map(|c| c.0), Some(MAX_IDLE - 1));
    }

    #[test]
    fn addresses_have_their_own_stacks() {
        let pool = IdlePool::default();
        let dropped = Arc::new(AtomicUsize::new(0));
        for i in 0..MAX_IDLE {
            pool.put("a", 0, Con(i, dropped.clone()));
        }
        // "a" is full; "b" still takes its own MAX_IDLE.
        pool.put("b", 0, Con(100, dropped.clone()));
        assert_eq!(pool.idle("b"), 1);
        assert_eq!(dropped.load(Ordering::SeqCst), 0);
        assert_eq!(pool.take("b", 0).map(|c| c.0), Some(100));
        assert!(pool.take("b", 0).is_none());
        assert!(pool.take("c", 0).is_none());
        assert_eq!(pool.idle("a"), MAX_IDLE);
    }

    #[test]
    fn a_new_epoch_clears_the_pool_and_refuses_older_connections() {
        let pool = IdlePool::default();
        let dropped = Arc::new(AtomicUsize::new(0));
        pool.put("a", 0, Con(1, dropped.clone()));
        pool.put("b", 0, Con(2, dropped.clone()));
        // The caller's epoch moved: nothing of the old one comes back.
        assert!(pool.take("a", 1).is_none());
        assert_eq!(dropped.load(Ordering::SeqCst), 2);
        assert_eq!(pool.idle("b"), 0);
        // One taken in epoch 0 and put back now is dropped too.
        pool.put("a", 0, Con(3, dropped.clone()));
        assert_eq!(dropped.load(Ordering::SeqCst), 3);
        assert_eq!(pool.idle("a"), 0);
        // One of the current epoch is kept.
        pool.put("a", 1, Con(4, dropped.clone()));
        assert_eq!(pool.take("a", 1).map(|c| c.0), Some(4));
    }

    #[test]
    fn a_forked_child_starts_empty_and_closes_the_parents_copies() {
        let pool = IdlePool::default();
        let dropped = Arc::new(AtomicUsize::new(0));
        pool.put("a", 0, Con(1, dropped.clone()));
        // SAFETY: the child only uses the pool (no lock is held at the
        // fork: this test holds none), reads atomics and calls _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let empty = pool.take("a", 0).is_none();
            // The parent's copy was dropped (closed) when the child's pool
            // was made.
            let closed = dropped.load(Ordering::SeqCst) == 1;
            let code = if empty && closed { 0 } else { 1 };
            // SAFETY: _exit takes no pointers and never returns.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: valid out-pointer; our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        // The parent's pool is untouched.
        assert_eq!(dropped.load(Ordering::SeqCst), 0);
        assert_eq!(pool.take("a", 0).map(|c| c.0), Some(1));
    }
}
