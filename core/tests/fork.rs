//! A forked child (Puma, Unicorn, multiprocessing) while the parent holds
//! leases with a busy heartbeat: the child can use the same `Locks` at once
//! (reconnecting), makes holds of its own, and never renews or releases the
//! parent's. In its own binary: forking a process full of test threads is
//! asking for trouble.

mod common;
use common::*;
use mistri_locks::{AbortSignal, HoldOptions, Locks, ReleaseOutcome};
use mistri_locks_testkit::RedisServer;
use std::time::Duration;

fn fork_with(locks: &Locks) {
    let parent_signal = AbortSignal::new();
    let waiter = {
        let s = parent_signal.clone();
        std::thread::spawn(move || s.wait(Some(Duration::from_secs(3))))
    };
    let hold = locks
        .hold(
            "parent-job",
            HoldOptions {
                signal: Some(parent_signal.clone()),
                ..opts(0.3, 0.02)
            },
        )
        .unwrap()
        .expect("free");
    assert!(locks
        .acquire("parent-plain", Duration::from_secs(5))
        .unwrap());
    std::thread::sleep(Duration::from_millis(50)); // heartbeat thread parked mid-wait

    let code = in_child(|| {
        // The inherited copy of the parent's hold leaves its lease alone.
        if hold.release().unwrap() != ReleaseOutcome::OtherProcess {
            return 1;
        }
        // Leases the parent acquired through the same object are not ours.
        if locks.release("parent-plain").unwrap()
            || locks.renew("parent-plain", Duration::from_secs(5)).unwrap()
        {
            return 2;
        }
        if locks.hold("parent-job", opts(1.0, 0.1)).unwrap().is_some() {
            return 3; // the parent's lease is live: refused
        }
        // The child's own holds work (new engine, new connections).
        let mine = match locks.hold("child-job", opts(0.3, 0.02)).unwrap() {
            Some(h) => h,
            None => return 4,
        };
        std::thread::sleep(Duration::from_millis(400));
        if mine.is_lost() || !locks.held("child-job").unwrap() {
            return 5;
        }
        if mine.release().unwrap() != ReleaseOutcome::Released {
            return 6;
        }
        // A signal that a parent thread was waiting on still works here.
        parent_signal.abort(Some("child"));
        if !parent_signal.wait(Some(Duration::from_secs(1))) {
            return 7;
        }
        if hold.release().unwrap() != ReleaseOutcome::OtherProcess {
            return 8;
        }
        0
    });
    assert_eq!(code, 0, "child failed at step {code}");
    std::thread::sleep(Duration::from_millis(400)); // past the ttl: still renewed
    assert!(!hold.is_lost(), "{:?}", hold.signal().reason());
    assert!(
        !parent_signal.is_aborted(),
        "the child's abort reached the parent"
    );
    assert!(locks.held("parent-job").unwrap());
    assert!(locks.release("parent-plain").unwrap());
    assert_eq!(hold.release().unwrap(), ReleaseOutcome::Released);
    parent_signal.abort(None);
    assert!(waiter.join().unwrap());
}

#[test]
fn forked_children_work_and_leave_the_parents_leases_alone() {
    fork_with(&Locks::memory());
    let server = RedisServer::start();
    fork_with(&Locks::redis(&server.url(), "mistri:fork").unwrap());
    let dir = std::env::temp_dir().join(mistri_locks_testkit::unique("mistri-fork"));
    fork_with(&Locks::local(Some(&dir.join("locks.db"))).unwrap());
    let _ = std::fs::remove_dir_all(dir);
}
