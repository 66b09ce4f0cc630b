//! Failure paths: a Redis that goes away, scripts flushed, credentials, and
//! the process-wide configuration (kept here, in its own binary, because it
//! is global state).

mod common;
use common::*;
use mistri_locks::{Error, Locks, ReleaseOutcome};
use mistri_locks_testkit::{RedisConfig, RedisServer};
use std::time::Instant;

#[test]
fn redis_going_away_loses_the_hold_once_the_deadline_passes() {
    let mut server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:test").unwrap();
    let hold = locks.hold("job", opts(0.5, 0.05)).unwrap().expect("free");
    std::thread::sleep(secs(0.1));
    server.stop();
    let stopped = Instant::now();
    assert!(hold.signal().wait(Some(secs(3.0))), "never told");
    let took = stopped.elapsed();
    // Renewals keep failing; the loss is declared at the safe deadline:
    // last confirmed renewal (< 50 ms before the stop) + ttl (0.5 s) - the
    // margin (0.125 s), from the engine's timer; strictly before the ttl.
    assert!(took >= secs(0.3), "declared lost too early: {took:?}");
    assert!(took < secs(0.45), "declared lost too late: {took:?}");
    assert!(hold.is_lost());
    let reason = hold.signal().reason().unwrap();
    assert!(
        reason.contains("lease lost") && reason.contains("deadline"),
        "{reason}"
    );
    assert_eq!(hold.release().unwrap(), ReleaseOutcome::Lost);
    // And a plain call says what is wrong.
    let err = locks.acquire("other", secs(1.0)).unwrap_err();
    assert!(matches!(err, Error::Connection(_)), "{err}");
}

#[test]
fn flushed_scripts_are_reloaded_by_the_heartbeat() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:test").unwrap();
    let hold = locks.hold("job", opts(0.3, 0.05)).unwrap().expect("free");
    for _ in 0..3 {
        assert_eq!(server.command("SCRIPT FLUSH").trim(), "+OK");
        std::thread::sleep(secs(0.15));
    }
    std::thread::sleep(secs(0.3));
    assert!(!hold.is_lost(), "{:?}", hold.signal().reason());
    assert!(locks.held("job").unwrap());
    assert_eq!(hold.release().unwrap(), ReleaseOutcome::Released);
}

#[test]
fn credentials_come_from_the_url() {
    let server = RedisServer::start_with(RedisConfig {
        password: Some("s3cret-pw".into()),
        ..RedisConfig::default()
    });
    let good = Locks::redis(&server.url(), "mistri:test").unwrap();
    assert!(good.acquire("k", secs(5.0)).unwrap());

    let anonymous = Locks::redis(
        &format!("redis://127.0.0.1:{}/0", server.port()),
        "mistri:test",
    )
    .unwrap();
    let err = anonymous.held("k").unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");

    let wrong = Locks::redis(
        &format!("redis://:nope@127.0.0.1:{}/0", server.port()),
        "mistri:test",
    )
    .unwrap();
    let err = wrong.held("k").unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
    assert!(!err.to_string().contains("nope"), "password leaked: {err}");
}

#[test]
fn unreachable_redis_is_a_clear_connection_error() {
    // Bind a port, then free it: nothing listens there now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let locks = Locks::redis(&format!("redis://127.0.0.1:{port}/0"), "mistri:test").unwrap();
    for err in [
        locks.acquire("k", secs(1.0)).unwrap_err(),
        locks.held("k").unwrap_err(),
        locks.set_flag("k", secs(1.0)).unwrap_err(),
        locks.hold("k", opts(1.0, 1.0)).unwrap_err(),
    ] {
        assert!(matches!(err, Error::Connection(_)), "{err}");
        assert!(
            err.to_string().contains(&format!("127.0.0.1:{port}")),
            "{err}"
        );
    }
}

#[test]
fn process_wide_adapter() {
    assert!(mistri_locks::locks().is_none());
    assert!(
        mistri_locks::hold("job", opts(1.0, 1.0)).unwrap().is_none(),
        "no adapter, no hold"
    );
    assert!(
        mistri_locks::hold("", opts(1.0, 1.0)).is_err(),
        "still validated"
    );
    let memory = Locks::memory();
    assert!(mistri_locks::configure(Some(memory.clone())).is_none());
    let hold = mistri_locks::hold("job", opts(1.0, 1.0))
        .unwrap()
        .expect("configured");
    assert!(memory.held("job").unwrap());
    assert!(
        mistri_locks::hold("job", opts(1.0, 1.0)).unwrap().is_none(),
        "held"
    );
    drop(hold);
    assert!(mistri_locks::configure(None).is_some());
    assert!(mistri_locks::hold("job", opts(1.0, 1.0)).unwrap().is_none());
}
