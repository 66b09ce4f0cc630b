//! Beyond one Redis: a Cluster's batches and redirections, replica
//! acknowledgement. The contract itself runs on both in `contract.rs`,
//! failovers in `failover.rs`; here are the other cases only a topology can
//! state. Each test prints its figures (`cargo test --test scale_out --
//! --nocapture`); they are quoted in docs/SCALE-OUT.md.

use mistri_locks::internals::slot_of;
use mistri_locks::{Adapter, Error, HoldOptions, Locks, Renewal, Renewed};
use mistri_locks_testkit::{command_on, Proxy, RedisCluster, RedisSentinels, RedisServer};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// A number field of an `INFO` reply (`name:123`, or `name:count=123` for
/// errorstats and commandstats' `calls=`).
fn info_number(info: &str, name: &str, sub: Option<&str>) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| match sub {
            None => v.trim().parse().unwrap_or(0),
            Some(sub) => v
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{sub}=")))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0),
        })
        .unwrap_or(0)
}

/// A master: its id, port and slot ranges.
type Master = (String, u16, Vec<(u16, u16)>);

/// `CLUSTER NODES` as (id, port, slot ranges) of each master.
fn masters(port: u16) -> Vec<Master> {
    command_on(port, "CLUSTER NODES")
        .lines()
        .filter(|l| l.contains("master"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let port = f
                .get(1)?
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let ranges = f[8..]
                .iter()
                .filter_map(|r| {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    Some((a.parse().ok()?, b.parse().ok()?))
                })
                .collect();
            Some((f[0].trim_start_matches('$').to_string(), port, ranges))
        })
        .collect()
}

fn owner_of(port: u16, slot: u16) -> (String, u16) {
    masters(port)
        .into_iter()
        .find(|(_, _, ranges)| ranges.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
        .map(|(id, p, _)| (id, p))
        .expect("slot served")
}

fn renewals(leases: &[mistri_locks::Lease]) -> Vec<Renewal<'_>> {
    leases
        .iter()
        .map(|lease| Renewal {
            lease,
            ttl: secs(30.0),
            min_left: Duration::ZERO,
        })
        .collect()
}

fn all_renewed(adapter: &Arc<dyn Adapter>, leases: &[mistri_locks::Lease]) {
    let beat = adapter
        .beat(&renewals(leases), &[], Instant::now() + secs(5.0))
        .expect("beat");
    for (i, r) in beat.renewals.iter().enumerate() {
        assert_eq!(r.as_ref().ok(), Some(&Renewed::Yes), "item {i}: {r:?}");
    }
}

#[test]
fn slots_are_the_servers() {
    let cluster = RedisCluster::shared();
    let port = cluster.ports()[0];
    for key in [
        "foo",
        "mistri:locks:lease:{job-7}",
        "{}x",
        "a{b}c{d}",
        "ü{}",
    ] {
        let reply = command_on(port, &format!("CLUSTER KEYSLOT {key}"));
        let want: u16 = reply.trim_start_matches(':').trim().parse().unwrap();
        assert_eq!(slot_of(key), want, "{key}");
    }
}

#[test]
fn a_batch_costs_one_round_trip_per_master() {
    const HOLDS: usize = 300;
    let cluster = RedisCluster::start(3, 0);
    let locks = Locks::redis(&cluster.url(), "mistri:batch").unwrap();
    let adapter = locks.adapter().clone();
    let leases: Vec<_> = (0..HOLDS)
        .map(|i| {
            adapter
                .acquire(&format!("job-{i}"), secs(30.0))
                .unwrap()
                .unwrap()
        })
        .collect();
    all_renewed(&adapter, &leases); // loads the renew script everywhere
    let ports = cluster.ports();
    let stats = |port: u16| {
        let s = command_on(port, "INFO stats");
        let c = command_on(port, "INFO commandstats");
        (
            info_number(&s, "total_reads_processed", None),
            info_number(&c, "cmdstat_evalsha", Some("calls")),
        )
    };
    let before: Vec<_> = ports.iter().map(|p| stats(*p)).collect();
    let started = Instant::now();
    all_renewed(&adapter, &leases);
    let took = started.elapsed();
    let after: Vec<_> = ports.iter().map(|p| stats(*p)).collect();
    let mut calls = 0;
    for (i, port) in ports.iter().enumerate() {
        // The two INFO commands of `stats` read once each.
        let reads = after[i].0 - before[i].0 - 2;
        let evals = after[i].1 - before[i].1;
        calls += evals;
        eprintln!("master {port}: {evals} renewals in {reads} socket read(s)");
        assert!(evals > 50, "holds not spread: {evals} on {port}");
        // One pipeline: the server reads it in one or a few 16 KB reads,
        // never once per renewal.
        assert!(reads <= 4, "{reads} reads for {evals} renewals on {port}");
    }
    assert_eq!(calls, HOLDS as u64);
    eprintln!("{HOLDS} renewals over 3 masters in one beat: {took:?}");
}

