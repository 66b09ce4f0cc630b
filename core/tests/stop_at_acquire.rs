//! The stop flag's first read rides on the acquire (issue 40, item 7):
//! where the backend can ([`mistri_locks::Adapter::acquire_reading_flag`]:
//! Redis pipelines an `EXISTS` after the acquire script; Memory and Local
//! read it in this process), a hold made while its flag is up is stopped
//! as it is made, with no read of its own (no beat), and the stop is
//! typed as such. A backend that does not (the default) keeps the engine's
//! immediate read: the same outcome, one beat later.

mod common;
use common::{BeatHook, Wrapped};
use mistri_locks::{HoldOptions, Interruption, Locks};
use mistri_locks_testkit::{unique, RedisServer};
use std::sync::Arc;
use std::time::Duration;

fn opts(stop: &str) -> HoldOptions {
    HoldOptions {
        ttl: Duration::from_secs(30),
        heartbeat: Duration::from_secs(10),
        stop_key: Some(stop.to_owned()),
        ..HoldOptions::default()
    }
}

/// The flag is up before the acquire: the hold comes back stopped, and
/// the engine made no beat for it (its renewal is 10 s away; the read was
/// the acquire's).
fn stopped_as_it_is_made(locks: &Locks) {
    // One try, and the faces' one try (`Locks::start_hold`: a wait of
    // zero). A try from a waiting line (`acquire_queued`) does not read
    // the flag: the engine reads it at once.
    for (n, wait) in [None, Some(Duration::ZERO)].into_iter().enumerate() {
        let stop = unique("stop");
        locks.set_flag(&stop, Duration::from_secs(60)).unwrap();
        let hold = locks
            .hold(
                &unique("job"),
                HoldOptions {
                    wait,
                    ..opts(&stop)
                },
            )
            .unwrap()
            .unwrap();
        assert!(
            hold.signal().is_aborted(),
            "a flag up at the acquire must stop the hold as it is made (wait {wait:?})"
        );
        assert_eq!(
            hold.interruption(),
            Some(Interruption::Stopped {
                flag: Some(stop.clone())
            })
        );
        assert!(hold.signal().reason().unwrap().starts_with("stop flag"));
        assert_eq!(locks.stats().beats, 0, "no read of its own");
        assert_eq!(locks.stats().stop_flags_seen, n as u64 + 1);
        hold.release().unwrap();
    }
}

#[test]
fn memory_a_flag_up_at_the_acquire_stops_the_hold_as_it_is_made() {
    stopped_as_it_is_made(&Locks::memory());
}

#[test]
fn local_a_flag_up_at_the_acquire_stops_the_hold_as_it_is_made() {
    let dir = std::env::temp_dir().join(unique("mistri-first-read"));
    std::fs::create_dir_all(&dir).unwrap();
    let locks = Locks::local(Some(&dir.join("locks.db"))).unwrap();
    stopped_as_it_is_made(&locks);
    drop(locks);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn redis_a_flag_up_at_the_acquire_stops_the_hold_as_it_is_made() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:first").unwrap();
    stopped_as_it_is_made(&locks);
    // The script is loaded by the first acquire (NOSCRIPT, then EVAL with
    // its source): a second hold, after SCRIPT FLUSH, reads the flag too.
    server.command("SCRIPT FLUSH");
    let stop = unique("stop");
    locks.set_flag(&stop, Duration::from_secs(60)).unwrap();
    let hold = locks.hold(&unique("job"), opts(&stop)).unwrap().unwrap();
    assert!(hold.signal().is_aborted());
    hold.release().unwrap();
    // Down at the acquire: the hold runs.
    let hold = locks
        .hold(&unique("job"), opts(&unique("stop")))
        .unwrap()
        .unwrap();
    assert!(!hold.signal().is_aborted());
    hold.release().unwrap();
}

/// Passes every batch on as is.
#[derive(Default)]
struct Plain;

impl BeatHook for Plain {}

/// A backend without the capability (a wrapper that forwards only the
/// trait's required methods) keeps the engine's immediate read: the flag
/// up at the acquire still stops the hold, by the engine's first beat.
#[test]
fn without_the_capability_the_engine_reads_the_flag_at_once() {
    let locks = Locks::from_arc(Arc::new(Wrapped::<Plain>::default()));
    let stop = unique("stop");
    locks.set_flag(&stop, Duration::from_secs(60)).unwrap();
    let hold = locks.hold(&unique("job"), opts(&stop)).unwrap().unwrap();
    // The protocol's bound is a tick (1 s here) after the acquire; the
    // read is due at once, and 10 s leaves room for a busy machine.
    assert!(hold.signal().wait(Some(Duration::from_secs(10))));
    assert_eq!(
        hold.interruption(),
        Some(Interruption::Stopped { flag: Some(stop) })
    );
    assert!(locks.stats().beats >= 1, "read by the engine");
    hold.release().unwrap();
}
