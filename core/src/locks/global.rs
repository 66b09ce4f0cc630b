//! The process-wide configured owner handle (the seed's `Mistri.locks =
//! ...`): the one slot every face reads. `hold` on the configured handle
//! goes through here in every language; a face keeps a reference to its
//! own host object next to it only so that `locks()` returns the very
//! object that was configured (Python: `bindings/python/src/lib.rs`, Ruby:
//! `MistriLocks.@locks`), and sets both under one lock.

use crate::error::Result;
use crate::hold::{Hold, HoldOptions};
use crate::locks::Locks;
use crate::waiting::Waiting;
use std::sync::{PoisonError, RwLock};

// std's RwLock: no user-space waiter queue for a forked child to inherit.
static CONFIGURED: RwLock<Option<Locks>> = RwLock::new(None);

/// Sets (or with `None`, clears) the process-wide handle (a [`Locks`]). Returns the one
/// it replaces.
pub fn configure(locks: Option<Locks>) -> Option<Locks> {
    std::mem::replace(
        &mut *CONFIGURED.write().unwrap_or_else(PoisonError::into_inner),
        locks,
    )
}

/// The process-wide handle, if one is configured.
pub fn locks() -> Option<Locks> {
    CONFIGURED
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// [`Locks::hold`] on the configured handle; `Ok(None)` when none is
/// configured or the lease is held elsewhere.
///
/// # Errors
/// As [`Locks::hold`].
pub fn hold(key: &str, opts: HoldOptions) -> Result<Option<Hold>> {
    match locks() {
        Some(l) => l.hold(key, opts),
        None => {
            // Still tell a caller its arguments are wrong.
            crate::args::check_key("key", key)?;
            opts.validate()?;
            Ok(None)
        }
    }
}

/// How every face starts a hold: on `locks`, or with `None` on the
/// configured handle. The arguments are checked either way; `Ok(None)`
/// when nothing is configured. The returned [`Waiting`] has done no I/O
/// yet: drive it with [`Waiting::wait`] (one try when
/// [`Waiting::waits`] is false) or [`Waiting::poll`] where the host needs
/// an interruptible wait.
///
/// # Errors
/// Invalid key or options.
pub fn start_hold(
    locks: Option<&Locks>,
    key: &str,
    opts: HoldOptions,
) -> Result<Option<Waiting<Option<Hold>>>> {
    match locks.cloned().or_else(self::locks) {
        Some(locks) => locks.start_hold(key, opts).map(Some),
        None => {
            crate::args::check_key("key", key)?;
            opts.validate()?;
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal::AbortSignal;

    #[test]
    fn a_hold_started_with_an_aborted_signal_is_granted_and_stays_aborted() {
        let locks = Locks::memory();
        let signal = AbortSignal::new();
        signal.abort(Some("done already"));
        let opts = HoldOptions {
            signal: Some(signal.clone()),
            ..HoldOptions::default()
        };
        let waiting = start_hold(Some(&locks), "pre", opts.clone())
            .unwrap()
            .unwrap();
        assert!(!waiting.waits());
        let hold = waiting
            .wait()
            .unwrap()
            .expect("a single try is made anyway");
        assert!(hold.signal().is_aborted());
        // Waiting for it is different: an aborted signal ends a wait.
        let waiting = HoldOptions {
            wait: Some(std::time::Duration::from_secs(5)),
            ..opts
        };
        let other = Locks::memory();
        let started = start_hold(Some(&other), "pre2", waiting).unwrap().unwrap();
        assert!(started.wait().unwrap().is_none());
        hold.release().unwrap();
    }

    #[test]
    fn nothing_configured_still_checks_the_arguments() {
        let _ = configure(None);
        assert!(start_hold(None, "", HoldOptions::default()).is_err());
        assert!(start_hold(None, "k", HoldOptions::default())
            .unwrap()
            .is_none());
    }
}