#[test]
fn ask_and_moved_retry_only_that_key() {
    let cluster = RedisCluster::start(3, 0);
    let port = cluster.ports()[0];
    let locks = Locks::redis(&cluster.url(), "mistri:moved").unwrap();
    let adapter = locks.adapter().clone();
    let leases: Vec<_> = (0..12)
        .map(|i| {
            adapter
                .acquire(&format!("k{i}"), secs(30.0))
                .unwrap()
                .unwrap()
        })
        .collect();
    all_renewed(&adapter, &leases);

    // Move the slot of k0 from its master A to another master B.
    let slot = slot_of("mistri:moved:lease:{k0}");
    let (id_a, port_a) = owner_of(port, slot);
    let (id_b, port_b) = masters(port)
        .into_iter()
        .find(|(id, _, _)| *id != id_a)
        .map(|(id, p, _)| (id, p))
        .unwrap();
    let errors =
        |what: &str| info_number(&command_on(port_a, "INFO errorstats"), what, Some("count"));
    assert!(
        command_on(port_b, &format!("CLUSTER SETSLOT {slot} IMPORTING {id_a}")).starts_with("+OK")
    );
    assert!(
        command_on(port_a, &format!("CLUSTER SETSLOT {slot} MIGRATING {id_b}")).starts_with("+OK")
    );
    let keys = command_on(port_a, &format!("CLUSTER GETKEYSINSLOT {slot} 100"));
    let keys: Vec<&str> = keys
        .lines()
        .filter(|l| l.starts_with("mistri:moved:"))
        .collect();
    assert!(keys.len() >= 2, "lease, fence and info of k0: {keys:?}");
    let migrate = command_on(
        port_a,
        &format!(
            "MIGRATE 127.0.0.1 {port_b} \"\" 0 5000 KEYS {}",
            keys.join(" ")
        ),
    );
    assert!(migrate.starts_with("+OK"), "{migrate}");

    // Mid-migration: A answers ASK for k0; only k0 goes again, to B.
    let ask_before = errors("errorstat_ASK");
    all_renewed(&adapter, &leases);
    assert_eq!(
        errors("errorstat_ASK"),
        ask_before + 1,
        "one ASK, for k0 only"
    );

    // Finished: A answers MOVED once; the map learns it.
    for p in cluster.ports() {
        command_on(p, &format!("CLUSTER SETSLOT {slot} NODE {id_b}"));
    }
    let moved_before = errors("errorstat_MOVED");
    all_renewed(&adapter, &leases);
    assert_eq!(
        errors("errorstat_MOVED"),
        moved_before + 1,
        "one MOVED, for k0 only"
    );
    all_renewed(&adapter, &leases);
    assert_eq!(
        errors("errorstat_MOVED"),
        moved_before + 1,
        "the map was updated"
    );
    assert!(command_on(port_b, "EXISTS mistri:moved:lease:{k0}").contains(":1"));
    eprintln!("slot {slot} moved {port_a} -> {port_b}: 1 ASK, 1 MOVED, 12/12 renewals each beat");
}

