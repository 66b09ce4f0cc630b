//! The hung-holder guard: `max_hold` ends the renewals (the holder is told
//! before its lease lapses), `progress_timeout` stops them when the work no
//! longer calls `touch` (told at once); the default renews forever.
//! On Memory and on a real Redis.

use mistri_locks::{HoldOptions, Locks};
use mistri_locks_testkit::{unique, RedisServer};
use std::time::{Duration, Instant};

fn opts(ttl_ms: u64, heartbeat_ms: u64) -> HoldOptions {
    HoldOptions {
        ttl: Duration::from_millis(ttl_ms),
        heartbeat: Duration::from_millis(heartbeat_ms),
        ..HoldOptions::default()
    }
}

/// max_hold 1.2 s with ttl 600 ms: renewed while that keeps the lease within
/// 1.2 s of the acquire, then told at the safe deadline — while the lease is
/// still there — and the lease is free soon after max_hold, never later.
fn max_hold_ends_renewals(locks: &Locks) {
    let key = unique("guard-max");
    let started = Instant::now();
    let hold = locks
        .hold(
            &key,
            HoldOptions {
                max_hold: Some(Duration::from_millis(1200)),
                ..opts(600, 100)
            },
        )
        .unwrap()
        .expect("free");
    // Renewed past its first ttl: the guard does not stop early.
    std::thread::sleep(Duration::from_millis(800));
    assert!(!hold.signal().is_aborted(), "{:?}", hold.signal().reason());
    assert!(locks.held(&key).unwrap());
    assert!(hold.signal().wait(Some(Duration::from_secs(5))));
    let told = started.elapsed();
    let reason = hold.signal().reason().unwrap();
    assert!(reason.contains("max_hold"), "{reason}");
    assert!(reason.starts_with("lease lost:"), "{reason}");
    assert!(hold.is_lost());
    // Told before the lease lapsed: it is still there now, nobody has it.
    let other = locks.new_owner();
    assert!(
        told < Duration::from_millis(1400),
        "told {told:?} after the acquire"
    );
    // Never renewed past max_hold: free by max_hold (+ clock slack).
    let free_by = started + Duration::from_millis(1200 + 300);
    loop {
        if other.acquire(&key, Duration::from_secs(5)).unwrap() {
            break;
        }
        assert!(
            Instant::now() < free_by,
            "still held {:?} after the acquire",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(started.elapsed() >= Duration::from_millis(700));
    let _ = hold.release();
    assert_eq!(locks.stats().lost_max_hold, 1);
}

/// progress_timeout 300 ms: touched every 50 ms it keeps renewing; when the
/// touches stop it is told (reason: stalled) while the lease is still held,
/// and release still deletes the lease.
fn progress_timeout_stops_a_stalled_hold(locks: &Locks) {
    let key = unique("guard-progress");
    let hold = locks
        .hold(
            &key,
            HoldOptions {
                progress_timeout: Some(Duration::from_millis(300)),
                ..opts(3000, 100)
            },
        )
        .unwrap()
        .expect("free");
    let until = Instant::now() + Duration::from_millis(900);
    while Instant::now() < until {
        hold.touch();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!hold.signal().is_aborted(), "{:?}", hold.signal().reason());
    let last_touch = Instant::now();
    assert!(hold.signal().wait(Some(Duration::from_secs(5))));
    let after = last_touch.elapsed();
    let reason = hold.signal().reason().unwrap();
    assert!(reason.contains("stalled"), "{reason}");
    assert!(after >= Duration::from_millis(250), "told after {after:?}");
    // Noticed at a renewal: within the timeout + one renew interval (+ load).
    assert!(after < Duration::from_millis(1500), "told after {after:?}");
    assert!(hold.is_lost());
    // The lease is still there (not renewed, not yet lapsed) ...
    assert!(locks.held(&key).unwrap());
    // ... and release deletes it.
    assert_eq!(
        hold.release().unwrap(),
        mistri_locks::ReleaseOutcome::Released
    );
    assert!(!locks.held(&key).unwrap());
    assert_eq!(locks.stats().lost_stalled, 1);
}

/// Without the guard, a hold that is never touched renews on.
fn default_keeps_renewing(locks: &Locks) {
    let key = unique("guard-off");
    let hold = locks.hold(&key, opts(300, 50)).unwrap().expect("free");
    std::thread::sleep(Duration::from_millis(1000));
    assert!(!hold.signal().is_aborted(), "{:?}", hold.signal().reason());
    assert!(locks.held(&key).unwrap());
    hold.release().unwrap();
}

#[test]
fn guard_on_memory() {
    let locks = Locks::memory();
    max_hold_ends_renewals(&locks);
    progress_timeout_stops_a_stalled_hold(&locks.new_owner());
    default_keeps_renewing(&locks);
}

#[test]
fn guard_on_redis() {
    let server = RedisServer::start();
    let url = server.url();
    max_hold_ends_renewals(&Locks::redis(&url, &unique("ns")).unwrap());
    progress_timeout_stops_a_stalled_hold(&Locks::redis(&url, &unique("ns")).unwrap());
    default_keeps_renewing(&Locks::redis(&url, &unique("ns")).unwrap());
}

#[test]
fn guard_options_are_checked() {
    let locks = Locks::memory();
    for bad in [
        HoldOptions {
            max_hold: Some(Duration::ZERO),
            ..HoldOptions::default()
        },
        HoldOptions {
            progress_timeout: Some(Duration::ZERO),
            ..HoldOptions::default()
        },
    ] {
        let err = locks.hold("k", bad).unwrap_err().to_string();
        assert!(
            err.contains("max_hold") || err.contains("progress_timeout"),
            "{err}"
        );
    }
}
