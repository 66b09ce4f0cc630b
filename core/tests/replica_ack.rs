//! Replica acknowledgement from every replica that can be promoted (issue
//! 28 §2): `min_replicas=all` makes each `WAIT` ask for every replica
//! connected to the master when the connection was made, so a replica that
//! stops acknowledging makes the write fall short and the hold is told
//! (with `min_replicas=1` the other replica's ack would have covered it, and
//! a failover to the silent one could lose the lease: so a number below the
//! connected replicas is refused at every connect).

mod common;
use common::*;
use mistri_locks::{Error, Locks};
use mistri_locks_testkit::{RedisCluster, RedisSentinels};
use std::time::Duration;

#[test]
fn sentinel_min_replicas_all_tells_the_hold_when_a_replica_stops_acknowledging() {
    let set = RedisSentinels::start(); // a master and two replicas
    let url = format!("{}?min_replicas=all&replica_timeout=0.3", set.url());
    let locks = Locks::redis(&url, "mistri:all").unwrap();
    // Both replicas in sync: an acquire acknowledged by all (a fresh set's
    // replicas may still be loading the master's data).
    let start = std::time::Instant::now();
    while !matches!(locks.acquire("plain", secs(30.0)), Ok(true)) {
        assert!(
            start.elapsed() < secs(20.0),
            "the replicas never acknowledged"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let all_hold = locks.hold("all", opts(2.0, 0.1)).unwrap().expect("free");
    let (_, replica) = set.data_ports();
    set.pause(replica, true);
    // Told by its safe deadline (before ttl): WAIT 2 gets 1.
    let told = all_hold.signal().wait(Some(secs(4.0)));
    let refused = locks.acquire("plain-2", secs(30.0));
    set.pause(replica, false);
    assert!(told, "min_replicas=all: the hold was not told");
    assert!(
        all_hold.signal().reason().unwrap().contains("lease lost"),
        "{:?}",
        all_hold.signal().reason()
    );
    assert!(
        matches!(refused, Err(Error::Backend(ref m)) if m.contains("all")),
        "an acquire not acknowledged by all is an error: {refused:?}"
    );
}

/// A numeric `min_replicas` below the replicas connected to the master is
/// refused at connect, naming both numbers and pointing to `=all` (`WAIT 1`
/// with two replicas may be met by the one that is not promoted); as many
/// as are connected, and `all`, are accepted.
fn numeric_min_replicas_below_the_connected_is_refused(url: &str, connected: u32) {
    let with = |n: &str| {
        Locks::redis(
            &format!("{url}?min_replicas={n}&replica_timeout=0.3"),
            "mistri:n",
        )
        .unwrap()
    };
    for below in 1..connected {
        match with(&below.to_string()).acquire("job", secs(30.0)) {
            Err(Error::Config(msg)) => {
                for part in [
                    format!("min_replicas={below}"),
                    format!("{connected} connected replicas"),
                    "min_replicas=all".to_owned(),
                ] {
                    assert!(msg.contains(&part), "{part:?} not in: {msg}");
                }
            }
            other => {
                panic!("min_replicas={below} of {connected}: wanted a ConfigError, got {other:?}")
            }
        }
    }
    for n in [connected.to_string(), "all".to_owned()] {
        let locks = with(&n);
        // A WAIT may fall short while a replica catches up (an error, not a
        // refusal); the setting itself is never refused.
        let start = std::time::Instant::now();
        loop {
            match locks.acquire("job", secs(30.0)) {
                Ok(true) => break,
                Err(Error::Config(msg)) => panic!("min_replicas={n} refused: {msg}"),
                other => assert!(
                    start.elapsed() < secs(20.0),
                    "min_replicas={n}: never acknowledged: {other:?}"
                ),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(locks.renew("job", secs(30.0)).unwrap(), "min_replicas={n}");
        assert!(locks.release("job").unwrap(), "min_replicas={n}");
    }
}

#[test]
fn sentinel_numeric_min_replicas_below_the_connected_replicas_is_refused() {
    let set = RedisSentinels::start(); // a master and two replicas, in sync
    numeric_min_replicas_below_the_connected_is_refused(&set.url(), 2);
}

#[test]
fn cluster_min_replicas_all_waits_for_each_masters_replicas() {
    // Two replicas a master: `min_replicas=1` is refused on every master.
    let cluster = RedisCluster::start(3, 2);
    numeric_min_replicas_below_the_connected_is_refused(&cluster.url(), 2);
    let url = format!("{}?min_replicas=all&replica_timeout=0.3", cluster.url());
    let locks = Locks::redis(&url, "mistri:all").unwrap();
    for i in 0..6 {
        let key = format!("job-{i}");
        assert!(locks.acquire(&key, secs(30.0)).unwrap());
        assert!(locks.renew(&key, secs(30.0)).unwrap());
        assert!(locks.release(&key).unwrap());
    }
    let hold = locks.hold("held", opts(2.0, 0.1)).unwrap().expect("free");
    std::thread::sleep(Duration::from_millis(2500)); // past the ttl
    assert!(!hold.is_lost(), "{:?}", hold.signal().reason());
    hold.release().unwrap();
}
