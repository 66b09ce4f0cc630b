//! Every thread the library starts: named, and deaf to the host's
//! asynchronous signals.
//!
//! A host process (Ruby's `SIGCHLD` on every child exit, a Python
//! `signal.setitimer`, a C program's `SIGALRM`) aims signals at the
//! process, and the kernel hands each to any thread that does not block
//! it. Landing on one of ours, a signal cuts a socket read short
//! (`EINTR`), and runs the host's handler on a thread the host's runtime
//! does not know. So [`spawn`] blocks every asynchronous signal in the
//! calling thread for the moment of the spawn (a new thread inherits its
//! creator's mask), then puts the caller's mask back: the host's own
//! threads keep theirs, ours never receive a signal meant for the host.
//!
//! The synchronous signals stay unblocked (`SIGSEGV`, `SIGBUS`, `SIGFPE`,
//! `SIGILL`, `SIGTRAP`, `SIGABRT`): they are raised by the thread's own
//! fault, and blocking them only turns a crash report into silence.
//!
//! Threads of the host that call into us still take signals; the socket
//! layers hold signals off a round trip and retry what they still cut
//! short ([`crate::runtime::eintr`]).

use std::io;
use std::thread::JoinHandle;

/// Signals a library thread keeps: those a fault of its own raises.
const SYNCHRONOUS: [libc::c_int; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGABRT,
];

/// Starts `body` on a new thread named `name`, with every asynchronous
/// signal blocked in it (see the module header). The caller's signal mask
/// is the same after the call as before.
///
/// # Errors
/// What the OS says when it refuses a thread.
pub(crate) fn spawn<T: Send + 'static>(
    name: &str,
    body: impl FnOnce() -> T + Send + 'static,
) -> io::Result<JoinHandle<T>> {
    let previous = block_asynchronous()?;
    let started = std::thread::Builder::new().name(name.into()).spawn(|| {
        DEAF.with(|deaf| deaf.set(true));
        body()
    });
    restore(&previous);
    started
}

std::thread_local! {
    /// This thread was started by [`spawn`]: its mask already blocks every
    /// host signal ([`crate::runtime::eintr::HostSignalsHeld`] then costs
    /// no system call).
    static DEAF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Was this thread started by [`spawn`] (host signals blocked for life)?
pub(super) fn deaf() -> bool {
    DEAF.with(std::cell::Cell::get)
}

/// Blocks the asynchronous signals in this thread; returns the old mask.
pub(super) fn block_asynchronous() -> io::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data; sigfillset/sigdelset initialise and
    // edit the local set, pthread_sigmask reads `all` and writes `previous`,
    // both valid for the call.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        for sig in SYNCHRONOUS {
            libc::sigdelset(&mut all, sig);
        }
        match libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut previous) {
            0 => Ok(previous),
            errno => Err(io::Error::from_raw_os_error(errno)),
        }
    }
}

/// Puts back a mask saved by [`block_asynchronous`].
pub(super) fn restore(previous: &libc::sigset_t) {
    // SAFETY: `previous` is a mask pthread_sigmask filled; SIG_SETMASK with
    // a valid set cannot fail (EINVAL is only for a bad `how`).
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, previous, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This thread's signal mask.
    fn mask() -> libc::sigset_t {
        // SAFETY: a null `set` only reads the mask into `now`.
        unsafe {
            let mut now: libc::sigset_t = std::mem::zeroed();
            assert_eq!(
                libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now),
                0
            );
            now
        }
    }

    fn blocked(set: &libc::sigset_t, sig: libc::c_int) -> bool {
        // SAFETY: `set` is a mask pthread_sigmask filled.
        unsafe { libc::sigismember(set, sig) == 1 }
    }

    #[test]
    fn a_library_thread_blocks_the_hosts_signals_and_keeps_the_faults() {
        let inside = spawn("mistri-test", mask).unwrap().join().unwrap();
        for sig in [
            libc::SIGCHLD,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGALRM,
            libc::SIGUSR1,
            libc::SIGPIPE,
            libc::SIGWINCH,
        ] {
            assert!(
                blocked(&inside, sig),
                "signal {sig} reaches a library thread"
            );
        }
        for sig in SYNCHRONOUS {
            assert!(!blocked(&inside, sig), "fault signal {sig} is blocked");
        }
    }

    #[test]
    fn the_callers_mask_is_unchanged() {
        // Run on a fresh thread so the test harness's own mask is not ours to edit.
        std::thread::spawn(|| {
            // SAFETY: an empty set with SIG_SETMASK; then a set with SIGUSR2.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGUSR2);
                libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            }
            spawn("mistri-test", || ()).unwrap().join().unwrap();
            let after = mask();
            assert!(blocked(&after, libc::SIGUSR2));
            assert!(!blocked(&after, libc::SIGCHLD));
            assert!(!blocked(&after, libc::SIGINT));
        })
        .join()
        .unwrap();
    }
}
