//! Replica acknowledgement from every replica that can be promoted (issue
//! 28 §2): `min_replicas=all` makes each `WAIT` ask for every replica
//! connected to the master when the connection was made, so a replica that
//! stops acknowledging makes the write fall short and the hold is told
//! (with `min_replicas=1` the other replica's ack would have covered it, and
//! a failover to the silent one could lose the lease).

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
    let one = Locks::redis(
        &format!("{}?min_replicas=1&replica_timeout=0.3", set.url()),
        "mistri:all",
    )
    .unwrap();
    let all_hold = locks.hold("all", opts(2.0, 0.1)).unwrap().expect("free");
    let one_hold = one.hold("one", opts(2.0, 0.1)).unwrap().expect("free");
    let (_, replica) = set.data_ports();
    set.pause(replica, true);
    // Told by its safe deadline (before ttl): WAIT 2 gets 1.
    let told = all_hold.signal().wait(Some(secs(4.0)));
    // The hazard min_replicas=1 leaves: the other replica's ack suffices.
    let one_lost = one_hold.is_lost();
    let refused = locks.acquire("plain-2", secs(30.0));
    set.pause(replica, false);
    assert!(told, "min_replicas=all: the hold was not told");
    assert!(
        all_hold.signal().reason().unwrap().contains("lease lost"),
        "{:?}",
        all_hold.signal().reason()
    );
    assert!(!one_lost, "min_replicas=1 is met by the other replica");
    assert!(
        matches!(refused, Err(Error::Backend(ref m)) if m.contains("all")),
        "an acquire not acknowledged by all is an error: {refused:?}"
    );
    one_hold.release().unwrap();
}

#[test]
fn cluster_min_replicas_all_waits_for_each_masters_replicas() {
    let cluster = RedisCluster::start(3, 1);
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
