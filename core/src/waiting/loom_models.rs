//! A loom model of a waiting line's head hand-over (built with
//! `RUSTFLAGS="--cfg loom"`; docs/RELIABILITY.md, "Model-checked"). The
//! real code runs: [`crate::Locks::acquire_with`] on the Memory backend
//! (its store lock, the lines registry, every waiter's bell are loom's
//! under `cfg(loom)`), [`crate::Locks::release`] and its ring. A timed
//! wait never times out under loom (`crate::runtime::sync`): a waiter left
//! with no ring to wake it is reported as a deadlock, so "nobody is
//! stranded" is checked, not assumed.

use super::lines::lines;
use crate::{AcquireOptions, Locks};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(60);

/// Every line of the registry has exactly one head while it has waiters,
/// and it is the first in line (checked under the registry lock, taking
/// each bell's lock under it: the module's lock order).
fn assert_one_head() {
    let state = lines().state.lock();
    for adapter in state.adapters.values() {
        for line in adapter.lines.values() {
            let heads: Vec<bool> = line
                .queue
                .iter()
                .map(|(_, bell, _)| bell.state.lock().head)
                .collect();
            assert!(!heads.is_empty(), "an empty line is removed");
            assert!(heads[0], "the first waiter is the head");
            assert_eq!(heads.iter().filter(|h| **h).count(), 1, "one head");
        }
    }
}

/// Two waiters of one line while the holder releases: each gets the lease
/// exactly once, never both at once; when the head leaves with it, the
/// other becomes head and is rung by its release; the line is gone at the
/// end.
#[test]
fn two_waiters_and_a_release() {
    loom::model(|| {
        let holder = Locks::memory();
        assert!(holder.acquire("k", TTL).unwrap());
        let inside = Arc::new(AtomicUsize::new(0));
        let waiter = |locks: Locks| {
            let inside = inside.clone();
            thread::spawn(move || {
                let forever = AcquireOptions {
                    wait: Some(Duration::MAX),
                    ..AcquireOptions::default()
                };
                assert!(locks.acquire_with("k", TTL, &forever).unwrap());
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "one holder");
                assert_one_head();
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(locks.release("k").unwrap());
            })
        };
        let a = waiter(holder.new_owner());
        let b = waiter(holder.new_owner());
        assert!(holder.release("k").unwrap());
        assert_one_head();
        a.join().unwrap();
        b.join().unwrap();
        let state = lines().state.lock();
        assert!(state.adapters.is_empty(), "the line is gone");
        assert_eq!(lines().waiters.load(Ordering::SeqCst), 0);
    });
}

/// A head that leaves without the lease (its wait was interrupted by its
/// signal) while the holder releases: the other waiter is rung (by the
/// release, or by the hand-over of a ring the leaver had not acted on)
/// and gets the lease.
#[test]
fn head_leaves_without_the_lease_while_the_holder_releases() {
    loom::model(|| {
        let holder = Locks::memory();
        assert!(holder.acquire("k", TTL).unwrap());
        let signal = crate::AbortSignal::new();
        let quitter = {
            let locks = holder.new_owner();
            let signal = signal.clone();
            thread::spawn(move || {
                let opts = AcquireOptions {
                    wait: Some(Duration::MAX),
                    signal: Some(signal),
                    ..AcquireOptions::default()
                };
                // The abort may come before it joins, while it waits, or
                // after the release let it in.
                let got = locks.acquire_with("k", TTL, &opts).unwrap();
                if got {
                    assert!(locks.release("k").unwrap());
                }
            })
        };
        let stayer = {
            let locks = holder.new_owner();
            thread::spawn(move || {
                let forever = AcquireOptions {
                    wait: Some(Duration::MAX),
                    ..AcquireOptions::default()
                };
                assert!(locks.acquire_with("k", TTL, &forever).unwrap());
                assert!(locks.release("k").unwrap());
            })
        };
        signal.abort(Some("stop waiting"));
        assert!(holder.release("k").unwrap());
        quitter.join().unwrap();
        stayer.join().unwrap();
        assert!(lines().state.lock().adapters.is_empty());
    });
}
