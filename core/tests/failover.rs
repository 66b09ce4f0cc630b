//! Failover, on real topologies started by the testkit: a master + 2
//! replicas + 3 sentinels (`SENTINEL FAILOVER`, and the master SIGKILLed)
//! and a 3-master Redis Cluster with one replica each (`CLUSTER FAILOVER`,
//! then a master SIGKILLed). In every case each holder either keeps its
//! lease (its token is on the new master) or is told it lost it, and the
//! fence of every key rises; with `min_replicas=all` and a forced failover
//! every holder keeps its lease. Stop flags are pushed on both, before and
//! after the failover. Each test prints its figures
//! (`cargo test -p mistri_locks_core --test failover -- --nocapture`);
//! they are quoted in docs/SCALE-OUT.md.

mod common;
use common::*;
use mistri_locks::internals::slot_of;
use mistri_locks::{Hold, HoldOptions, Locks, Renewal, Renewed};
use mistri_locks_testkit::{command_on, RedisCluster, RedisSentinels};
use std::time::{Duration, Instant};

/// The ttl of every hold that lives through a failover: above the time
/// the topology needs to take acknowledged writes again (a few seconds),
/// so a holder keeps its lease when its renewals are confirmed again
/// before its safe deadline (ttl − ttl/4 after the last confirmed one).
/// A Cluster election has taken up to 7.6 s on a loaded machine here.
const TTL: f64 = 15.0;
const HEARTBEAT: f64 = 0.25;
/// A pushed stop must arrive within this; the flag tick is 1 s (heartbeat
/// 5 s), and a push takes a few ms (the figure printed). That it was
/// pushed, not polled, is checked on the holder's `pushes_received`.
const PUSHED: Duration = Duration::from_millis(500);

/// What a failover did to a set of holds.
#[derive(Default, Debug)]
struct Outcome {
    /// Not told, and the master serving the key now has its token.
    kept: usize,
    /// Told the lease was lost.
    lost: usize,
    /// Not told, yet the master serving the key now does not have its
    /// token: another owner could take it (what asynchronous replication
    /// allows, docs/SCALE-OUT.md).
    split: usize,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} kept, {} told lost, {} split",
            self.kept, self.lost, self.split
        )
    }
}

/// The value of `key` on the node on `port` (`None`: absent, or an error
/// such as MOVED).
fn get_on(port: u16, key: &str) -> Option<String> {
    let reply = command_on(port, &format!("GET {key}"));
    if !reply.starts_with('$') || reply.starts_with("$-1") {
        return None;
    }
    reply.lines().nth(1).map(str::to_owned)
}

/// Sorts each hold into kept, told lost or split, reading its lease key on
/// the node `owner` names for it. Then each key is released and retaken
/// by another owner: its fence is above the holder's, whatever happened.
fn judge(holds: Vec<Hold>, ns: &str, other: &Locks, owner: impl Fn(&str) -> u16) -> Outcome {
    let mut o = Outcome::default();
    for hold in holds {
        let key = hold.key().to_string();
        let fence = hold.fence();
        let lease_key = format!("{ns}:lease:{{{key}}}");
        let there = get_on(owner(&lease_key), &lease_key);
        if hold.is_lost() {
            o.lost += 1;
        } else if there.as_deref().and_then(|v| v.split(' ').next()) == Some(hold.lease().token()) {
            // The value is the token, then the holder's description.
            o.kept += 1;
        } else {
            o.split += 1;
        }
        drop(hold);
        let deadline = Instant::now() + secs(15.0);
        loop {
            match other.acquire(&key, secs(5.0)) {
                Ok(true) => break,
                Ok(false) | Err(_) => {
                    assert!(Instant::now() < deadline, "{key} never free again");
                    std::thread::sleep(secs(0.1));
                }
            }
        }
        let again = other.fence(&key).unwrap();
        assert!(again > fence, "{key}: fence went from {fence} to {again}");
        other.release(&key).unwrap();
    }
    o
}

