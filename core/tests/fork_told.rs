//! A forked child's copy of a hold is told (issue 28 §4): on its first use
//! in the child it reports lost, and its signal trips with a reason naming
//! the fork; a child that only looks at the signal it passed sees the same.
//! The parent's hold is unaffected. In its own binary: forking a process
//! full of test threads is asking for trouble.

mod common;
use common::*;
use mistri_locks::{AbortSignal, HoldOptions, Locks, ReleaseOutcome};
use mistri_locks_testkit::RedisServer;
use std::time::Duration;

fn names_the_fork(reason: Option<String>) -> bool {
    reason.is_some_and(|r| r.contains("forked") && r.contains(&std::process::id().to_string()))
}

fn told_in(locks: &Locks) {
    // Two holds: one the child asks about, one whose signal alone the
    // child looks at (a work loop that only checks its signal).
    let asked = AbortSignal::new();
    let watched = AbortSignal::new();
    let bystander = AbortSignal::new();
    let with = |signal: &AbortSignal| HoldOptions {
        signal: Some(signal.clone()),
        stop_key: Some("stop".into()),
        ..opts(0.6, 0.05)
    };
    let hold = locks.hold("told", with(&asked)).unwrap().expect("free");
    let other = locks.hold("told-2", with(&watched)).unwrap().expect("free");

    let code = in_child(|| {
        // At once, on first access: lost, the signal tripped, the reason
        // names the fork (this child's pid).
        if !hold.is_lost() {
            return 1;
        }
        if !hold.signal().is_aborted() || !names_the_fork(hold.signal().reason()) {
            return 2;
        }
        if !asked.is_aborted() {
            return 3;
        }
        // Only the signal: tripped on its first read, and a wait returns
        // at once.
        if !watched.wait(Some(Duration::from_secs(5))) || !names_the_fork(watched.reason()) {
            return 4;
        }
        // A signal no hold watched is left alone.
        if bystander.is_aborted() {
            return 5;
        }
        // The copy still leaves the parent's lease alone.
        if hold.release().unwrap() != ReleaseOutcome::OtherProcess {
            return 6;
        }
        // A hold the child takes on an inherited, tripped signal's key is
        // its own and is not reported lost.
        let mine = locks.hold("child-job", opts(0.6, 0.05)).unwrap();
        match mine {
            Some(h) if !h.is_lost() && !h.signal().is_aborted() => {}
            _ => return 7,
        }
        0
    });
    assert_eq!(code, 0, "child failed at step {code}");
    // The parent: unaffected, still renewing past the ttl.
    std::thread::sleep(Duration::from_millis(800));
    for (h, s) in [(&hold, &asked), (&other, &watched)] {
        assert!(!h.is_lost(), "{:?}", h.signal().reason());
        assert!(!s.is_aborted(), "{:?}", s.reason());
    }
    assert!(locks.held("told").unwrap());
    assert_eq!(hold.release().unwrap(), ReleaseOutcome::Released);
    assert_eq!(other.release().unwrap(), ReleaseOutcome::Released);

    // A hold released before the fork leaves its signal alone in the child.
    let done = AbortSignal::new();
    let gone = locks.hold("told", with(&done)).unwrap().expect("free");
    assert_eq!(gone.release().unwrap(), ReleaseOutcome::Released);
    let code = in_child(|| i32::from(done.is_aborted()));
    assert_eq!(code, 0, "a released hold's signal tripped in the child");
}

#[test]
fn a_forked_childs_copy_of_a_hold_is_told_on_first_use() {
    told_in(&Locks::memory());
    let server = RedisServer::start();
    told_in(&Locks::redis(&server.url(), "mistri:fork-told").unwrap());
    let dir = std::env::temp_dir().join(mistri_locks_testkit::unique("mistri-fork-told"));
    told_in(&Locks::local(Some(&dir.join("locks.db"))).unwrap());
    let _ = std::fs::remove_dir_all(dir);
}
