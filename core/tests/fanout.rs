//! Announcements reach only who needs them (`core/src/push.rs`): a
//! process subscribes exactly the raised channel of each stop key its holds
//! watch and the channel of each waiting line it has, never a pattern; the
//! set follows holds and lines as they come and go; a release is announced
//! to the next line of the key's queue only; and with a few dozen
//! processes on one namespace, those that neither watch nor wait hear no
//! message at all (counted in each process with
//! [`mistri_locks::internals::messages_heard`]).
//!
//! The test binary re-executes itself for the fleet's processes: `child`
//! does nothing unless `MISTRI_TEST_ROLE` is set.

mod common;
use common::*;
use mistri_locks::internals::slot_of;
use mistri_locks::{AcquireOptions, Locks};
use mistri_locks_testkit::{command_on, unique, RedisCluster as TestCluster, RedisServer};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NS: &str = "mistri:fan";

/// The raw reply of `command` on `server`, its integers in order.
fn integers(server: &RedisServer, command: &str) -> Vec<i64> {
    server
        .command(command)
        .lines()
        .filter_map(|l| l.trim().strip_prefix(':'))
        .filter_map(|n| n.parse().ok())
        .collect()
}

fn numsub(server: &RedisServer, channel: &str) -> i64 {
    integers(server, &format!("PUBSUB NUMSUB {channel}"))
        .last()
        .copied()
        .unwrap_or(-1)
}

fn numpat(server: &RedisServer) -> i64 {
    integers(server, "PUBSUB NUMPAT")
        .first()
        .copied()
        .unwrap_or(-1)
}

/// Channels matching `pattern` that have subscribers.
fn channels(server: &RedisServer, pattern: &str) -> usize {
    server
        .command(&format!("PUBSUB CHANNELS {pattern}"))
        .lines()
        .filter(|l| l.starts_with(NS))
        .count()
}

/// Connections subscribed to anything (each listening process has one).
fn listening(server: &RedisServer) -> usize {
    server
        .command("CLIENT LIST")
        .lines()
        .filter(|l| l.contains(" sub=") && !l.contains(" sub=0 "))
        .count()
}

fn until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A thread that waits up to `wait` for `key` (ttl 30 s): did it get it?
fn wait_in_thread(locks: &Locks, key: &str, wait: Duration) -> std::thread::JoinHandle<bool> {
    let (locks, key) = (locks.clone(), key.to_owned());
    std::thread::spawn(move || {
        locks
            .acquire_with(
                &key,
                secs(30.0),
                &AcquireOptions {
                    wait: Some(wait),
                    ..AcquireOptions::default()
                },
            )
            .unwrap()
    })
}

fn raised(stop: &str) -> String {
    format!("{NS}:raised:{{{stop}}}")
}

#[test]
fn the_subscription_set_follows_holds_and_lines() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), NS).unwrap();
    let (a, b) = (unique("stop-a"), unique("stop-b"));
    let hold_a = locks.hold(&unique("job"), stop_opts(&a)).unwrap().unwrap();
    let hold_b = locks.hold(&unique("job"), stop_opts(&b)).unwrap().unwrap();
    until("both stop keys subscribed", secs(3.0), || {
        numsub(&server, &raised(&a)) == 1 && numsub(&server, &raised(&b)) == 1
    });
    assert_eq!(numpat(&server), 0, "no pattern subscription");
    assert_eq!(listening(&server), 1, "one connection for both");

    // A waiting line subscribes its own channel while it waits.
    let key = unique("wanted");
    let other = Locks::redis(&server.url(), NS).unwrap();
    let held = other.acquire(&key, secs(30.0)).unwrap();
    assert!(held);
    let waiter = wait_in_thread(&locks, &key, secs(10.0));
    let lines = format!("{NS}:next:{{{key}}}:*");
    until("the line's channel subscribed", secs(3.0), || {
        channels(&server, &lines) == 1
    });
    // The release is announced to that line: the waiter has it at once
    // (well before its 2 s safety poll).
    let released = Instant::now();
    other.release(&key).unwrap();
    assert!(waiter.join().unwrap());
    assert!(released.elapsed() < secs(1.0), "{:?}", released.elapsed());

    // Holds and lines that go lose their subscriptions (after the linger).
    hold_a.release().unwrap();
    until("stop key a unsubscribed", secs(5.0), || {
        numsub(&server, &raised(&a)) == 0
    });
    assert_eq!(numsub(&server, &raised(&b)), 1, "b is still watched");
    until("the line's channel unsubscribed", secs(5.0), || {
        channels(&server, &lines) == 0
    });
    hold_b.release().unwrap();
    locks.release(&key).unwrap();
    until("nothing subscribed", secs(8.0), || listening(&server) == 0);
}