fn hold_many(locks: &Locks, keys: &[String]) -> Vec<Hold> {
    keys.iter()
        .map(|key| {
            // An acquire a replica did not acknowledge in time is an error
            // (and released): on a loaded machine, try again.
            let mut tries = 0;
            loop {
                match locks.hold(key, opts(TTL, HEARTBEAT)) {
                    Ok(hold) => break hold.expect("free"),
                    Err(e) if tries < 5 => {
                        eprintln!("{key}: {e}; again");
                        tries += 1;
                        std::thread::sleep(secs(0.2));
                    }
                    Err(e) => panic!("{key}: {e}"),
                }
            }
        })
        .collect()
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Retries an acquire of a fresh key from `keys` until one succeeds: the
/// time the service needs to take writes again.
fn time_to_recover(probe: &Locks, keys: &[String], started: Instant) -> Duration {
    for key in keys {
        if let Ok(true) = probe.acquire(key, secs(5.0)) {
            return started.elapsed();
        }
        assert!(started.elapsed() < secs(30.0), "no master within 30 s");
        std::thread::sleep(secs(0.05));
    }
    panic!("ran out of probe keys");
}

/// A hold (heartbeat 5 s: the flag tick is 1 s) that a raised `stop` trips.
fn stoppable(locks: &Locks, key: &str, stop: &str) -> Hold {
    let opts = HoldOptions {
        stop_key: Some(stop.into()),
        ..opts(60.0, 5.0)
    };
    locks.hold(key, opts).unwrap().expect("free")
}

/// Raises `stop` with `raiser` and returns how long `hold` (of `holder`)
/// took to be told. It was told by a pushed message, not by a poll.
fn stop_latency(raiser: &Locks, holder: &Locks, stop: &str, hold: &Hold) -> Duration {
    let pushes = holder.stats().pushes_received;
    // A pooled connection to a node that died fails once (as on one
    // server); a raiser tries again.
    let mut start = Instant::now();
    let mut tries = 0;
    while let Err(e) = raiser.set_flag(stop, secs(60.0)) {
        tries += 1;
        assert!(tries < 20, "cannot raise {stop}: {e}");
        std::thread::sleep(secs(0.1));
        start = Instant::now();
    }
    assert!(hold.signal().wait(Some(secs(3.0))), "stop never arrived");
    let took = start.elapsed();
    let reason = hold.signal().reason().unwrap_or_default();
    assert!(reason.starts_with("stop flag"), "{reason}");
    assert!(
        holder.stats().pushes_received > pushes,
        "{stop}: seen by a poll, not pushed"
    );
    took
}

/// Subscribers of `channel` (classic or sharded) on the node at `port`.
fn subscribers(port: u16, channel: &str) -> i64 {
    ["NUMSUB", "SHARDNUMSUB"]
        .iter()
        .map(|how| {
            command_on(port, &format!("PUBSUB {how} {channel}"))
                .lines()
                .filter_map(|l| l.trim().strip_prefix(':'))
                .filter_map(|n| n.parse::<i64>().ok())
                .next_back()
                .unwrap_or(0)
        })
        .sum()
}

/// Waits until a node among `ports` has a subscriber of `channel` (the
/// sentinels' own `__sentinel__:hello` subscriptions don't count); which
/// one.
fn subscribed_on(ports: &[u16], channel: &str, limit: Duration) -> u16 {
    let start = Instant::now();
    loop {
        for &port in ports {
            if subscribers(port, channel) > 0 {
                return port;
            }
        }
        assert!(
            start.elapsed() < limit,
            "no listener of {channel} on {ports:?}"
        );
        std::thread::sleep(secs(0.02));
    }
}

fn sleep_until(at: Instant) {
    if let Some(d) = at.checked_duration_since(Instant::now()) {
        std::thread::sleep(d);
    }
}

/// Holders of plain and of `min_replicas=all` leases, and a stoppable hold,
/// through one sentinel failover (`kill`: SIGKILL the master, else
/// `SENTINEL FAILOVER`).
fn sentinel_case(kill: bool) -> (Outcome, Outcome) {
    let what = if kill {
        "master SIGKILLed"
    } else {
        "SENTINEL FAILOVER"
    };
    let ns = if kill { "mistri:kill" } else { "mistri:fo" };
    let mut set = RedisSentinels::start();
    let url = set.url();
    let plain = Locks::redis(&url, ns).unwrap();
    let acked = Locks::redis(&format!("{url}?min_replicas=all&replica_timeout=0.5"), ns).unwrap();
    let other = Locks::redis(&url, ns).unwrap();
    let probe = Locks::redis(&url, ns).unwrap();
    let pushed = Locks::redis(&url, ns).unwrap();
    let (master, _) = set.data_ports();

    let before = stoppable(&pushed, "job-before", "stop-before");
    let after = stoppable(&pushed, "job-after", "stop-after");
    let channel = format!("{ns}:raised:{{stop-after}}");
    subscribed_on(&[master], &channel, secs(5.0));
    let push_before = stop_latency(&other, &pushed, "stop-before", &before);

    let plain_holds = hold_many(&plain, &names("plain", 10));
    let acked_holds = hold_many(&acked, &names("acked", 10));
    std::thread::sleep(secs(0.5));

    let started = Instant::now();
    if kill {
        set.kill(master);
    } else {
        set.failover();
    }
    let recovered = time_to_recover(&probe, &names("probe", 1000), started);
    let new_master = set.master_port();
    assert_ne!(new_master, master);
    // The listener follows the master and subscribes there.
    subscribed_on(&[new_master], &channel, secs(20.0));
    let followed = started.elapsed();
    let push_after = stop_latency(&other, &pushed, "stop-after", &after);
    // A hold whose renewals were not confirmed since the failover began
    // has been told by now (its safe deadline is 3/4 of the ttl after
    // the last confirmed one).
    sleep_until(started + secs(TTL));
    let owner = |_: &str| set.master_port();
    let p = judge(plain_holds, ns, &other, owner);
    let a = judge(acked_holds, ns, &other, owner);
    eprintln!(
        "sentinel, {what}: writes again after {recovered:.2?}; without acks {p}; \
         min_replicas=all {a}; listener on the new master after {followed:.2?}; \
         stop pushed in {push_before:.2?} before, {push_after:.2?} after"
    );
    assert!(push_before < PUSHED && push_after < PUSHED);
    // With acknowledgement nothing splits: a renewal the old master took
    // alone is never confirmed, so its holder is told in time.
    assert_eq!(a.split, 0, "min_replicas=all: a holder was not told");
    assert_eq!(a.kept + a.lost, 10);
    (p, a)
}

#[test]
fn sentinel_failover_min_replicas_holders_keep_their_leases() {
    let (_, acked) = sentinel_case(false);
    // The promoted replica has the other replica again within a second
    // or so (it is re-pointed as part of the failover): every renewal is
    // confirmed again long before a safe deadline.
    assert_eq!(acked.kept, 10, "min_replicas=all: {acked}");
}

#[test]
fn sentinel_master_killed_holders_keep_or_are_told() {
    let (plain, _) = sentinel_case(true);
    // The replicas had every write: a plain holder is never split either.
    assert_eq!(plain.split, 0, "a holder was not told: {plain}");
}

/// The port of the master that serves a key now.
fn owner_in(cluster: &RedisCluster) -> impl Fn(&str) -> u16 + '_ {
    |key| cluster.owner_of(slot_of(key)).expect("slot served")
}

