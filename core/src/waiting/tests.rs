use crate::{AcquireOptions, HoldOptions, Locks};
use std::time::{Duration, Instant};

#[test]
fn a_waiting_acquire_gets_the_lease_when_it_is_released() {
    let locks = Locks::memory();
    let other = locks.new_owner();
    assert!(locks.acquire("k", Duration::from_secs(10)).unwrap());
    let t = std::thread::spawn(move || {
        let opts = AcquireOptions {
            wait: Some(Duration::from_secs(10)),
            ..AcquireOptions::default()
        };
        other
            .acquire_with("k", Duration::from_secs(10), &opts)
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(locks.release("k").unwrap());
    assert!(t.join().unwrap());
}

#[test]
fn an_owner_whose_own_lease_lapsed_takes_it_again_with_a_wait() {
    let locks = Locks::memory();
    let waiting = |limit| AcquireOptions {
        wait: Some(Duration::from_millis(300)),
        limit,
        ..AcquireOptions::default()
    };
    for limit in [1, 2] {
        let key = format!("k{limit}");
        let opts = waiting(limit);
        let short = AcquireOptions {
            wait: None,
            ..opts.clone()
        };
        assert!(locks
            .acquire_with(&key, Duration::from_millis(50), &short)
            .unwrap());
        let first = locks.fence(&key).unwrap();
        if limit > 1 {
            // Still live: one owner takes one slot, not two.
            assert!(!locks
                .acquire_with(&key, Duration::from_secs(5), &short)
                .unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
        assert!(locks
            .acquire_with(&key, Duration::from_secs(5), &opts)
            .unwrap());
        assert!(locks.fence(&key).unwrap() > first);
    }
}

#[test]
fn a_wait_that_runs_out_is_a_refusal() {
    let locks = Locks::memory();
    assert!(locks.acquire("k", Duration::from_secs(10)).unwrap());
    let opts = HoldOptions {
        wait: Some(Duration::from_millis(100)),
        ..HoldOptions::default()
    };
    let started = Instant::now();
    assert!(locks.new_owner().hold("k", opts).unwrap().is_none());
    assert!(started.elapsed() >= Duration::from_millis(100));
}