#[test]
fn an_acquire_that_is_not_replicated_is_an_error_and_leaves_nothing() {
    let server = RedisServer::start();
    let url = format!("{}?min_replicas=1&replica_timeout=0.1", server.url());
    let locks = Locks::redis(&url, "mistri:wait").unwrap();
    let err = locks.acquire("job", secs(5.0)).unwrap_err();
    assert!(matches!(err, Error::Backend(_)), "{err}");
    assert!(err.to_string().contains("replica"), "{err}");
    assert!(!locks.held("job").unwrap(), "undone");
    assert!(locks.hold("job", HoldOptions::default()).is_err());
    // Without the option the same server takes it.
    let plain = Locks::redis(&server.url(), "mistri:wait").unwrap();
    assert!(plain.acquire("job", secs(5.0)).unwrap());

    // Same on a cluster without replicas.
    let cluster = RedisCluster::shared();
    let url = format!("{}?min_replicas=1&replica_timeout=0.1", cluster.url());
    let locks = Locks::redis(&url, "mistri:wait").unwrap();
    let err = locks.acquire("job", secs(5.0)).unwrap_err();
    assert!(err.to_string().contains("replica"), "{err}");
    assert!(!locks.held("job").unwrap());
}

#[test]
fn unreachable_topologies_say_what_they_tried() {
    let cluster = Locks::redis("redis+cluster://127.0.0.1:1,127.0.0.1:2", "ns").unwrap();
    let err = cluster.held("k").unwrap_err();
    assert!(matches!(err, Error::Connection(_)), "{err}");
    assert!(err.to_string().contains("CLUSTER SLOTS"), "{err}");
    let sentinel = Locks::redis("redis+sentinel://127.0.0.1:1/mymaster/0", "ns").unwrap();
    let err = sentinel.held("k").unwrap_err();
    assert!(matches!(err, Error::Connection(_)), "{err}");
    assert!(err.to_string().contains("sentinel"), "{err}");
    assert!(matches!(
        Locks::redis("redis+sentinel://127.0.0.1:1", "ns"),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        Locks::redis("redis+cluster://127.0.0.1:1/3", "ns"),
        Err(Error::Config(_))
    ));
}

#[test]
fn sentinel_writes_do_not_ask_a_sentinel_each_time() {
    let set = RedisSentinels::shared();
    let locks = Locks::redis(&set.url(), "mistri:asks").unwrap();
    assert!(locks.acquire("warm", secs(5.0)).unwrap()); // resolves the master
    let asked = || -> u64 {
        set.sentinel_ports()
            .iter()
            .map(|p| {
                info_number(
                    &command_on(*p, "INFO stats"),
                    "total_commands_processed",
                    None,
                )
            })
            .sum()
    };
    const PAIRS: u64 = 300;
    let before = asked();
    let started = Instant::now();
    for _ in 0..PAIRS {
        assert!(locks.acquire("job", secs(5.0)).unwrap());
        assert!(locks.release("job").unwrap());
    }
    let took = started.elapsed();
    // What the sentinels ran meanwhile: their own chatter (a few commands
    // a second), our INFO, and at most one check a second from us; it was
    // one per acquire.
    let ran = asked() - before;
    eprintln!("{PAIRS} pairs through Sentinel in {took:?}: the sentinels ran {ran} commands");
    let allowed = 20 + 10 * took.as_secs();
    assert!(ran < allowed, "{ran} sentinel commands for {PAIRS} pairs");
}

#[test]
fn a_silent_sentinel_delays_an_operation_briefly_and_once() {
    let set = RedisSentinels::shared();
    let ports = set.sentinel_ports();
    let proxy = Proxy::start(ports[0]);
    // The proxied sentinel first: it answers the resolve, and is the one
    // the once-a-second check asks.
    let url = format!(
        "redis+sentinel://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}/{}/0",
        proxy.port(),
        ports[1],
        ports[2],
        RedisSentinels::SERVICE
    );
    let locks = Locks::redis(&url, "mistri:silent").unwrap();
    assert!(locks.acquire("warm", secs(5.0)).unwrap());
    proxy.blackhole(true);
    let started = Instant::now();
    let mut slow = Vec::new();
    while started.elapsed() < secs(3.5) {
        let t = Instant::now();
        assert!(locks.acquire("job", secs(5.0)).unwrap());
        assert!(locks.release("job").unwrap());
        if t.elapsed() > secs(0.1) {
            slow.push(t.elapsed());
        }
    }
    proxy.blackhole(false);
    eprintln!("silent sentinel: slow pairs {slow:?} in 3.5 s");
    // The check gives up after 250 ms (no news) and asks another sentinel
    // next time; it never holds an operation for its whole timeout.
    assert!(slow.len() <= 2, "{slow:?}");
    assert!(slow.iter().all(|d| *d < secs(1.5)), "{slow:?}");
}