/// Keys whose lease slot `cluster` serves on `port`.
fn keys_on(cluster: &RedisCluster, ns: &str, port: u16, prefix: &str, n: usize) -> Vec<String> {
    let mut found = Vec::new();
    let mut i = 0;
    while found.len() < n {
        let key = format!("{prefix}-{i}");
        if cluster.owner_of(slot_of(&format!("{ns}:lease:{{{key}}}"))) == Some(port) {
            found.push(key);
        }
        i += 1;
    }
    found
}

/// One beat of `n` fresh leases over the cluster: how many renewals each
/// master ran, in how many socket reads.
fn beat_per_master(cluster: &RedisCluster, locks: &Locks, n: usize) -> Vec<(u16, u64, u64)> {
    let adapter = locks.adapter().clone();
    let leases: Vec<_> = (0..n)
        .map(|i| {
            adapter
                .acquire(&format!("beat-{i}"), secs(30.0))
                .unwrap()
                .unwrap()
        })
        .collect();
    let renewals: Vec<Renewal<'_>> = leases
        .iter()
        .map(|lease| Renewal {
            lease,
            ttl: secs(30.0),
            min_left: Duration::ZERO,
        })
        .collect();
    let beat = || {
        let beat = adapter
            .beat(&renewals, &[], Instant::now() + secs(5.0))
            .unwrap();
        for (i, r) in beat.renewals.iter().enumerate() {
            assert_eq!(r.as_ref().ok(), Some(&Renewed::Yes), "item {i}: {r:?}");
        }
    };
    beat(); // loads the renew script on promoted masters
    let stat = |port: u16, section: &str, name: &str| -> u64 {
        let info = command_on(port, &format!("INFO {section}"));
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .and_then(|v| {
                let v = v.split(',').next().unwrap_or(v);
                v.trim_start_matches("calls=").trim().parse().ok()
            })
            .unwrap_or(0)
    };
    let masters = cluster.master_ports();
    let read = |p: u16| {
        (
            stat(p, "stats", "total_reads_processed"),
            stat(p, "commandstats", "cmdstat_evalsha"),
        )
    };
    let before: Vec<_> = masters.iter().map(|p| read(*p)).collect();
    beat();
    masters
        .iter()
        .zip(before)
        .map(|(p, (r0, e0))| {
            let (r1, e1) = read(*p);
            // The two INFO commands of `read` are one read each.
            (*p, r1 - r0 - 2, e1 - e0)
        })
        .collect()
}

