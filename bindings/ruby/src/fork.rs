//! Fork detection: a generation number bumped in every forked child by a
//! `pthread_atfork` child handler, so a check costs one atomic load instead
//! of a `getpid` system call.
//!
//! The delivery queue (`delivery.rs`) uses it: a forked child must start
//! with an empty queue and its own delivery thread.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

static GENERATION: AtomicU32 = AtomicU32::new(0);

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Installs the handler (once per process; children inherit it).
pub fn init() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: registers a plain `extern "C" fn()` that only touches an
        // atomic (async-signal-safe, as a child handler must be). A failure
        // (ENOMEM) leaves fork detection off, which is the core's own
        // behaviour: nothing unsafe follows from it.
        unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        }
    });
}

/// The current generation: changes in every forked child.
pub fn generation() -> u32 {
    GENERATION.load(Ordering::Relaxed)
}
