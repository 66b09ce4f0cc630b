//! Each beat's answer carries the server's clock (issue 28 §3c): Redis
//! pipelines `TIME` with the renewals and flag reads (a Cluster: one per
//! master the renewals reach, folded into one clock), Postgres reads
//! `clock_timestamp()` in the beat's statement, and the engine compares
//! their steps with its own clock (the detector's own tests, with injected
//! readings, are in `core/src/hold/engine`: a server clock cannot be made
//! to step here without root). These servers run on this host, so their
//! clock is this host's wall clock, read between the send and the answer.

use mistri_locks::{open, Adapter, Renewal};
use mistri_locks_testkit::{PgServer, RedisCluster, RedisServer};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn wall() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// A beat with one renewal and one flag read answers with the server's
/// clock, read between the send and the answer (to the microsecond the
/// servers report).
fn beat_carries_the_server_clock(adapter: &dyn Adapter) {
    let lease = adapter
        .acquire("clocked", Duration::from_secs(30))
        .unwrap()
        .expect("free");
    let renewal = Renewal {
        lease: &lease,
        ttl: Duration::from_secs(30),
        min_left: Duration::ZERO,
    };
    let before = wall();
    let beat = adapter
        .beat(
            &[renewal],
            &["stop"],
            Instant::now() + Duration::from_secs(5),
        )
        .unwrap();
    let after = wall();
    assert!(beat.renewals[0].is_ok(), "{:?}", beat.renewals);
    assert!(beat.flags[0].is_ok(), "{:?}", beat.flags);
    let server = beat
        .server_clock
        .expect("the beat carries the server's clock");
    let tick = Duration::from_millis(1);
    assert!(
        server + tick >= before && server <= after + tick,
        "server clock {server:?} not within {before:?}..{after:?}"
    );
    assert!(adapter.release(&lease).unwrap());
}

#[test]
fn redis_beats_carry_the_servers_clock() {
    let server = RedisServer::start();
    let adapter = open(&server.url(), "mistri:clock").unwrap();
    beat_carries_the_server_clock(&*adapter);
}

#[test]
fn postgres_beats_carry_the_servers_clock() {
    let server = PgServer::start();
    let adapter = open(&server.url(), "mistri:clock").unwrap();
    beat_carries_the_server_clock(&*adapter);
}

#[test]
fn cluster_beats_carry_the_masters_clocks_folded() {
    let cluster = RedisCluster::start(3, 0);
    let adapter = open(&cluster.url(), "mistri:clock").unwrap();
    // The first beat starts the fold at a master's clock; the second runs
    // it on with this host's clock (no master stepped).
    beat_carries_the_server_clock(&*adapter);
    beat_carries_the_server_clock(&*adapter);
}