#[test]
fn cluster_failover_holders_keep_or_are_told() {
    let ns = "mistri:cfo";
    // Two replicas a master: after a master dies, the promoted replica
    // still has one, so acknowledged renewals go on.
    let mut cluster = RedisCluster::start(3, 2);
    let url = cluster.url();
    let plain = Locks::redis(&url, ns).unwrap();
    let acked = Locks::redis(&format!("{url}?min_replicas=all&replica_timeout=0.5"), ns).unwrap();
    let other = Locks::redis(&url, ns).unwrap();
    let probe = Locks::redis(&url, ns).unwrap();
    let pushed = Locks::redis(&url, ns).unwrap();

    let before = stoppable(&pushed, "job-before", "stop-before");
    let after = stoppable(&pushed, "job-after", "stop-after");
    // Sharded pub/sub: each stop key's channel is subscribed on the master
    // that owns its slot.
    let channel = format!("{ns}:raised:{{stop-after}}");
    let listening = cluster.owner_of(slot_of(&channel)).expect("slot served");
    subscribed_on(&[listening], &channel, secs(5.0));
    let push_before = stop_latency(&other, &pushed, "stop-before", &before);
    let masters = cluster.master_ports();
    assert_eq!(masters.len(), 3);
    assert!(masters.contains(&listening), "subscribed on a master");

    // 1. CLUSTER FAILOVER on the replica of a master the listener is not on.
    let a = *masters.iter().find(|p| **p != listening).unwrap();
    let a_replica = cluster.replica_in_sync(a);
    let mut holds_p = hold_many(&plain, &names("plain1", 12));
    holds_p.extend(hold_many(&plain, &keys_on(&cluster, ns, a, "plain1a", 4)));
    let mut holds_a = hold_many(&acked, &names("acked1", 12));
    holds_a.extend(hold_many(&acked, &keys_on(&cluster, ns, a, "acked1a", 4)));
    let probes = keys_on(&cluster, ns, a, "probe1", 300);
    std::thread::sleep(secs(0.5));
    let started = Instant::now();
    cluster.failover(a_replica);
    let recovered1 = time_to_recover(&probe, &probes, started);
    sleep_until(started + secs(TTL));
    let p1 = judge(holds_p, ns, &other, owner_in(&cluster));
    let a1 = judge(holds_a, ns, &other, owner_in(&cluster));
    eprintln!(
        "cluster, CLUSTER FAILOVER ({a} -> {a_replica}): writes again after {recovered1:.2?}; \
         16 holds (at least 4 on that master): without acks {p1}; min_replicas=all {a1}"
    );
    assert_eq!(p1.split + a1.split, 0, "a holder was not told");
    // Coordinated: the replica had everything and its old master is its
    // replica at once.
    assert_eq!(a1.kept, 16, "min_replicas=all: {a1}");

    // 2. SIGKILL the master the listener is on; its replica takes over
    //    after cluster-node-timeout (1 s) and an election; the other
    //    replica follows it.
    let b = listening;
    cluster.replica_in_sync(b);
    let mut holds_p = hold_many(&plain, &names("plain2", 12));
    holds_p.extend(hold_many(&plain, &keys_on(&cluster, ns, b, "plain2b", 4)));
    let mut holds_a = hold_many(&acked, &names("acked2", 12));
    holds_a.extend(hold_many(&acked, &keys_on(&cluster, ns, b, "acked2b", 4)));
    let probes = keys_on(&cluster, ns, b, "probe2", 300);
    let on_b = holds_a
        .iter()
        .filter(|h| cluster.owner_of(slot_of(&format!("{ns}:lease:{{{}}}", h.key()))) == Some(b))
        .count();
    std::thread::sleep(secs(0.5));
    let started = Instant::now();
    cluster.kill(b);
    let recovered2 = time_to_recover(&probe, &probes, started);
    let b_slot = slot_of(&format!("{ns}:lease:{{{}}}", probes[0]));
    // Whichever replica won the election, once the nodes' view shows it.
    let b_replica = loop {
        match cluster.owner_of(b_slot) {
            Some(p) if p != b => break p,
            _ => {
                assert!(
                    started.elapsed() < secs(30.0),
                    "no new owner of {b}'s slots"
                );
                std::thread::sleep(secs(0.05));
            }
        }
    };
    cluster.wait_promoted(b_replica, secs(20.0));
    // The stop key's channel follows its slot to the promoted master.
    let moved_to = subscribed_on(&[b_replica], &channel, secs(20.0));
    let followed = started.elapsed();
    let push_after = stop_latency(&other, &pushed, "stop-after", &after);
    sleep_until(started + secs(TTL));
    let p2 = judge(holds_p, ns, &other, owner_in(&cluster));
    let a2 = judge(holds_a, ns, &other, owner_in(&cluster));
    eprintln!(
        "cluster, master {b} SIGKILLed ({b_replica} promoted): writes again after \
         {recovered2:.2?}; 16 holds ({on_b} on that master): without acks {p2}; min_replicas=all {a2}; \
         listener moved to {moved_to} after {followed:.2?}; stop pushed in {push_before:.2?} \
         before, {push_after:.2?} after"
    );
    assert_eq!(p2.split + a2.split, 0, "a holder was not told");
    assert!(push_before < PUSHED && push_after < PUSHED);
    // The promoted master has a replica again (the other one follows it):
    // the acknowledged holds keep their leases.
    assert_eq!(
        a2.kept, 16,
        "min_replicas=all: {a2} ({on_b} on the killed master)"
    );

    // 3. After both changes of the slot map, a heartbeat still sends one
    //    pipeline per master.
    let per_master = beat_per_master(&cluster, &plain, 150);
    for (port, reads, evals) in &per_master {
        eprintln!("after the failovers, master {port}: {evals} renewals in {reads} socket read(s)");
        assert!(*evals > 10, "holds not spread: {evals} on {port}");
        assert!(*reads <= 4, "{reads} reads for {evals} renewals on {port}");
    }
    assert_eq!(per_master.iter().map(|(_, _, e)| e).sum::<u64>(), 150);
}