#[test]
fn a_stop_for_a_key_watched_after_the_listener_started_arrives_by_push() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), NS).unwrap();
    let first = locks
        .hold(&unique("job"), stop_opts(&unique("stop")))
        .unwrap()
        .unwrap();
    until("the listener runs", secs(3.0), || listening(&server) == 1);
    std::thread::sleep(Duration::from_millis(400)); // its slices go cold
    let stop = unique("stop");
    let later = locks
        .hold(&unique("job"), stop_opts(&stop))
        .unwrap()
        .unwrap();
    until("the new key subscribed", secs(3.0), || {
        numsub(&server, &raised(&stop)) == 1
    });
    // Once the subscription is confirmed the listener reads the flag once
    // (the no-gap read); let that pass so the stop can only come by push.
    std::thread::sleep(Duration::from_millis(200));
    let pushed = locks.stats().pushes_received;
    let raiser = Locks::redis(&server.url(), NS).unwrap();
    raiser.set_flag(&stop, secs(60.0)).unwrap();
    // The heartbeat is 5 s: a signal within 3 s is not the tick's poll.
    assert!(later.signal().wait(Some(secs(3.0))));
    until("the stop's message counted", secs(3.0), || {
        locks.stats().pushes_received == pushed + 1
    });
    assert!(!first.signal().is_aborted());
}

