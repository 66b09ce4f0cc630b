//! The fault cases, one generic body each, for any backend whose server
//! harness implements the testkit's `FaultServer` and whose suite says how
//! a client reaches it ([`FaultBackend`]). A backend's fault suite is then
//! a list: `fault_suite!` names each case as a test of that suite, takes
//! the one-at-a-time guard for it, and adds the `child` entry point the
//! multi-process case re-executes.
//!
//! ```text
//! impl FaultBackend for RedisServer { const NS = …; const RECOVERY = …; fn locks(url) … }
//! fault_suite! {
//!     RedisServer;
//!     blackhole_1_hold => blackhole(1);
//!     redis_frozen_past_the_ttl => frozen_past_the_ttl();
//! }
//! ```
//!
//! Every case runs with ttl [`TTL`], heartbeat [`HEARTBEAT`] and I/O
//! timeout [`IO_TIMEOUT`]; its holder is one `Locks` (through a [`Proxy`]
//! where the network is the fault), its witness another, straight to the
//! server. A fault starts right after a renewal of a watched key landed
//! ([`wait_for_renewal`]), so "fault + ttl" is the lease's latest server
//! expiry. Each case prints its figures and checks every promise before
//! failing ([`finish`]).
//!
//! A restart at once differs by the server: one that comes back empty
//! frees every lease before a holder can hear of it
//! ([`restarted_empty_at_once`]); one that keeps its data keeps the leases
//! ([`restarted_with_data_at_once`]). Each checks `FaultServer::KEEPS_DATA`,
//! so a suite that lists the wrong one fails saying so.

use super::*;
use crate::common::{opts, secs};
use mistri_locks::{Hold, Locks, ReleaseOutcome};
use mistri_locks_testkit::{unique, FaultServer};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How a case reaches a backend's server (module header).
pub trait FaultBackend: FaultServer + Sized {
    /// How long after a server fault ends (the thaw, the server back from a
    /// restart) the witness is given to take every lease: the server's own
    /// recovery, not a figure of the case.
    const RECOVERY: f64;
    /// A fresh server, ready for a case (the default: just started).
    fn ready() -> Self {
        Self::start()
    }
    /// A `Locks` on `url` with the suite's I/O timeout ([`IO_TIMEOUT`]),
    /// ready for a case.
    fn locks(url: &str) -> Locks;
}

