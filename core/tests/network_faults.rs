//! The fault suite of issue 9: what a hold promises whatever the network or
//! the server does, measured on a real redis-server on loopback, through the
//! testkit's `Proxy` where the network is the fault.
//!
//! The promises asserted (independent of how the engine is built):
//!
//! 1. **Told first.** A hold's signal trips, with a reason starting
//!    `lease lost:`, strictly before anyone else could acquire its lease.
//!    An independent client (its own `Locks`, straight to Redis, never
//!    through the proxy) polls `acquire` on the holder's keys every few ms;
//!    the instant taken just before the acquire that succeeded must come
//!    after the instant the holder's `on_abort` callback ran.
//! 2. **Release is bounded.** `release()` returns within the Redis
//!    adapter's timeout + 1 s, whatever the network does (an
//!    `Error::Connection` is an allowed answer).
//! 3. **No late extension.** Once the holder was told, the lease never
//!    outlives (PTTL read straight from Redis) the expiry implied by the
//!    last renewal the holder could have seen confirmed.
//!
//! Mutual exclusion under a random schedule of proxy faults is the soak's
//! (`core/tests/soak.rs`, the Redis backend, judged by the history
//! checker), not this file's.
//!
//! This file lists the cases; the judges, the witness and the figures are
//! the fault kit's (`tests/support/fault_kit.rs`, shared with the Postgres
//! suite). Each case prints its figures (`--nocapture`) and checks every
//! promise before failing, so one run gives the whole picture. Cases run
//! one at a time (each takes the kit's `one_at_a_time` guard), also under a
//! plain `cargo test`:
//!
//! ```text
//! cargo test -p mistri_locks_core --test network_faults -- --nocapture
//! ```
//!
//! The test binary re-executes itself for the multi-process cases: `child`
//! does nothing unless `MISTRI_FAULT_ROLE` is set.

mod common;
use common::*;
#[path = "../../tests/support/fault_kit.rs"]
mod fault_kit;
use fault_kit::*;
use mistri_locks::{Hold, HoldOptions, Locks, Redis};
use mistri_locks_testkit::{unique, FaultServer, RedisServer};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Lease ttl, heartbeat and Redis I/O timeout of the single-process cases.
const TTL: f64 = 2.0;
const NS: &str = "mistri:faults";

// ---------------------------------------------------------------- harness

/// A `Locks` on `url` with the suite's I/O timeout.
fn redis_locks(url: &str, timeout: f64) -> Locks {
    Locks::new(Redis::with_timeout(url, NS, secs(timeout)).unwrap())
}

fn hold_opts(key: &str) -> HoldOptions {
    HoldOptions {
        stop_key: Some(format!("stop-{key}")),
        ..opts(TTL, HEARTBEAT)
    }
}

fn hold_all(locks: &Locks, keys: &[String]) -> Vec<Hold> {
    keys.iter()
        .map(|k| locks.hold(k, hold_opts(k)).unwrap().expect("free key"))
        .collect()
}

/// A plain redis-rs connection straight to the server, for PTTL.
fn direct(server: &RedisServer) -> redis::Connection {
    let client = redis::Client::open(server.url()).unwrap();
    let con = client
        .get_connection_with_timeout(secs(2.0))
        .expect("direct connection");
    con.set_read_timeout(Some(secs(2.0))).unwrap();
    con
}

