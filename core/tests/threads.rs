//! Thread-count test, in its own test binary so that no other test's
//! threads are counted.

mod common;
use common::*;
use mistri_locks::{HoldOptions, Locks};
use mistri_locks_testkit::{thread_count, RedisServer};

fn thousand_holds(a: &Locks) {
    let before = thread_count();
    let holds: Vec<_> = (0..1000)
        .map(|i| {
            a.hold(
                &format!("many-{i}"),
                HoldOptions {
                    stop_key: Some(format!("stop-many-{i}")),
                    ..opts(3.0, 0.3)
                },
            )
            .unwrap()
            .expect("free")
        })
        .collect();
    // Past the ttl: they must have been renewed. A ttl of 3 s, not 1 s:
    // with 1 s one of the thousand was lost on a clean-clone run at a load
    // average of 10 on two cores (the promise working, not the test).
    std::thread::sleep(secs(3.5));
    let during = thread_count();
    // The scheduler, the I/O thread and (Redis, Local) the flag listener.
    assert!(
        during <= before + 3,
        "threads: {before} before, {during} with 1000 holds"
    );
    let lost: Vec<_> = (holds.iter().enumerate())
        .filter(|(_, h)| h.is_lost())
        .map(|(i, h)| format!("many-{i}: {:?}", h.signal().reason()))
        .collect();
    assert!(lost.is_empty(), "{} lost: {lost:?}", lost.len());
    assert_eq!(a.active_holds(), 1000);
    for i in (0..1000).step_by(97) {
        assert!(a.held(&format!("many-{i}")).unwrap());
    }
    drop(holds);
    assert_eq!(a.active_holds(), 0);
    assert!(!a.held("many-500").unwrap());
}

#[test]
fn a_thousand_holds_run_on_a_bounded_number_of_threads() {
    thousand_holds(&Locks::memory());
    let server = RedisServer::start();
    thousand_holds(&Locks::redis(&server.url(), "mistri:test").unwrap());
    let dir = std::env::temp_dir().join(mistri_locks_testkit::unique("mistri-threads"));
    thousand_holds(&Locks::local(Some(&dir.join("locks.db"))).unwrap());
    let _ = std::fs::remove_dir_all(dir);
}
