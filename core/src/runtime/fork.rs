//! Fork detection: a generation number bumped in every forked child by a
//! `pthread_atfork` child handler, so "are we still the process that made
//! this?" costs one atomic load instead of a `getpid` system call on every
//! operation.
//!
//! What carries a generation: connection pools (a child opens its own
//! connections), the heartbeat engine (a child starts empty), the issued
//! leases of a `Locks` (a child owns none of its parent's), a `Hold` (a
//! child's copy neither renews nor releases) and the buffer of owner-token
//! randomness (a child must never mint its parent's tokens).
//!
//! [`ForkLocal`] is the other half: state that a forked child must rebuild
//! without touching the parent's copy. A mutex that another thread of the
//! parent held at the moment of `fork` stays locked forever in the child
//! (the thread that would unlock it does not exist there), so the child
//! never locks an inherited engine, pool or issued-lease mutex: on first
//! use in a new generation it builds a fresh value (optionally seeded from
//! the old one if that can be had without blocking) and leaks the old one.
//!
//! [`enter_section`] covers what no rebuild can fix: state that lives
//! outside our objects (SQLite's per-process lock bookkeeping). A fork
//! waits until no such section runs.
//!
//! Processes forked without running atfork handlers (a raw `clone`
//! syscall) are not detected; `fork()`, `os.fork`, `Process.fork`,
//! multiprocessing and every pre-forking server use `fork()`.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// Sections that `fork` must not cut in half: how many run now, and
/// whether a fork is waiting for them to end.
static IN_SECTION: AtomicUsize = AtomicUsize::new(0);
static FORKING: AtomicBool = AtomicBool::new(false);

extern "C" fn before_fork() {
    FORKING.store(true, Ordering::SeqCst);
    while IN_SECTION.load(Ordering::SeqCst) != 0 {
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

extern "C" fn after_fork() {
    FORKING.store(false, Ordering::SeqCst);
}

extern "C" fn after_fork_in_child() {
    IN_SECTION.store(0, Ordering::SeqCst);
    FORKING.store(false, Ordering::SeqCst);
}

/// A stretch of code that a `fork` waits for (see [`enter_section`]).
pub(crate) struct Section(());

impl Drop for Section {
    fn drop(&mut self) {
        IN_SECTION.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Enters a section that `fork()` waits for: a `pthread_atfork` prepare
/// handler holds the fork until every section has ended, and new sections
/// wait while a fork is pending. For SQLite calls: SQLite keeps its lock
/// bookkeeping (and mutexes) in process memory, so a child forked in the
/// middle of a transaction of another thread inherits locks that nobody
/// will ever release, and its own first transaction waits forever.
///
/// Sections must be short (bounded I/O) and must not nest a `fork`.
pub(crate) fn enter_section() -> Section {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: registers plain `extern "C" fn()`s that touch only
        // atomics (and sleep, in the prepare handler, which runs before the
        // fork in the forking thread). Children inherit the registration.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork),
                Some(after_fork_in_child),
            );
        }
    });
    loop {
        while FORKING.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        IN_SECTION.fetch_add(1, Ordering::SeqCst);
        if !FORKING.load(Ordering::SeqCst) {
            return Section(());
        }
        // A fork began meanwhile: step back out and let it through.
        IN_SECTION.fetch_sub(1, Ordering::SeqCst);
    }
}

/// For the loom models (`hold/engine/loom_models.rs`): from now on this
/// process counts as a forked child, as after `fork()` (a loom model
/// cannot fork; the threads that would not exist in a child are the
/// model's threads that never unlock).
#[cfg(all(test, loom))]
pub(crate) fn pretend_fork() {
    in_child();
}

/// The current fork generation: different in every forked child.
pub(crate) fn generation() -> u64 {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: registers a plain `extern "C" fn()` that only touches an
        // atomic (async-signal-safe, as a child handler must be). Children
        // inherit the registration. A failure (ENOMEM) would leave fork
        // detection off; at process start there is no such shortage.
        unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        }
    });
    GENERATION.load(Ordering::SeqCst)
}

struct Slot<T> {
    generation: u64,
    value: T,
}

/// A value that each process generation has its own copy of.
///
/// Reading is one atomic load plus a compare in the common case. In a
/// forked child the first [`ForkLocal::get`] builds the child's value with
/// `renew(&parents_value)` and never frees the parent's (it may be locked
/// by a thread that does not exist here, and a reference to it may still
/// be live on this thread's stack). One value is leaked per fork per
/// object that the child uses.
pub(crate) struct ForkLocal<T> {
    slot: AtomicPtr<Slot<T>>,
    renew: fn(&T) -> T,
    // Owns `T`s and hands out `&T` to any thread: Send needs `T: Send`,
    // Sync needs `T: Send + Sync` (a value built on one thread may be
    // dropped on another). The raw pointer alone would claim both always.
    _owns: PhantomData<(Box<T>, std::sync::Mutex<T>)>,
}

impl<T> ForkLocal<T> {
    /// `value` for this process; `renew` makes a child's value from the
    /// parent's (it must not block on the parent's locks: use `try_lock`).
    pub(crate) fn new(value: T, renew: fn(&T) -> T) -> Self {
        let slot = Box::new(Slot {
            generation: generation(),
            value,
        });
        ForkLocal {
            slot: AtomicPtr::new(Box::into_raw(slot)),
            renew,
            _owns: PhantomData,
        }
    }

    /// This process's value.
    pub(crate) fn get(&self) -> &T {
        let current = generation();
        loop {
            let ptr = self.slot.load(Ordering::Acquire);
            // SAFETY: `slot` always points to a live `Slot` made by
            // `Box::into_raw`; slots are freed only in `Drop` (which has
            // `&mut self`, so no reference from `get` can be alive then).
            let slot = unsafe { &*ptr };
            if slot.generation == current {
                return &slot.value;
            }
            let fresh = Box::into_raw(Box::new(Slot {
                generation: current,
                value: (self.renew)(&slot.value),
            }));
            match self
                .slot
                .compare_exchange(ptr, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                // The parent's slot is leaked on purpose (see above).
                Ok(_) => {
                    // SAFETY: `fresh` was just published and is never freed
                    // before `Drop`.
                    return unsafe { &(*fresh).value };
                }
                Err(_) => {
                    // Another thread of the child won; drop ours, use theirs.
                    // SAFETY: `fresh` was never shared.
                    drop(unsafe { Box::from_raw(fresh) });
                }
            }
        }
    }
}

impl<T> Drop for ForkLocal<T> {
    fn drop(&mut self) {
        let ptr = *self.slot.get_mut();
        // SAFETY: the current slot came from `Box::into_raw` and, with
        // `&mut self`, nothing borrows it. Slots of earlier generations were
        // leaked on purpose and are not reachable from here.
        drop(unsafe { Box::from_raw(ptr) });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_forked_child_sees_a_new_generation() {
        let parent = super::generation();
        // SAFETY: the child only reads an atomic and calls _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = if super::generation() != parent { 0 } else { 1 };
            // SAFETY: _exit takes no pointers and never returns.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: valid out-pointer; our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(super::generation(), parent);
    }
}
