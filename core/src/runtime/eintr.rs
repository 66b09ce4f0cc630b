//! A call that a signal cut short (`EINTR`), tried again within what is
//! left of its deadline: the one retry every backend's socket layer uses.
//!
//! A host's signal handler (Ruby's `trap("CHLD")`, Python's `signal`
//! module, a C program's `SIGALRM`) runs on whichever thread the kernel
//! picks, and a socket read or write with a timeout (`SO_RCVTIMEO`) on
//! that thread then fails with `EINTR` even when the handler asked for
//! `SA_RESTART` (signal(7)); so does one resumed after `SIGSTOP`/`SIGCONT`
//! with no handler at all. Two defences, both here:
//!
//! - The library's own threads never take a host signal
//!   ([`crate::runtime::thread::spawn`]), and a host thread's round trip
//!   to Redis holds them off for its duration ([`HostSignalsHeld`]: the
//!   kernel hands a process-wide signal to another thread, or keeps it
//!   pending until the round trip ends, within its I/O deadline; a Ruby or
//!   Python host runs its handlers only once the call returns anyway).
//!   redis-rs gives no way to resume a reply read cut short (it marks the
//!   reply to be skipped), so preventing the interruption is what keeps a
//!   non-idempotent command (an acquire with a fresh token) from being
//!   sent twice.
//! - What is still cut short is tried again by [`retry`], bounded by the
//!   call's deadline. What an attempt is decides whether that is safe, and
//!   each caller says which: retrying the read system call of a socket we
//!   own (Postgres) re-reads the same reply and sends nothing; a Redis
//!   command is sent again on a fresh connection only when it is
//!   idempotent (a compare-and-delete release).

use std::time::Instant;

/// An error that may say "a signal interrupted the call".
pub(crate) trait Interrupted {
    /// Was this a read or write cut short by a signal (EINTR)?
    fn interrupted(&self) -> bool;
}

impl Interrupted for std::io::Error {
    fn interrupted(&self) -> bool {
        self.kind() == std::io::ErrorKind::Interrupted
    }
}

/// Runs `attempt` until it ends in anything but an interruption, or until
/// `deadline` has passed (then the interruption is the answer). The
/// caller makes `attempt` safe to repeat (see the module header) and
/// points its timeouts at `deadline` inside it: a retried socket call must
/// wait only for what is left, not for a fresh full timeout.
pub(crate) fn retry<T, E: Interrupted>(
    deadline: Instant,
    mut attempt: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    loop {
        match attempt() {
            Err(e) if e.interrupted() && Instant::now() < deadline => continue,
            done => return done,
        }
    }
}

/// Holds the asynchronous signals off the calling thread while alive (a
/// host thread's round trip); puts the thread's mask back on drop. Nests.
/// Two system calls on a host thread (about 2 µs on a sandboxed kernel,
/// 4% of a loopback round trip; far less on bare Linux); none on a library
/// thread, or inside another guard.
pub(crate) struct HostSignalsHeld(Option<libc::sigset_t>);

std::thread_local! {
    /// A guard is alive on this thread (an inner one changes nothing).
    static HELD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl HostSignalsHeld {
    /// Blocks the asynchronous signals in this thread until dropped. If
    /// the mask cannot be set (never, with valid arguments), nothing is
    /// held and [`retry`] is the only defence.
    pub(crate) fn new() -> Self {
        if super::thread::deaf() || HELD.with(std::cell::Cell::get) {
            return HostSignalsHeld(None);
        }
        let previous = super::thread::block_asynchronous().ok();
        HELD.with(|held| held.set(previous.is_some()));
        HostSignalsHeld(previous)
    }
}

impl Drop for HostSignalsHeld {
    fn drop(&mut self) {
        if let Some(previous) = &self.0 {
            super::thread::restore(previous);
            HELD.with(|held| held.set(false));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};
    use std::time::Duration;

    #[test]
    fn retries_an_interruption_and_returns_the_answer() {
        let mut tries = 0;
        let got: Result<u32, Error> = retry(Instant::now() + Duration::from_secs(60), || {
            tries += 1;
            match tries {
                1 | 2 => Err(Error::from(ErrorKind::Interrupted)),
                _ => Ok(7),
            }
        });
        assert_eq!(got.unwrap(), 7);
        assert_eq!(tries, 3);
    }

    #[test]
    fn other_errors_and_a_passed_deadline_end_it() {
        let mut tries = 0;
        let got: Result<(), Error> = retry(Instant::now() + Duration::from_secs(60), || {
            tries += 1;
            Err(Error::from(ErrorKind::ConnectionReset))
        });
        assert_eq!(got.unwrap_err().kind(), ErrorKind::ConnectionReset);
        assert_eq!(tries, 1);
        let mut tries = 0;
        let got: Result<(), Error> = retry(Instant::now(), || {
            tries += 1;
            Err(Error::from(ErrorKind::Interrupted))
        });
        assert_eq!(got.unwrap_err().kind(), ErrorKind::Interrupted);
        assert_eq!(tries, 1, "no time left: the interruption is the answer");
    }

    #[test]
    fn host_signals_are_held_while_alive_and_the_mask_comes_back() {
        std::thread::spawn(|| {
            let mask = || {
                // SAFETY: a null `set` only reads the mask into `now`.
                unsafe {
                    let mut now: libc::sigset_t = std::mem::zeroed();
                    libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
                    libc::sigismember(&now, libc::SIGCHLD) == 1
                }
            };
            assert!(!mask());
            {
                let _held = HostSignalsHeld::new();
                assert!(mask());
                {
                    let _inner = HostSignalsHeld::new();
                    assert!(mask());
                }
                assert!(mask(), "an inner guard leaves the outer's mask");
            }
            assert!(!mask());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_library_thread_keeps_its_mask_under_a_guard() {
        let blocked = crate::runtime::thread::spawn("mistri-test", || {
            drop(HostSignalsHeld::new());
            // SAFETY: a null `set` only reads the mask into `now`.
            unsafe {
                let mut now: libc::sigset_t = std::mem::zeroed();
                libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
                libc::sigismember(&now, libc::SIGCHLD) == 1
            }
        });
        assert!(blocked.unwrap().join().unwrap(), "a guard's drop unblocked");
    }
}