/// Lists a backend's generic cases as its tests (module header): `SERVER;`
/// then `test_name => case(args);` for each, with doc comments if wanted.
macro_rules! fault_suite {
    ($server:ty; $($(#[$meta:meta])* $name:ident => $case:ident($($arg:expr),*);)*) => {
        $(
            $(#[$meta])*
            #[test]
            fn $name() {
                let _one = $crate::fault_kit::one_at_a_time();
                $crate::fault_kit::cases::$case::<$server>($($arg),*);
            }
        )*

        /// The child processes' entry point: does nothing unless
        /// `MISTRI_FAULT_ROLE` is set.
        #[test]
        fn child() {
            $crate::fault_kit::cases::child::<$server>();
        }
    };
}
pub(crate) use fault_suite;

/// The prefix of the child processes' environment (`{ROLE_ENV}_ROLE` …).
const ROLE_ENV: &str = "MISTRI_FAULT";

/// Told instants of the holds that have one, as seconds after `since`.
fn told_after(told: &[Told], since: Instant) -> Vec<f64> {
    told.iter()
        .filter_map(|t| t.get().map(|(at, _)| diff(since, *at)))
        .collect()
}

/// When the server last renewed `key`, read by `witness`.
fn renewed_at(witness: &Locks, key: &str) -> Option<std::time::SystemTime> {
    witness
        .info(key)
        .ok()
        .flatten()
        .and_then(|i| i.holder.map(|h| h.renewed_at))
}

/// The harness: a hold through the unfaulted proxy renews for several
/// ttls, the witness sees it held throughout, a release frees it, and the
/// proxy leaves no thread behind.
pub fn harness_hold_through_the_proxy<S: FaultBackend>() {
    let server = S::ready();
    let proxy = server.proxy();
    let locks = S::locks(&server.url_via(&proxy));
    let witness = S::locks(&server.url());
    let ks = keys("sanity", 10);
    let holds = hold_all(&locks, &ks);
    let before = renewed_at(&witness, &ks[0]);
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
    assert_ne!(renewed_at(&witness, &ks[0]), before, "renewals land");
    assert!(proxy.connections() >= 1);
    for h in holds {
        assert_eq!(h.release().unwrap(), ReleaseOutcome::Released);
    }
    for k in &ks {
        assert!(
            witness.acquire(k, secs(1.0)).unwrap(),
            "{k}: free after release"
        );
    }
    println!(
        "  a hold through the proxy renewed for {} s (3 ttls)",
        3.0 * TTL
    );
    // Drop closes everything and joins every thread.
    let threads = mistri_locks_testkit::thread_count();
    drop(locks);
    drop(proxy);
    assert!(
        mistri_locks_testkit::thread_count() <= threads,
        "proxy left threads behind"
    );
}

/// The holder's proxy goes silent (holding the bytes) right after a
/// renewal; `n` holds, every 50th and the last watched: told before the
/// witness takes the lease; one more hold's `release()`, called 0.5 s into
/// the silence, returns within the I/O timeout + 1 s.
pub fn blackhole<S: FaultBackend>(n: usize) {
    let label = format!("blackhole N={n}");
    println!(
        "{label}: ttl {TTL} s, heartbeat {HEARTBEAT} s, I/O timeout {IO_TIMEOUT} s, stop keys on"
    );
    let server = S::ready();
    let proxy = server.proxy();
    let locks = S::locks(&server.url_via(&proxy));
    let witness = S::locks(&server.url());

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
    let early = holds.iter().filter(|h| h.is_lost()).count();
    assert_eq!(early, 0, "{label}: {early} holds lost before any fault");

    wait_for_renewal(&witness, &watched[0]);
    let silence = Instant::now();
    proxy.blackhole(true);

    // Release one hold mid-silence, before its lease can expire.
    std::thread::sleep(secs(0.5));
    let release_started = Instant::now();
    let released = release_in_background(extra);

    // Every lease expires by silence + ttl (its last renewal reached the
    // server before the silence); allow 3 s more before "never free".
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
    println!(
        "  {label}: holders told at silence + {}",
        stats(told_after(&told, silence))
    );
    let mut violations =
        judge_told_before(&label, &watched, &told, &taken, "the independent acquire");
    let io = locks.adapter().io_timeout();
    violations.extend(judge_release(&label, io, &released, release_started));
    // `finish` releases the holds after the proxy closed.
    finish(&label, Some(proxy), holds, violations);
}

/// Every server process stopped (SIGSTOP) right after a renewal, for ttl +
/// 1 s, then SIGCONT: told before freeze + ttl (no renewal can land during
/// the freeze) and before the witness takes the lease after the thaw; a
/// fresh hold works on the thawed server.
pub fn frozen_past_the_ttl<S: FaultBackend>() {
    let label = "frozen server";
    println!("{label}: SIGSTOP of every server process for ttl + 1 s, then SIGCONT; ttl {TTL} s, heartbeat {HEARTBEAT} s");
    let mut server = S::ready();
    let locks = S::locks(&server.url());
    let witness = S::locks(&server.url());
    let ks = keys("frozen", 10);
    let holds = hold_all(&locks, &ks);
    let told: Vec<Told> = holds.iter().map(watch).collect();
    std::thread::sleep(secs(1.2));
    assert!(holds.iter().all(|h| !h.is_lost()), "lost before the fault");

    wait_for_renewal(&witness, &ks[0]);
    let (frozen, thawed) = server.frozen_for(secs(TTL + 1.0));

    let taken = take_when_free(&witness, &ks, thawed + secs(S::RECOVERY));
    wait_told(&told, thawed + secs(LATE_WAIT));
    // The latest the server could expire a lease: freeze + ttl.
    let expiry = vec![Some(frozen + secs(TTL)); ks.len()];
    println!(
        "  {label}: holders told at freeze + {}; thawed at freeze + {}; taken at thaw + {}",
        stats(told_after(&told, frozen)),
        ms(diff(frozen, thawed)),
        stats(taken.iter().flatten().map(|t| diff(thawed, *t)).collect())
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
    // It resumes: a fresh hold works on the thawed server.
    let again = unique("frozen-after");
    match locks.hold(&again, hold_opts(&again)) {
        Ok(Some(h)) => {
            let _ = h.release();
        }
        other => violations.push(format!(
            "{label}: no fresh hold after the thaw: {:?}",
            other.map(|h| h.is_some())
        )),
    }
    finish(label, None, holds, violations);
}

/// The server down right after a renewal (`restart_after`: Redis killed and
/// back empty, Postgres shut down fast and back with its data) and back a
/// ttl later: told before down + ttl (when the lease expires, had it lived;
/// the holder's timer, since nothing answers meanwhile), so before the
/// witness takes it; fences after it above every fence before.
pub fn restarted_after_downtime<S: FaultBackend>() {
    let label = "restart after downtime";
    let back = if S::KEEPS_DATA {
        "with its data"
    } else {
        "empty"
    };
    println!("{label}: down right after a renewal, for a ttl, back on the same port {back}");
    let mut server = S::ready();
    let locks = S::locks(&server.url());
    let witness = S::locks(&server.url());
    let ks = keys("restart-down", 10);
    let holds = hold_all(&locks, &ks);
    let fences: Vec<u64> = holds.iter().map(Hold::fence).collect();
    let told: Vec<Told> = holds.iter().map(watch).collect();
    std::thread::sleep(secs(1.2));
    assert!(holds.iter().all(|h| !h.is_lost()), "lost before the fault");

    wait_for_renewal(&witness, &ks[0]);
    let down = Instant::now();
    server.restart_after(secs(TTL));
    let back = Instant::now();
    let taken = take_when_free(&witness, &ks, back + secs(S::RECOVERY));
    wait_told(&told, back + secs(LATE_WAIT));
    println!(
        "  {label}: holders told at down + {}; server back at down + {}",
        stats(told_after(&told, down)),
        ms(diff(down, back))
    );
    let expiry = vec![Some(down + secs(TTL)); ks.len()];
    let mut violations = judge_told_before(
        label,
        &ks,
        &told,
        &expiry,
        "down + ttl (latest expiry had it lived)",
    );
    violations.extend(judge_told_before(
        label,
        &ks,
        &told,
        &taken,
        "the independent acquire",
    ));
    let after: Vec<u64> = ks.iter().filter_map(|k| witness.fence(k)).collect();
    violations.extend(judge_fences(label, &fences, &after));
    finish(label, None, holds, violations);
}

/// A server that comes back empty, restarted at once. The lease is free
/// the moment the server is back, before any holder can hear of it: "told
/// first" can't be kept here (fencing is the defence). What is asserted: a
/// renewal finds the lease gone and the holder is told within a renewal
/// interval + a tick + the I/O timeout of the restart, another client can
/// acquire, and fences keep rising (the counters died with the server; the
/// clock floor keeps them rising).
pub fn restarted_empty_at_once<S: FaultBackend>() {
    assert!(
        !S::KEEPS_DATA,
        "this server keeps its data across a restart: list restarted_with_data_at_once"
    );
    let label = "instant restart";
    println!("{label}: killed and restarted on the same port, empty");
    let mut server = S::ready();
    let locks = S::locks(&server.url());
    let witness = S::locks(&server.url());
    let ks = keys("restart-now", 10);
    let holds = hold_all(&locks, &ks);
    let fences: Vec<u64> = holds.iter().map(Hold::fence).collect();
    let told: Vec<Told> = holds.iter().map(watch).collect();
    std::thread::sleep(secs(1.2));
    assert!(holds.iter().all(|h| !h.is_lost()), "lost before the fault");

    server.restart();
    let back = Instant::now();
    let taken = take_when_free(&witness, &ks, back + secs(S::RECOVERY));
    wait_told(&told, back + secs(LATE_WAIT));
    println!(
        "  {label}: free at once (taken at back + {}); holders told at back + {}",
        stats(taken.iter().flatten().map(|t| diff(back, *t)).collect()),
        stats(told_after(&told, back))
    );
    let after: Vec<u64> = ks.iter().filter_map(|k| witness.fence(k)).collect();
    let mut violations = judge_fences(label, &fences, &after);
    let renew_every = HEARTBEAT.min(TTL / 3.0);
    let bound = back + secs(renew_every + HEARTBEAT.min(1.0) + IO_TIMEOUT);
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

/// A server that keeps its data, restarted shorter than the safety margin,
/// twice: a fast shutdown (`restart`: every connection closed) and a crash
/// (`crash_restart`: SIGKILL of every server process, recovery). The
/// leases survive, so a hold may survive too; what is asserted: no key is
/// taken by anyone while its holder was not told (told first, or not taken
/// at all), a hold not lost still holds its key, and fences keep rising.
pub fn restarted_with_data_at_once<S: FaultBackend>() {
    assert!(
        S::KEEPS_DATA,
        "this server comes back empty: list restarted_empty_at_once"
    );
    for crash in [false, true] {
        let label = if crash {
            "crash restart"
        } else {
            "instant restart"
        };
        println!(
            "{label}: {} and back on the same port at once",
            if crash {
                "SIGKILL of every server process"
            } else {
                "fast shutdown"
            }
        );
        let mut server = S::ready();
        let locks = S::locks(&server.url());
        let witness = S::locks(&server.url());
        let ks = keys(if crash { "crash" } else { "restart-now" }, 10);
        let holds = hold_all(&locks, &ks);
        let fences: Vec<u64> = holds.iter().map(Hold::fence).collect();
        let told: Vec<Told> = holds.iter().map(watch).collect();
        std::thread::sleep(secs(1.2));
        assert!(holds.iter().all(|h| !h.is_lost()), "lost before the fault");

        let fault = Instant::now();
        if crash {
            server.crash_restart();
        } else {
            server.restart();
        }
        let back = Instant::now();
        // Watch for a whole ttl and more: a hold that survives keeps its key.
        let taken = take_when_free(&witness, &ks, back + secs(TTL + 1.0));
        wait_told(&told, back + secs(0.5));
        let survived = told.iter().filter(|t| t.get().is_none()).count();
        println!(
            "  {label}: server back at fault + {}; holds surviving: {survived}/{}; holders told at fault + {}",
            ms(diff(fault, back)),
            ks.len(),
            stats(told_after(&told, fault))
        );
        let mut violations = judge_exclusive_while_held(label, &ks, &told, &taken);
        for (k, h) in ks.iter().zip(&holds) {
            if !h.is_lost() && !locks.held(k).unwrap_or(false) {
                violations.push(format!(
                    "{label}: {k}: hold not lost but the key is not held"
                ));
            }
        }
        // Fences rise for whoever takes the keys next.
        for h in holds {
            let _ = h.release();
        }
        let free: Vec<String> = ks
            .iter()
            .zip(&taken)
            .filter(|(_, t)| t.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        let mut after = Vec::new();
        for k in &free {
            if witness.acquire(k, secs(60.0)).unwrap_or(false) {
                after.extend(witness.fence(k));
            } else {
                violations.push(format!("{label}: {k}: not free after its holder released"));
            }
        }
        after.extend(
            ks.iter()
                .zip(&taken)
                .filter(|(_, t)| t.is_some())
                .filter_map(|(k, _)| witness.fence(k)),
        );
        violations.extend(judge_fences(label, &fences, &after));
        assert!(
            violations.is_empty(),
            "{label}: {} violation(s):\n{}",
            violations.len(),
            violations.join("\n")
        );
    }
}

/// Every chunk through the holder's proxy delayed 1.2 s each way, right
/// after a renewal: told before the witness takes the lease and before
/// slowed + ttl; once told, the lease's server expiry (read by the witness)
/// never passes slowed + ttl + 150 ms, and it is free by then.
pub fn latency_beyond_the_margin<S: FaultBackend>() {
    // 1.2 s each way: a round trip (2.4 s) outlasts the ttl, so no renewal
    // sent after the delay starts can be confirmed in time, while the first
    // renewal sent after it (0.5 s later) still reaches the server 0.3 s
    // before the lease expires - a late renewal that could extend it. (With
    // 1.5 s it would land just as the lease expires: a coin toss.)
    let label = "delay 1.2 s";
    let delay = 1.2;
    println!("{label}: every chunk held {delay} s each way; ttl {TTL} s, heartbeat {HEARTBEAT} s, I/O timeout {IO_TIMEOUT} s");
    let server = S::ready();
    let proxy = server.proxy();
    let locks = S::locks(&server.url_via(&proxy));
    let witness = S::locks(&server.url());
    let ks = keys("latency", 10);
    let holds = hold_all(&locks, &ks);
    let told: Vec<Told> = holds.iter().map(watch).collect();
    std::thread::sleep(secs(1.2));
    assert!(holds.iter().all(|h| !h.is_lost()), "lost before the fault");

    // Any renewal sent from now on needs >= 2 * delay > ttl to be answered,
    // so the last one the holder could see confirmed was sent before
    // `slowed`: no lease may outlive slowed + ttl once its holder was told.
    wait_for_renewal(&witness, &ks[0]);
    let slowed = Instant::now();
    proxy.delay(secs(delay));
    let implied = slowed + secs(TTL);
    let slack = 0.15;

    let mut taken: Vec<Option<Instant>> = vec![None; ks.len()];
    let mut latest_after_told: Vec<Option<Instant>> = vec![None; ks.len()];
    let until = slowed + secs(TTL + 2.0 * delay + 2.0 * TTL + 1.0);
    while Instant::now() < until && taken.iter().any(Option::is_none) {
        for i in 0..ks.len() {
            if taken[i].is_some() {
                continue;
            }
            let now = Instant::now();
            let left = witness
                .info(&ks[i])
                .expect("the witness reads straight from the server")
                .and_then(|info| info.time_left)
                .filter(|left| !left.is_zero());
            if let Some(left) = left {
                let expiry = now + left;
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

/// The holder's process SIGKILLed right after a renewal: the lease is
/// still held right after the kill, free when the server's clock passes
/// that renewal + ttl (not 50 ms before: the renewal landed at most the
/// witness's poll gap and a round trip before it was seen), at most a tick
/// after kill + ttl; the next fence is greater.
pub fn holder_process_killed<S: FaultBackend>() {
    let label = "holder SIGKILLed";
    let dir = TempDir::new("mistri-fault-kill");
    let server = S::ready();
    let key = unique("killed");
    let mut child = spawn_role(
        ROLE_ENV,
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
    let witness = S::locks(&server.url());
    std::thread::sleep(secs(1.2)); // a few renewals
    wait_for_renewal(&witness, &key);
    let last_renewal = Instant::now();

    let killed = Instant::now();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !witness.acquire(&key, secs(60.0)).unwrap(),
        "{label}: free right after the kill"
    );
    let tick = HEARTBEAT.min(1.0);
    let within = TTL + tick + 2.0;
    let taken = take_when_free(&witness, std::slice::from_ref(&key), killed + secs(within))[0];
    let Some(taken) = taken else {
        panic!("{label}: lease not free {within} s after the kill");
    };
    let free_after = diff(killed, taken);
    let since_renewal = diff(last_renewal, taken);
    let new_fence = witness.fence(&key).unwrap();
    println!(
        "  {label}: lease taken by another client at kill + {} (last renewal + {}; bound ttl + tick = {}); fence {fence} -> {new_fence}",
        ms(free_after),
        ms(since_renewal),
        ms(TTL + tick)
    );
    // The kill came within a millisecond of the renewal seen, long before
    // the next one (every 0.5 s).
    assert!(
        since_renewal >= TTL - 0.05,
        "{label}: free only {} after the last renewal seen, ttl {}",
        ms(since_renewal),
        ms(TTL)
    );
    assert!(
        free_after <= TTL + tick,
        "{label}: free only after {}",
        ms(free_after)
    );
    assert!(new_fence > fence, "{label}: fence {fence} -> {new_fence}");
}

/// The child processes' entry point (`fault_suite!`'s `child` test): does
/// nothing unless `MISTRI_FAULT_ROLE` is set.
pub fn child<S: FaultBackend>() {
    let env = |name: &str| std::env::var(format!("{ROLE_ENV}_{name}"));
    let Ok(role) = env("ROLE") else {
        return;
    };
    let dir = PathBuf::from(env("DIR").unwrap());
    match role.as_str() {
        "hold" => {
            let locks = S::locks(&env("URL").unwrap());
            let hold = locks
                .hold(&env("KEY").unwrap(), opts(TTL, HEARTBEAT))
                .unwrap()
                .expect("free");
            std::fs::write(dir.join("ready.tmp"), hold.fence().to_string()).unwrap();
            std::fs::rename(dir.join("ready.tmp"), dir.join("ready")).unwrap();
            std::thread::sleep(secs(60.0));
        }
        other => panic!("unknown role {other}"),
    }
}