#[test]
fn a_reconnect_resubscribes_flags_and_lines() {
    let mut server = RedisServer::start();
    let locks = Locks::redis(&server.url(), NS).unwrap();
    let stop = unique("stop");
    let hold = locks
        .hold(&unique("job"), stop_opts(&stop))
        .unwrap()
        .unwrap();
    let key = unique("wanted");
    let other = Locks::redis(&server.url(), NS).unwrap();
    assert!(other.acquire(&key, secs(60.0)).unwrap());
    let waiter = {
        let locks = locks.clone();
        let key = key.clone();
        std::thread::spawn(move || {
            // A try made while the server is down is an error: wait again.
            for _ in 0..200 {
                let got = locks.acquire_with(
                    &key,
                    secs(30.0),
                    &AcquireOptions {
                        wait: Some(secs(20.0)),
                        ..AcquireOptions::default()
                    },
                );
                match got {
                    Ok(got) => return Some((got, Instant::now())),
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
            None
        })
    };
    let lines = format!("{NS}:next:{{{key}}}:*");
    until("subscribed", secs(3.0), || {
        numsub(&server, &raised(&stop)) == 1 && channels(&server, &lines) == 1
    });
    // The lease and the queue survive the restart (saved, loaded again), so
    // the line keeps waiting through it and its channel must come back.
    assert!(server.command("SAVE").contains("OK"));
    server.restart();
    until("both subscribed again", secs(15.0), || {
        numsub(&server, &raised(&stop)) == 1 && channels(&server, &lines) == 1
    });
    // The release after the reconnect reaches the line by push: well
    // before the refused head's 2 s safety poll.
    let released = Instant::now();
    let mut freed = false;
    for _ in 0..100 {
        match other.release(&key) {
            Ok(done) => {
                freed = done;
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    assert!(freed, "the saved lease was released");
    let (got, at) = waiter.join().unwrap().expect("the waiter gave up");
    assert!(got);
    let took = at.duration_since(released);
    assert!(took < secs(1.5), "the hand-off took {took:?}: not by push");
    let raiser = Locks::redis(&server.url(), NS).unwrap();
    raiser.set_flag(&stop, secs(60.0)).unwrap();
    assert!(hold.signal().wait(Some(secs(3.0))));
}

/// The fleet's processes (roles), each reporting `heard N` at the end.
#[test]
fn child() {
    let Ok(role) = std::env::var("MISTRI_TEST_ROLE") else {
        return;
    };
    let url = std::env::var("MISTRI_TEST_TARGET").unwrap();
    let me = std::env::var("MISTRI_TEST_KEY").unwrap();
    let locks = Locks::redis(&url, NS).unwrap();
    let mut out = std::io::stdout();
    match role.as_str() {
        // Holds a lease watching its own stop key until it is raised.
        "watcher" => {
            let hold = locks
                .hold(&format!("job-{me}"), stop_opts(&format!("stop-{me}")))
                .unwrap()
                .unwrap();
            writeln!(out, "ready").unwrap();
            assert!(hold.signal().wait(Some(secs(30.0))), "never stopped");
            hold.release().unwrap();
        }
        // Takes the shared key in turn five times.
        "waiter" => {
            writeln!(out, "ready").unwrap();
            for _ in 0..5 {
                let got = locks
                    .acquire_with(
                        "shared",
                        secs(10.0),
                        &AcquireOptions {
                            wait: Some(secs(30.0)),
                            ..AcquireOptions::default()
                        },
                    )
                    .unwrap();
                assert!(got, "no turn");
                std::thread::sleep(Duration::from_millis(5));
                locks.release("shared").unwrap();
            }
        }
        // Neither watches nor waits: pairs, a hold without a stop key,
        // flags nobody watches.
        "bystander" => {
            writeln!(out, "ready").unwrap();
            let hold = locks
                .hold(&format!("quiet-{me}"), opts(60.0, 5.0))
                .unwrap()
                .unwrap();
            for i in 0..100 {
                let key = format!("pair-{me}-{}", i % 5);
                assert!(locks.acquire(&key, secs(10.0)).unwrap());
                locks.release(&key).unwrap();
            }
            locks
                .set_flag(&format!("unwatched-{me}"), secs(10.0))
                .unwrap();
            hold.release().unwrap();
        }
        other => panic!("unknown role {other}"),
    }
    writeln!(out, "heard {}", mistri_locks::internals::messages_heard()).unwrap();
}

fn spawn(role: &str, url: &str, me: &str) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env("MISTRI_TEST_ROLE", role)
        .env("MISTRI_TEST_TARGET", url)
        .env("MISTRI_TEST_KEY", me)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

fn read_line(out: &mut BufReader<std::process::ChildStdout>, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "no {prefix:?} line");
        // libtest may have written `test child ... ` on the same line.
        if let Some(at) = line.find(prefix) {
            return line[at + prefix.len()..].trim().to_owned();
        }
    }
}

#[test]
fn processes_that_neither_watch_nor_wait_hear_nothing() {
    const WATCHERS: usize = 10;
    const WAITERS: usize = 6;
    const BYSTANDERS: usize = 10;
    let server = RedisServer::start();
    let url = server.url();
    let mut watchers: Vec<_> = (0..WATCHERS)
        .map(|i| spawn("watcher", &url, &i.to_string()))
        .collect();
    for (_, out) in &mut watchers {
        read_line(out, "ready");
    }
    until("every watcher subscribed its stop key", secs(10.0), || {
        (0..WATCHERS).all(|i| numsub(&server, &raised(&format!("stop-{i}"))) == 1)
    });
    let mut waiters: Vec<_> = (0..WAITERS)
        .map(|i| spawn("waiter", &url, &i.to_string()))
        .collect();
    let mut bystanders: Vec<_> = (0..BYSTANDERS)
        .map(|i| spawn("bystander", &url, &i.to_string()))
        .collect();
    for (_, out) in waiters.iter_mut().chain(bystanders.iter_mut()) {
        read_line(out, "ready");
    }
    assert_eq!(numpat(&server), 0, "no pattern subscription");
    let mut heard = |(mut child, mut out): (Child, BufReader<_>)| -> u64 {
        let n = read_line(&mut out, "heard ").parse().unwrap();
        assert!(child.wait().unwrap().success());
        n
    };
    let bystander_heard: Vec<u64> = bystanders.drain(..).map(&mut heard).collect();
    let waiter_heard: Vec<u64> = waiters.drain(..).map(&mut heard).collect();
    let raiser = Locks::redis(&url, NS).unwrap();
    for i in 0..WATCHERS {
        raiser.set_flag(&format!("stop-{i}"), secs(30.0)).unwrap();
    }
    let watcher_heard: Vec<u64> = watchers.drain(..).map(&mut heard).collect();
    println!(
        "heard: bystanders {bystander_heard:?} waiters {waiter_heard:?} watchers {watcher_heard:?}"
    );
    assert!(
        bystander_heard.iter().all(|&n| n == 0),
        "a bystander heard something: {bystander_heard:?}"
    );
    // Each watcher hears its own stop once, none of the other nine.
    assert!(
        watcher_heard.iter().all(|&n| n == 1),
        "watchers heard other keys' stops: {watcher_heard:?}"
    );
    // A waiter hears at most the releases that made it next: one per turn
    // (five each), not one per release of the 30 in all.
    let total: u64 = waiter_heard.iter().sum();
    assert!(
        total <= (WAITERS * 5) as u64,
        "waiters heard more than their turns: {waiter_heard:?}"
    );
}

// ------------------------------------------------------------- cluster

/// A field of `CLUSTER INFO` on `port`.
fn cluster_info(port: u16, field: &str) -> u64 {
    command_on(port, "CLUSTER INFO")
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{field}:")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Pub/sub messages the nodes sent each other over the cluster bus.
fn bus_messages(cluster: &TestCluster) -> u64 {
    cluster
        .ports()
        .into_iter()
        .map(|p| {
            cluster_info(p, "cluster_stats_messages_publish_sent")
                + cluster_info(p, "cluster_stats_messages_publishshard_sent")
        })
        .sum()
}

/// Shard-channel subscriptions on the node at `port`.
fn ssub_on(port: u16) -> u64 {
    command_on(port, "CLIENT LIST")
        .lines()
        .filter_map(|l| l.split(" ssub=").nth(1))
        .filter_map(|rest| rest.split(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Subscribers of the shard channel `channel` on the node at `port`.
fn shard_numsub(port: u16, channel: &str) -> i64 {
    command_on(port, &format!("PUBSUB SHARDNUMSUB {channel}"))
        .lines()
        .filter_map(|l| l.trim().strip_prefix(':'))
        .filter_map(|n| n.parse().ok())
        .next_back()
        .unwrap_or(-1)
}

fn node_id(port: u16) -> String {
    command_on(port, "CLUSTER MYID")
        .lines()
        .find(|l| l.len() == 40)
        .expect("a node id")
        .trim()
        .to_owned()
}

#[test]
fn cluster_announcements_stay_on_their_shard_and_follow_a_slot_move() {
    let cluster = TestCluster::start(3, 0);
    let url = cluster.url();
    let locks = Locks::redis(&url, NS).unwrap();
    let other = Locks::redis(&url, NS).unwrap();
    let stop = unique("stop-moving");
    let slot = slot_of(&raised(&stop));
    let from = cluster.owner_of(slot).expect("slot served");
    let hold = locks
        .hold(&unique("job"), stop_opts(&stop))
        .unwrap()
        .unwrap();
    until(
        "the stop key subscribed on its slot's owner",
        secs(5.0),
        || ssub_on(from) == 1,
    );
    let elsewhere: u64 = cluster
        .ports()
        .into_iter()
        .filter(|p| *p != from)
        .map(ssub_on)
        .sum();
    assert_eq!(elsewhere, 0, "subscribed on a node that does not own it");

    // Raises nobody watches, releases with and without a waiting line:
    // nothing crosses the bus (no replicas here, so sharded messages have
    // nobody to go to either).
    let before = bus_messages(&cluster);
    let key = unique("handed");
    assert!(other.acquire(&key, secs(30.0)).unwrap());
    let waiter = wait_in_thread(&locks, &key, secs(10.0));
    let key_owner = cluster
        .owner_of(slot_of(&format!("{NS}:next:{{{key}}}:x")))
        .unwrap();
    until("the line subscribed on its key's owner", secs(5.0), || {
        ssub_on(key_owner) > u64::from(key_owner == from)
    });
    let released = Instant::now();
    other.release(&key).unwrap();
    assert!(waiter.join().unwrap());
    assert!(released.elapsed() < secs(1.0), "{:?}", released.elapsed());
    for i in 0..20 {
        other
            .set_flag(&unique(&format!("unwatched-{i}")), secs(5.0))
            .unwrap();
        let k = unique("pair");
        assert!(other.acquire(&k, secs(5.0)).unwrap());
        other.release(&k).unwrap();
    }
    assert_eq!(bus_messages(&cluster), before, "pub/sub crossed the bus");

    // Move the stop key's slot to another master: the old owner drops the
    // channel, the listener subscribes it on the new owner.
    let to = *cluster.master_ports().iter().find(|p| **p != from).unwrap();
    let to_id = node_id(to);
    for p in cluster.ports() {
        let reply = command_on(p, &format!("CLUSTER SETSLOT {slot} NODE {to_id}"));
        assert!(reply.contains("OK"), "{reply}");
    }
    until("the channel followed its slot", secs(10.0), || {
        shard_numsub(to, &raised(&stop)) == 1 && shard_numsub(from, &raised(&stop)) == 0
    });
    let pushed = locks.stats().pushes_received;
    let raised_at = Instant::now();
    other.set_flag(&stop, secs(30.0)).unwrap();
    assert!(hold.signal().wait(Some(secs(3.0))));
    assert_eq!(
        locks.stats().pushes_received,
        pushed + 1,
        "after the move the stop came by push ({:?})",
        raised_at.elapsed()
    );
}
