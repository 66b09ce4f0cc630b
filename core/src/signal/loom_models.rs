//! Loom models of the [`AbortSignal`] latch and its callbacks (built with
//! `RUSTFLAGS="--cfg loom"`; `scripts/test` runs them, docs/RELIABILITY.md
//! "Model-checked" lists them). Each model is two threads racing on one
//! signal; loom runs every interleaving of their lock, wait and atomic
//! operations (up to `LOOM_MAX_PREEMPTIONS` forced switches). A timed wait
//! never times out under loom (`crate::runtime::sync`), so a lost wake-up
//! shows as a deadlock.

use super::{AbortSignal, WaitOutcome};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

/// A callback that counts its runs and checks the reason it is given.
fn counting(signal: &AbortSignal, runs: &Arc<AtomicUsize>) -> super::CallbackHandle {
    let runs = runs.clone();
    signal.on_abort(move |reason| {
        assert!(reason.is_some(), "a callback is given the winning reason");
        runs.fetch_add(1, Ordering::SeqCst);
    })
}

/// Two aborts at once: exactly one trips the signal, its reason stays,
/// and a callback registered before runs exactly once.
#[test]
fn abort_racing_abort() {
    loom::model(|| {
        let signal = AbortSignal::new();
        let runs = Arc::new(AtomicUsize::new(0));
        counting(&signal, &runs);
        let other = signal.clone();
        let t = thread::spawn(move || other.abort(Some("b")));
        let won_a = signal.abort(Some("a"));
        let won_b = t.join().unwrap();
        assert!(won_a ^ won_b, "exactly one abort trips the signal");
        let winner = if won_a { "a" } else { "b" };
        assert_eq!(signal.reason().as_deref(), Some(winner));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    });
}

/// A callback registered while another thread aborts runs exactly once:
/// by the aborting thread (registered first) or inline (registered after).
#[test]
fn on_abort_racing_abort() {
    loom::model(|| {
        let signal = AbortSignal::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let other = signal.clone();
        let t = thread::spawn(move || assert!(other.abort(Some("stop"))));
        counting(&signal, &runs);
        // Returned from `on_abort`: if the abort came first, it already ran.
        let after_register = runs.load(Ordering::SeqCst);
        t.join().unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1, "runs exactly once");
        assert!(after_register <= 1);
        assert_eq!(signal.reason().as_deref(), Some("stop"));
    });
}

/// Removing a callback while another thread aborts: either it is removed
/// (and never runs) or it ran (and is not found), never both or neither.
#[test]
fn remove_callback_racing_abort() {
    loom::model(|| {
        let signal = AbortSignal::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let handle = counting(&signal, &runs);
        let other = signal.clone();
        let t = thread::spawn(move || other.abort(Some("stop")));
        let removed = signal.remove_callback(handle);
        assert!(t.join().unwrap());
        assert_eq!(usize::from(removed) + runs.load(Ordering::SeqCst), 1);
    });
}

/// A wait with a deadline while another thread aborts ends aborted (the
/// deadline is an hour: under loom it never passes, so a lost wake-up
/// would be reported as a deadlock).
#[test]
fn wait_with_deadline_racing_abort() {
    loom::model(|| {
        let signal = AbortSignal::new();
        let other = signal.clone();
        let t = thread::spawn(move || other.abort(Some("stop")));
        assert!(signal.wait(Some(Duration::from_secs(3600))));
        t.join().unwrap();
    });
}

/// `wake_waiters` racing a `wait_or_wake` whose token was read first: the
/// wait ends `Woken`, whether the wake lands before it blocks or after.
#[test]
fn wake_waiters_racing_wait_or_wake() {
    loom::model(|| {
        let signal = AbortSignal::new();
        let since = signal.wake_token();
        let other = signal.clone();
        let t = thread::spawn(move || other.wake_waiters());
        let outcome = signal.wait_or_wake(since, Some(Duration::from_secs(3600)));
        assert_eq!(outcome, WaitOutcome::Woken);
        t.join().unwrap();
        assert!(!signal.is_aborted());
    });
}

/// A child derived while its parent is aborted hears the abort, with the
/// parent's reason, whichever comes first.
#[test]
fn derive_racing_abort() {
    loom::model(|| {
        let parent = AbortSignal::new();
        let other = parent.clone();
        let t = thread::spawn(move || other.abort(Some("parent")));
        let child = parent.derive();
        t.join().unwrap();
        assert!(child.is_aborted());
        assert_eq!(child.reason().as_deref(), Some("parent"));
    });
}
