//! A listing ([`Locks::list`]) on Redis and Sentinel costs a round trip
//! per `SCAN` page, not one per lease (issue 39, finding 2): the reads of
//! one page's leases and flags go out in one script, in one pipeline with
//! the next page's `SCAN` (`core/src/backend/redis/listing.rs`). Counted
//! with the server's `INFO commandstats` (each command and each call a
//! script makes is counted): two calls per lease (`PTTL`, `GET`), one per
//! flag, one script per page. Before, each lease was a `MULTI`, `PTTL`,
//! `GET`, `TIME`, `EXEC` of its own (five commands and a round trip) and
//! each flag a `PTTL` round trip.
//!
//! What is listed is unchanged: each lease as the per-key read
//! ([`Locks::info`]) describes it (holder, fence, label, stop key, limit,
//! N-holder holders), the flags with their time left, nothing of another
//! namespace, a prefix honoured.

mod common;
use common::*;
use mistri_locks::{AcquireOptions, HoldOptions, Locks};
use mistri_locks_testkit::{command_on, unique, RedisSentinels, RedisServer};
use std::collections::HashMap;

const LEASES: usize = 1_500;
const FLAGS: usize = 40;
const SLOTTED: usize = 3;

/// `cmdstat_NAME:calls=N` of `INFO commandstats` on `port`.
fn commandstats(port: u16) -> HashMap<String, u64> {
    command_on(port, "INFO commandstats")
        .lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("cmdstat_")?;
            let (name, rest) = l.split_once(':')?;
            let calls = rest.strip_prefix("calls=")?.split(',').next()?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// Fills `ns` on `url`: `LEASES` exclusive leases (one a hold watching a
/// stop key), `SLOTTED` N-holder leases of two holders, `FLAGS` flags;
/// returns the owner that holds them (and the hold).
fn fill(url: &str, ns: &str, prefix: &str) -> (Locks, mistri_locks::Hold) {
    let locks = Locks::redis(url, ns).unwrap();
    for i in 0..LEASES - 1 {
        assert!(locks
            .acquire(&format!("{prefix}l{i}"), secs(300.0))
            .unwrap());
    }
    let hold = locks
        .hold(
            &format!("{prefix}held"),
            HoldOptions {
                stop_key: Some(format!("{prefix}stop")),
                label: Some("the held one".into()),
                ..opts(300.0, 5.0)
            },
        )
        .unwrap()
        .unwrap();
    // Two holders of each N-holder lease (an owner holds a key once).
    let second = Locks::redis(url, ns).unwrap();
    for i in 0..SLOTTED {
        for owner in [&locks, &second] {
            assert!(owner
                .acquire_with(
                    &format!("{prefix}s{i}"),
                    secs(300.0),
                    &AcquireOptions {
                        limit: 3,
                        ..AcquireOptions::default()
                    },
                )
                .unwrap());
        }
    }
    for i in 0..FLAGS {
        locks
            .set_flag(&format!("{prefix}f{i}"), secs(300.0))
            .unwrap();
    }
    (locks, hold)
}

/// Lists `prefix` on `locks` counting the commands on `port` (the
/// server), checks the cost and that the listing is what the per-key
/// reads say.
fn check_listing(locks: &Locks, port: u16, prefix: &str) {
    assert!(command_on(port, "CONFIG RESETSTAT").contains("OK"));
    let listing = locks.list(prefix).unwrap();
    let stats = commandstats(port);
    let calls = |name: &str| stats.get(name).copied().unwrap_or(0);
    // The commands a listing may use (a Sentinel's master also hears the
    // sentinels and replicas: PING, INFO, PUBLISH, REPLCONF, not counted).
    let total: u64 = [
        "scan",
        "eval",
        "evalsha",
        "multi",
        "exec",
        "pttl",
        "get",
        "time",
        "zrangebyscore",
        "zrange",
        "hget",
        "exists",
    ]
    .iter()
    .map(|name| calls(name))
    .sum();
    let scans = calls("scan");
    println!("listing of {LEASES} leases, {SLOTTED} N-holder, {FLAGS} flags: {stats:?}");

    // What is listed.
    let leases = LEASES + SLOTTED;
    assert_eq!(listing.leases.len(), leases, "every lease, once");
    assert_eq!(listing.flags.len(), FLAGS, "every flag, once");
    for info in &listing.leases {
        assert!(info.key.starts_with(prefix), "{}", info.key);
        let one = locks.info(&info.key).unwrap().expect("listed: live");
        assert_eq!(info.holders.len(), one.holders.len(), "{}", info.key);
        assert_eq!(info.limit, one.limit, "{}", info.key);
        for (a, b) in info.holders.iter().zip(&one.holders) {
            assert_eq!(
                (
                    a.fence,
                    &a.label,
                    &a.stop_key,
                    a.ttl,
                    a.heartbeat,
                    a.acquired_at
                ),
                (
                    b.fence,
                    &b.label,
                    &b.stop_key,
                    b.ttl,
                    b.heartbeat,
                    b.acquired_at
                ),
            );
        }
        let left = info.time_left.expect("every lease has a ttl");
        assert!(left <= secs(300.0) && left > secs(200.0), "{left:?}");
    }
    let held = listing
        .leases
        .iter()
        .find(|l| l.key == format!("{prefix}held"))
        .unwrap();
    let holder = held.holder.as_ref().unwrap();
    assert_eq!(holder.label, "the held one");
    assert_eq!(holder.stop_key.as_deref(), Some(&*format!("{prefix}stop")));
    let slotted = listing.leases.iter().filter(|l| l.limit == 3).count();
    assert_eq!(slotted, SLOTTED);
    assert!(listing
        .leases
        .iter()
        .filter(|l| l.limit == 3)
        .all(|l| l.holders.len() == 2));
    assert!(listing
        .flags
        .iter()
        .all(|f| f.key.starts_with(prefix) && f.time_left.is_some()));

    // What it cost: pages, not leases. A page's leases and flags are one
    // script (`eval`) beside the page's SCAN; each N-holder lease one
    // script of its own; inside them two calls per lease and one per flag
    // and per N-holder lease a `TIME`, a `ZRANGEBYSCORE` and an `HGET` per
    // holder; one `TIME` per page.
    assert!(scans >= 1, "{stats:?}");
    let scripts = calls("eval") + calls("evalsha");
    assert!(
        scripts <= scans + 1 + SLOTTED as u64,
        "one script per page (and per N-holder lease): {scripts} scripts for {scans} pages"
    );
    let bound = 2 * LEASES as u64 + FLAGS as u64 + 5 * SLOTTED as u64 + 2 * (scans + 1) + scripts;
    assert!(
        total <= bound,
        "{total} commands for {LEASES} leases and {FLAGS} flags (at most {bound}): {stats:?}"
    );
    assert_eq!(calls("multi"), 0, "no transaction per lease: {stats:?}");
}

#[test]
fn a_listing_on_redis_costs_a_round_trip_per_page() {
    let server = RedisServer::start();
    let ns = "mistri:listing";
    let (locks, hold) = fill(&server.url(), ns, "");
    // Another namespace's leases and flags are not listed.
    let other = Locks::redis(&server.url(), "mistri:other").unwrap();
    for i in 0..50 {
        assert!(other.acquire(&format!("o{i}"), secs(300.0)).unwrap());
        other.set_flag(&format!("of{i}"), secs(300.0)).unwrap();
    }
    check_listing(&locks, server.port(), "");
    hold.release().unwrap();
}

#[test]
fn a_listing_with_a_prefix_on_sentinel_costs_a_round_trip_per_page() {
    let sentinels = RedisSentinels::shared();
    let ns = &unique("mistri:listing");
    let prefix = "jobs:";
    let (locks, hold) = fill(&sentinels.url(), ns, prefix);
    // Keys of the namespace outside the prefix are not listed.
    for i in 0..50 {
        assert!(locks.acquire(&format!("else{i}"), secs(300.0)).unwrap());
        locks.set_flag(&format!("elsef{i}"), secs(300.0)).unwrap();
    }
    check_listing(&locks, sentinels.master_port(), prefix);
    hold.release().unwrap();
}
