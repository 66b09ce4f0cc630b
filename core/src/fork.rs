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
//! Processes forked without running atfork handlers (a raw `clone`
//! syscall) are not detected; `fork()`, `os.fork`, `Process.fork`,
//! multiprocessing and every pre-forking server use `fork()`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
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