/// Waits until a renewal of `key` has just landed on the server (its PTTL
/// jumps back up), so a fault started right after it has the last
/// confirmable renewal at "now": the lease's latest server expiry is then
/// now + ttl, which makes the "told before expiry" bound sharp instead of
/// depending on where in the renewal cycle the fault happened to start.
fn wait_for_renewal(server: &RedisServer, key: &str) {
    let mut con = direct(server);
    let lease = lease_key(key);
    let start = Instant::now();
    let mut prev: i64 = redis::cmd("PTTL").arg(&lease).query(&mut con).unwrap();
    while start.elapsed() < secs(3.0) {
        let now: i64 = redis::cmd("PTTL").arg(&lease).query(&mut con).unwrap();
        if now > prev + 100 {
            return;
        }
        prev = now;
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("no renewal of {key} seen within 3 s (harness: is the hold renewing?)");
}

fn lease_key(key: &str) -> String {
    Redis::open("redis://127.0.0.1/0", NS)
        .unwrap()
        .lease_key(key)
}

// ---------------------------------------------------------------- sanity

/// The harness itself: the proxy forwards faithfully when not faulted,
/// holds silent when blackholed (delivering later), and delays as told; a
/// hold through it renews for several ttls.
#[test]
fn harness_proxy_forwards_holds_and_delays() {
    let _one = one_at_a_time();
    let server = RedisServer::start();
    let proxy = server.proxy();

    // Raw round trips, including a value larger than one read.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
    s.set_read_timeout(Some(secs(0.3))).unwrap();
    let big = "x".repeat(300_000);
    let set = format!(
        "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${}\r\n{big}\r\n*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n",
        big.len()
    );
    s.write_all(set.as_bytes()).unwrap();
    let want = format!("+OK\r\n${}\r\n{big}\r\n", big.len());
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while got.len() < want.len() {
        let n = s.read(&mut buf).expect("reply through the proxy");
        assert!(n > 0, "proxy closed the connection");
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, want.as_bytes(), "bytes changed in transit");

    // Blackhole: silence, bytes held, delivered after.
    proxy.blackhole(true);
    s.write_all(b"PING\r\n").unwrap();
    assert!(
        s.read(&mut buf).is_err(),
        "a blackholed proxy must stay silent (read should time out)"
    );
    proxy.blackhole(false);
    s.set_read_timeout(Some(secs(2.0))).unwrap();
    let n = s.read(&mut buf).unwrap();
    assert_eq!(
        &buf[..n],
        b"+PONG\r\n",
        "held bytes are delivered on resume"
    );

    // Delay: a round trip takes at least twice the delay.
    proxy.delay(secs(0.2));
    let start = Instant::now();
    s.write_all(b"PING\r\n").unwrap();
    let n = s.read(&mut buf).unwrap();
    let rtt = start.elapsed();
    assert_eq!(&buf[..n], b"+PONG\r\n");
    assert!(rtt >= secs(0.4), "delayed round trip took only {rtt:?}");
    assert!(rtt < secs(1.0), "delayed round trip took {rtt:?}");
    proxy.delay(Duration::ZERO);
    println!(
        "  proxy: 300 kB echoed intact; blackhole held and then delivered; delayed RTT {rtt:?}"
    );

    // A hold through the unfaulted proxy renews for several ttls.
    let locks = redis_locks(&proxy.url(), IO_TIMEOUT);
    let witness = redis_locks(&server.url(), IO_TIMEOUT);
    let ks = keys("sanity", 10);
    let holds = hold_all(&locks, &ks);
    std::thread::sleep(secs(3.0 * TTL));
    for (k, h) in ks.iter().zip(&holds) {
        assert!(
            !h.is_lost(),
            "{k}: lost through a healthy proxy: {:?}",
            h.signal().reason()
        );
        assert!(
            !witness.acquire(k, secs(1.0)).unwrap(),
            "{k}: lapsed through a healthy proxy"
        );
    }
    for h in holds {
        assert_eq!(h.release().unwrap(), mistri_locks::ReleaseOutcome::Released);
    }
    println!(
        "  a hold through the proxy renewed for {} s (3 ttls)",
        3.0 * TTL
    );

    // Drop closes everything and joins every thread.
    let before = mistri_locks_testkit::thread_count();
    drop(locks);
    drop(proxy);
    assert!(
        mistri_locks_testkit::thread_count() <= before,
        "proxy left threads behind"
    );
}

// ---------------------------------------------------------------- 1 blackhole

fn blackhole_case(n: usize) {
    let label = format!("blackhole N={n}");
    println!(
        "{label}: ttl {TTL} s, heartbeat {HEARTBEAT} s, Redis timeout {IO_TIMEOUT} s, stop keys on"
    );
    let server = RedisServer::start();
    let proxy = server.proxy();
    let locks = redis_locks(&proxy.url(), IO_TIMEOUT);
    let witness = redis_locks(&server.url(), IO_TIMEOUT);

    let all = keys(&format!("bh{n}"), n);
    let holds = hold_all(&locks, &all);
    let extra_key = unique("bh-release");
    let extra = locks
        .hold(&extra_key, hold_opts(&extra_key))
        .unwrap()
        .expect("free");
    let at = sample(n);
    let watched: Vec<String> = at.iter().map(|&i| all[i].clone()).collect();
    let told: Vec<Told> = at.iter().map(|&i| watch(&holds[i])).collect();

    // Renewing fine through the proxy first.
    std::thread::sleep(secs(1.2));
    let early: Vec<_> = holds.iter().filter(|h| h.is_lost()).collect();
    assert!(
        early.is_empty(),
        "{label}: {} holds lost before any fault",
        early.len()
    );

    wait_for_renewal(&server, &watched[0]);
    let silence = Instant::now();
    proxy.blackhole(true);

    // Release one hold mid-silence, before its lease can expire.
    std::thread::sleep(secs(0.5));
    let release_started = Instant::now();
    let released = release_in_background(extra);

    // Every lease expires by silence + ttl (its last renewal reached Redis
    // before the silence); allow 3 s more before calling it "never free".
    let taken = take_when_free(&witness, &watched, silence + secs(TTL + 3.0));
    let last_taken = taken
        .iter()
        .flatten()
        .max()
        .copied()
        .unwrap_or_else(Instant::now);
    wait_told(&told, last_taken + secs(LATE_WAIT));

    let frees: Vec<f64> = taken.iter().flatten().map(|t| diff(silence, *t)).collect();
    println!(
        "  {label}: leases taken by the independent client at silence + {}",
        stats(frees)
    );
    let told_at: Vec<f64> = told
        .iter()
        .filter_map(|t| t.get().map(|(at, _)| diff(silence, *at)))
        .collect();
    println!("  {label}: holders told at silence + {}", stats(told_at));
    let mut violations =
        judge_told_before(&label, &watched, &told, &taken, "the independent acquire");
    violations.extend(judge_release(
        &label,
        secs(IO_TIMEOUT),
        &released,
        release_started,
    ));
    // `finish` releases the holds after the proxy closed.
    finish(&label, Some(proxy), holds, violations);
}

#[test]
fn blackhole_1_hold() {
    let _one = one_at_a_time();
    blackhole_case(1);
}

#[test]
fn blackhole_10_holds() {
    let _one = one_at_a_time();
    blackhole_case(10);
}

#[test]
fn blackhole_1000_holds() {
    let _one = one_at_a_time();
    blackhole_case(1000);
}

// ---------------------------------------------------------------- 2 SIGSTOP

#[test]
fn redis_frozen_past_the_ttl() {
    let _one = one_at_a_time();
    let label = "frozen redis";
    println!("{label}: SIGSTOP for ttl + 1 s, then SIGCONT; ttl {TTL} s, heartbeat {HEARTBEAT} s");
    let mut server = RedisServer::start();
    let locks = redis_locks(&server.url(), IO_TIMEOUT);
    let witness = redis_locks(&server.url(), IO_TIMEOUT);
    let ks = keys("frozen", 10);
    let holds = hold_all(&locks, &ks);
    let told: Vec<Told> = holds.iter().map(watch).collect();
    std::thread::sleep(secs(1.2));
    assert!(holds.iter().all(|h| !h.is_lost()), "lost before the fault");

    wait_for_renewal(&server, &ks[0]);
    let (frozen, thawed) = server.frozen_for(secs(TTL + 1.0));

    let taken = take_when_free(&witness, &ks, thawed + secs(3.0));
    wait_told(&told, thawed + secs(LATE_WAIT));
    // The latest the server could expire a lease: freeze + ttl.
    let expiry = vec![Some(frozen + secs(TTL)); ks.len()];
    let told_at: Vec<f64> = told
        .iter()
        .filter_map(|t| t.get().map(|(at, _)| diff(frozen, *at)))
        .collect();
    println!(
        "  {label}: holders told at freeze + {}; thawed at freeze + {}",
        stats(told_at),
        ms(diff(frozen, thawed))
    );
    let mut violations = judge_told_before(
        label,
        &ks,
        &told,
        &expiry,
        "freeze + ttl (latest server expiry)",
    );
    violations.extend(judge_told_before(
        label,
        &ks,
        &told,
        &taken,
        "the independent acquire after SIGCONT",
    ));
    finish(label, None, holds, violations);
}

// ---------------------------------------------------------------- 3 restart

/// Redis killed right after a renewal and back, empty, a ttl later: the
/// holder must have been told before kill + ttl (when its lease would have
/// expired had the server lived; its timer, since nothing answers
/// meanwhile), and so before anyone acquires on the new server.
#[test]
fn redis_restarted_empty_after_downtime() {
    let _one = one_at_a_time();
    let label = "restart after downtime";
    println!("{label}: SIGKILL right after a renewal, down for a ttl, back empty on the same port");
    let mut server = RedisServer::start();
    let locks = redis_locks(&server.url(), IO_TIMEOUT);
    let witness = redis_locks(&server.url(), IO_TIMEOUT);
    let ks = keys("restart-down", 10);
    let holds = hold_all(&locks, &ks);
    let told: Vec<Told> = holds.iter().map(watch).collect();
    std::thread::sleep(secs(1.2));
    assert!(holds.iter().all(|h| !h.is_lost()), "lost before the fault");

    wait_for_renewal(&server, &ks[0]);
    let killed = Instant::now();
    server.restart_after(secs(TTL));
    let back = Instant::now();
    let taken = take_when_free(&witness, &ks, back + secs(3.0));
    wait_told(&told, back + secs(LATE_WAIT));
    let told_at: Vec<f64> = told
        .iter()
        .filter_map(|t| t.get().map(|(at, _)| diff(killed, *at)))
        .collect();
    println!(
        "  {label}: holders told at kill + {}; server back at kill + {}",
        stats(told_at),
        ms(diff(killed, back))
    );
    let expiry = vec![Some(killed + secs(TTL)); ks.len()];
    let mut violations = judge_told_before(
        label,
        &ks,
        &told,
        &expiry,
        "kill + ttl (latest expiry had it lived)",
    );
    violations.extend(judge_told_before(
        label,
        &ks,
        &told,
        &taken,
        "the independent acquire",
    ));
    finish(label, None, holds, violations);
}

/// Redis killed and restarted at once, empty. The lease is free the moment
/// the server is back, before any holder can hear of it: "told first" can't
/// be kept here (fencing is the defence). What is asserted: a renewal finds
/// the lease gone and the holder is told within a renewal interval + a tick
/// + the I/O timeout of the restart, and another client can acquire.
#[test]
fn redis_restarted_empty_at_once() {
    let _one = one_at_a_time();
    let label = "instant restart";
    println!("{label}: SIGKILL and restart on the same port, empty");
    let mut server = RedisServer::start();
    let locks = redis_locks(&server.url(), IO_TIMEOUT);
    let witness = redis_locks(&server.url(), IO_TIMEOUT);
    let ks = keys("restart-now", 10);
    let holds = hold_all(&locks, &ks);
    let fences: Vec<u64> = holds.iter().map(Hold::fence).collect();
    let told: Vec<Told> = holds.iter().map(watch).collect();
    std::thread::sleep(secs(1.2));
    assert!(holds.iter().all(|h| !h.is_lost()), "lost before the fault");

    server.restart();
    let back = Instant::now();
    let taken = take_when_free(&witness, &ks, back + secs(3.0));
    wait_told(&told, back + secs(LATE_WAIT));
    let gaps: Vec<f64> = told
        .iter()
        .filter_map(|t| t.get().map(|(at, _)| diff(back, *at)))
        .collect();
    let new_fences: Vec<u64> = ks.iter().filter_map(|k| witness.fence(k)).collect();
    println!(
        "  {label}: free at once (taken at back + {}); holders told at back + {}",
        stats(taken.iter().flatten().map(|t| diff(back, *t)).collect()),
        stats(gaps)
    );
    println!(
        "  {label}: fences before {:?}..{:?}, after the restart {:?}..{:?}",
        fences.first(),
        fences.last(),
        new_fences.first(),
        new_fences.last()
    );
    // The counters died with the server; the clock floor keeps fences rising.
    let highest_before = fences.iter().copied().max().unwrap_or(0);
    assert!(
        new_fences.iter().all(|f| *f > highest_before),
        "{label}: a fence went backwards across the restart: {fences:?} -> {new_fences:?}"
    );
    let renew_every = HEARTBEAT.min(TTL / 3.0);
    let bound = back + secs(renew_every + HEARTBEAT.min(1.0) + IO_TIMEOUT);
    let mut violations = Vec::new();
    for ((k, t), got) in ks.iter().zip(&told).zip(&taken) {
        if got.is_none() {
            violations.push(format!("{label}: {k}: not free after the restart"));
        }
        match t.get() {
            Some((at, reason)) if *at <= bound && reason.starts_with("lease lost:") => {}
            Some((at, reason)) => violations.push(format!(
                "{label}: {k}: told at back + {} ({reason:?}); bound {}",
                ms(diff(back, *at)),
                ms(diff(back, bound))
            )),
            None => violations.push(format!("{label}: {k}: never told")),
        }
    }
    finish(label, None, holds, violations);
}

// ---------------------------------------------------------------- 4 latency

#[test]
fn latency_beyond_the_margin() {
    let _one = one_at_a_time();
    // 1.2 s each way: a round trip (2.4 s) outlasts the ttl, so no renewal
    // sent after the delay starts can be confirmed in time, while the first
    // renewal sent after it (0.5 s later) still reaches Redis 0.3 s before
    // the lease expires - a late renewal that could extend it. (With 1.5 s
    // it would land just as the lease expires: a coin toss.)
    let label = "delay 1.2 s";
    let delay = 1.2;
    println!("{label}: every chunk held {delay} s each way; ttl {TTL} s, heartbeat {HEARTBEAT} s, Redis timeout {IO_TIMEOUT} s");
    let server = RedisServer::start();
    let proxy = server.proxy();
    let locks = redis_locks(&proxy.url(), IO_TIMEOUT);
    let witness = redis_locks(&server.url(), IO_TIMEOUT);
    let mut pttl = direct(&server);
    let ks = keys("latency", 10);
    let holds = hold_all(&locks, &ks);
    let told: Vec<Told> = holds.iter().map(watch).collect();
    std::thread::sleep(secs(1.2));
    assert!(holds.iter().all(|h| !h.is_lost()), "lost before the fault");

    // Any renewal sent from now on needs >= 2 * delay > ttl to be answered,
    // so the last one the holder could see confirmed was sent before
    // `slowed`: no lease may outlive slowed + ttl once its holder was told.
    wait_for_renewal(&server, &ks[0]);
    let slowed = Instant::now();
    proxy.delay(secs(delay));
    let implied = slowed + secs(TTL);
    let slack = 0.15;

    let lease_keys: Vec<String> = ks.iter().map(|k| lease_key(k)).collect();
    let mut taken: Vec<Option<Instant>> = vec![None; ks.len()];
    let mut latest_after_told: Vec<Option<Instant>> = vec![None; ks.len()];
    let until = slowed + secs(TTL + 2.0 * delay + 2.0 * TTL + 1.0);
    while Instant::now() < until && taken.iter().any(Option::is_none) {
        for i in 0..ks.len() {
            if taken[i].is_some() {
                continue;
            }
            let now = Instant::now();
            let left: i64 = redis::cmd("PTTL")
                .arg(&lease_keys[i])
                .query(&mut pttl)
                .unwrap();
            if left > 0 {
                let expiry = now + Duration::from_millis(left as u64);
                if told[i].get().is_some_and(|(at, _)| *at < now) {
                    let e = latest_after_told[i].get_or_insert(expiry);
                    *e = (*e).max(expiry);
                }
            } else if witness.acquire(&ks[i], secs(60.0)).unwrap_or(false) {
                taken[i] = Some(now);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    wait_told(&told, Instant::now() + secs(LATE_WAIT));

    let mut violations = judge_told_before(label, &ks, &told, &taken, "the independent acquire");
    // Had no late renewal extended it, the lease would have expired at
    // slowed + ttl: the holder must be told before that too.
    let implied_all = vec![Some(implied); ks.len()];
    violations.extend(judge_told_before(
        label,
        &ks,
        &told,
        &implied_all,
        "slowed + ttl (expiry of the last confirmable renewal)",
    ));
    let mut extensions = Vec::new();
    for (i, k) in ks.iter().enumerate() {
        if let Some(e) = latest_after_told[i] {
            let over = diff(implied, e);
            extensions.push(over);
            if over > slack {
                violations.push(format!(
                    "{label}: {k}: after the holder was told the lease lived to {} past the last confirmable renewal's expiry",
                    ms(over)
                ));
            }
        }
        if let Some(t) = taken[i] {
            let over = diff(implied, t);
            if over > slack + 0.05 {
                violations.push(format!(
                    "{label}: {k}: free only {} after the last confirmable renewal's expiry",
                    ms(over)
                ));
            }
        }
    }
    println!(
        "  {label}: taken at slowed + {}; server expiry seen after told, relative to slowed + ttl: {}",
        stats(taken.iter().flatten().map(|t| diff(slowed, *t)).collect()),
        stats(extensions)
    );
    finish(label, Some(proxy), holds, violations);
}

// ---------------------------------------------------------------- 5 SIGKILL

#[test]
fn holder_process_killed() {
    let _one = one_at_a_time();
    let label = "holder SIGKILLed";
    let dir = TempDir::new("mistri-fault-kill");
    let server = RedisServer::start();
    let key = unique("killed");
    let mut child = spawn_role(
        "MISTRI_FAULT",
        "hold",
        &dir.0,
        &[("URL", server.url()), ("KEY", key.clone())],
    );
    let ready = dir.0.join("ready");
    wait_for(&ready, secs(20.0), &mut child);
    let fence: u64 = std::fs::read_to_string(&ready)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::thread::sleep(secs(1.2)); // a few renewals

    let killed = Instant::now();
    child.kill().unwrap();
    child.wait().unwrap();
    let witness = redis_locks(&server.url(), IO_TIMEOUT);
    let tick = HEARTBEAT.min(1.0);
    let taken = take_when_free(
        &witness,
        std::slice::from_ref(&key),
        killed + secs(TTL + tick + 2.0),
    )[0];
    let Some(taken) = taken else {
        panic!(
            "{label}: lease not free {} s after the kill",
            TTL + tick + 2.0
        );
    };
    let free_after = diff(killed, taken);
    let new_fence = witness.fence(&key).unwrap();
    println!("  {label}: lease taken by another client at kill + {} (bound ttl + tick = {}); fence {fence} -> {new_fence}", ms(free_after), ms(TTL + tick));
    assert!(
        free_after <= TTL + tick,
        "{label}: free only after {}",
        ms(free_after)
    );
    assert!(new_fence > fence, "{label}: fence {fence} -> {new_fence}");
}

// ---------------------------------------------------------------- children

/// The child processes' entry point.
#[test]
fn child() {
    let Ok(role) = std::env::var("MISTRI_FAULT_ROLE") else {
        return;
    };
    let dir = PathBuf::from(std::env::var("MISTRI_FAULT_DIR").unwrap());
    match role.as_str() {
        "hold" => {
            let url = std::env::var("MISTRI_FAULT_URL").unwrap();
            let key = std::env::var("MISTRI_FAULT_KEY").unwrap();
            let locks = redis_locks(&url, IO_TIMEOUT);
            let hold = locks
                .hold(&key, opts(TTL, HEARTBEAT))
                .unwrap()
                .expect("free");
            std::fs::write(dir.join("ready.tmp"), hold.fence().to_string()).unwrap();
            std::fs::rename(dir.join("ready.tmp"), dir.join("ready")).unwrap();
            std::thread::sleep(secs(60.0));
        }
        other => panic!("unknown role {other}"),
    }
}
