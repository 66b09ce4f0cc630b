//! The fault suite on Postgres: what a hold promises whatever the network
//! or the database does, on a real PostgreSQL server on loopback (the
//! testkit's [`PgServer`]), through the testkit's [`Proxy`] where the
//! network is the fault, and through a [`PgBouncer`] in transaction pooling
//! mode. The Redis twin is `network_faults.rs`; the promises are the same:
//!
//! 1. **Told first.** A hold's signal trips, with a reason starting
//!    `lease lost:`, strictly before anyone else could acquire its lease.
//!    An independent client (its own `Locks`, straight to the server, never
//!    through the proxy) polls `acquire` on the holder's keys every few ms;
//!    the instant taken just before the acquire that succeeded must come
//!    after the instant the holder's `on_abort` callback ran.
//! 2. **Release is bounded** by the adapter's I/O timeout + 1 s, whatever
//!    the network does (an `Error::Connection` is an allowed answer).
//! 3. **Fences keep rising**, across a server restart and a crash too.
//! 4. **A dead holder's lease is free after the ttl, not before.**
//! 5. **Mutual exclusion** under injected faults, judged by an independent
//!    witness (the holders' own records, on one host clock).
//!
//! Postgres keeps its rows across a restart (unlike the Redis test
//! server, which starts empty): a lease that was live when the server went
//! down is still there when it comes back, until its `expires_at` passes
//! on the database clock.
//!
//! Each case prints its figures (`--nocapture`) and checks every promise
//! before failing:
//!
//! ```text
//! cargo test -p mistri_locks_core --test postgres_faults -- --nocapture --test-threads=1
//! MISTRI_SOAK_SECS=60 cargo test -p mistri_locks_core --test postgres_faults soak -- --nocapture
//! ```
//!
//! The test binary re-executes itself for the multi-process cases: `child`
//! does nothing unless `MISTRI_PGFAULT_ROLE` is set.

mod common;
use common::*;
use mistri_locks::{Error, Hold, HoldOptions, Locks, Postgres, ReleaseOutcome};
use mistri_locks_testkit::{unique, PgBouncer, PgServer, Proxy};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// Lease ttl, heartbeat and I/O timeout of the single-process cases.
const TTL: f64 = 2.0;
const HEARTBEAT: f64 = 0.5;
const IO_TIMEOUT: f64 = 1.0;
/// `release()` must return within the adapter's timeout plus this.
const RELEASE_SLACK: f64 = 1.0;
/// How long past the moment it is due a case waits for a late "told", to
/// measure how late it was (a bounded wait: the figure is then "> this").
const LATE_WAIT: f64 = 5.0;
const NS: &str = "mistri:pgfaults";

// ---------------------------------------------------------------- harness

/// When a hold's signal tripped, and why (set by an `on_abort` callback).
type Told = Arc<OnceLock<(Instant, String)>>;

fn watch(hold: &Hold) -> Told {
    let told: Told = Arc::default();
    let cell = told.clone();
    hold.signal().on_abort(move |reason| {
        let _ = cell.set((Instant::now(), reason.unwrap_or("").to_owned()));
    });
    told
}

/// `postgres://postgres@127.0.0.1:PORT/postgres` for a proxy's port.
fn via(proxy: &Proxy) -> String {
    format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port())
}

/// A `Locks` on `url` with the suite's I/O timeout, warmed: a fresh
/// adapter's first call pays for a new server process and the first compile
/// of the schema's functions in it, which a case must not spend from its
/// ttl or its 1 s I/O timeout (as the contract fixture's `warmed`). Tried up
/// to three times; a case then meets any remaining trouble itself.
fn pg_locks(url: &str, timeout: f64) -> Locks {
    let locks =
        Locks::new(Postgres::with_timeout(url, NS, secs(timeout)).expect("postgres adapter"));
    let key = unique("warm-up");
    for _ in 0..3 {
        match locks.acquire(&key, secs(5.0)) {
            Ok(true) => {
                let _ = locks.release(&key);
                break;
            }
            Ok(false) => break,
            Err(_) => continue,
        }
    }
    locks
}

/// How long the harness gives a fresh server to create the schema (DDL and
/// the functions' first compile; seconds under load, not a case's figure).
const SCHEMA_TIMEOUT: f64 = 30.0;

/// A fresh [`PgServer`] with the schema already made, by one call with a
/// long timeout: on a new server the first call runs the DDL, which under
/// load takes longer than a case's 1 s I/O timeout.
fn pg_server() -> PgServer {
    let server = PgServer::start();
    Locks::new(
        Postgres::with_timeout(&server.url(), NS, secs(SCHEMA_TIMEOUT)).expect("postgres adapter"),
    )
    .held("warm-up")
    .expect("the schema on a fresh server");
    server
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

fn keys(prefix: &str, n: usize) -> Vec<String> {
    let base = unique(prefix);
    (0..n).map(|i| format!("{base}-{i}")).collect()
}

/// Every 50th index plus the last (all of them for small `n`).
fn sample(n: usize) -> Vec<usize> {
    let mut at: Vec<usize> = (0..n).step_by(50).collect();
    if at.last() != Some(&(n - 1)) {
        at.push(n - 1);
    }
    at
}

/// The independent client: polls `acquire` on every key every ~2 ms until
/// it has them all or `until` passes. For each key: the instant taken just
/// before sending the acquire that succeeded. Errors (server away) count as
/// "not yet".
fn take_when_free(witness: &Locks, keys: &[String], until: Instant) -> Vec<Option<Instant>> {
    let mut taken = vec![None; keys.len()];
    while Instant::now() < until && taken.iter().any(Option::is_none) {
        for (key, slot) in keys.iter().zip(taken.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            let sent = Instant::now();
            if let Ok(true) = witness.acquire(key, secs(60.0)) {
                *slot = Some(sent);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    taken
}

/// Waits (bounded) until every `told` is set or `until` passes.
fn wait_told(told: &[Told], until: Instant) {
    while Instant::now() < until && told.iter().any(|t| t.get().is_none()) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn ms(d: f64) -> String {
    format!("{:.0} ms", d * 1000.0)
}

/// Signed seconds `b - a`.
fn diff(a: Instant, b: Instant) -> f64 {
    if b >= a {
        (b - a).as_secs_f64()
    } else {
        -(a - b).as_secs_f64()
    }
}

fn stats(mut v: Vec<f64>) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.sort_by(f64::total_cmp);
    format!(
        "min {} / median {} / max {}",
        ms(v[0]),
        ms(v[v.len() / 2]),
        ms(v[v.len() - 1])
    )
}

/// Promise 1 for each key: told (reason `lease lost:`) strictly before
/// `before[i]`. Prints the lead times; returns the violations.
fn judge_told_before(
    label: &str,
    keys: &[String],
    told: &[Told],
    before: &[Option<Instant>],
    what: &str,
) -> Vec<String> {
    let mut violations = Vec::new();
    let mut leads = Vec::new();
    let mut late = Vec::new();
    let mut untold = 0;
    for ((key, told), before) in keys.iter().zip(told).zip(before) {
        let Some(before) = before else {
            violations.push(format!("{label}: {key}: {what} never happened"));
            continue;
        };
        match told.get() {
            None => {
                untold += 1;
                violations.push(format!(
                    "{label}: {key}: holder not told within {LATE_WAIT} s after {what}"
                ));
            }
            Some((at, reason)) => {
                if !reason.starts_with("lease lost:") {
                    violations.push(format!(
                        "{label}: {key}: reason does not start with `lease lost:`: {reason:?}"
                    ));
                }
                let lead = diff(*at, *before);
                if lead > 0.0 {
                    leads.push(lead);
                } else {
                    late.push(-lead);
                    violations.push(format!("{label}: {key}: told {} AFTER {what}", ms(-lead)));
                }
            }
        }
    }
    println!(
        "  {label}: {} keys watched; told before {what}: {} (lead {}); told after: {} (late by {}); not told within {LATE_WAIT} s: {untold}",
        keys.len(),
        leads.len(),
        stats(leads),
        late.len(),
        stats(late),
    );
    violations
}

/// For keys whose holder was NOT told: the independent client must not
/// have got the lease either (a surviving hold stays exclusive).
fn judge_exclusive_while_held(
    label: &str,
    keys: &[String],
    told: &[Told],
    taken: &[Option<Instant>],
) -> Vec<String> {
    let mut violations = Vec::new();
    for ((key, told), taken) in keys.iter().zip(told).zip(taken) {
        match (told.get(), taken) {
            (None, Some(_)) => violations.push(format!(
                "{label}: {key}: taken by the independent client while its holder was never told"
            )),
            (Some((at, _)), Some(t)) if t <= at => violations.push(format!(
                "{label}: {key}: taken {} before its holder was told",
                ms(diff(*t, *at))
            )),
            _ => {}
        }
    }
    violations
}

/// Ends a case: closes the proxy first (so any call stuck on its sockets
/// fails fast), releases the holds off-thread with a bounded wait, then
/// fails with every violation found.
fn finish(label: &str, proxy: Option<Proxy>, holds: Vec<Hold>, violations: Vec<String>) {
    drop(proxy);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for hold in holds {
            let _ = hold.release();
        }
        let _ = tx.send(());
    });
    if rx.recv_timeout(secs(15.0)).is_err() {
        println!("  {label}: holds still releasing 15 s after the case; left behind");
    }
    assert!(
        violations.is_empty(),
        "{label}: {} violation(s):\n{}",
        violations.len(),
        violations.join("\n")
    );
}

/// Runs `hold.release()` on a thread; the receiver gets (elapsed, result).
fn release_in_background(hold: Hold) -> mpsc::Receiver<(Duration, Result<(), Error>)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let start = Instant::now();
        let result = hold.release().map(|_| ());
        let _ = tx.send((start.elapsed(), result));
    });
    rx
}

/// Promise 2: the release returned within the adapter's I/O timeout + 1 s.
fn judge_release(
    label: &str,
    io_timeout: Duration,
    rx: &mpsc::Receiver<(Duration, Result<(), Error>)>,
    started: Instant,
) -> Vec<String> {
    let bound = io_timeout + secs(RELEASE_SLACK);
    // Wait at least to the bound; longer only to measure how late it is.
    let wait = (started + bound + secs(LATE_WAIT)).saturating_duration_since(Instant::now());
    match rx.recv_timeout(wait) {
        Ok((took, result)) => {
            println!(
                "  {label}: release() returned in {} ({result:?}); bound {}",
                ms(took.as_secs_f64()),
                ms(bound.as_secs_f64())
            );
            let mut v = Vec::new();
            if took > bound {
                v.push(format!(
                    "{label}: release() took {}, bound {}",
                    ms(took.as_secs_f64()),
                    ms(bound.as_secs_f64())
                ));
            }
            if let Err(e) = result {
                if !matches!(e, Error::Connection(_)) {
                    v.push(format!("{label}: release() failed with {e}"));
                }
            }
            v
        }
        Err(_) => {
            let blocked = started.elapsed().as_secs_f64();
            println!("  {label}: release() still blocked after {}", ms(blocked));
            vec![format!(
                "{label}: release() still blocked after {}, bound {}",
                ms(blocked),
                ms(bound.as_secs_f64())
            )]
        }
    }
}

/// When the database last renewed `key`, read by `witness`.
fn renewed_at(witness: &Locks, key: &str) -> Option<SystemTime> {
    witness
        .info(key)
        .ok()
        .flatten()
        .and_then(|i| i.holder.map(|h| h.renewed_at))
}

/// Waits until a renewal of `key` has just landed on the server (its
/// `renewed_at` moves), so a fault started right after it has the last
/// confirmable renewal at "now": the lease's latest expiry is then now +
/// ttl, which makes the "told before expiry" bound sharp.
fn wait_for_renewal(witness: &Locks, key: &str) {
    let start = Instant::now();
    let first = renewed_at(witness, key);
    assert!(first.is_some(), "{key}: no holder seen by the witness");
    while start.elapsed() < secs(3.0) {
        if renewed_at(witness, key) != first {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("no renewal of {key} seen within 3 s (harness: is the hold renewing?)");
}

// ---------------------------------------------------------------- sanity

/// The harness: a hold through the unfaulted proxy renews for several
/// ttls, the witness sees it held throughout, and the proxy leaves no
/// thread behind.
#[test]
fn harness_hold_through_the_proxy_renews() {
    let server = pg_server();
    let proxy = Proxy::start(server.port());
    let locks = pg_locks(&via(&proxy), IO_TIMEOUT);
    let witness = pg_locks(&server.url(), IO_TIMEOUT);
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
    let threads = mistri_locks_testkit::thread_count();
    drop(locks);
    drop(proxy);
    assert!(
        mistri_locks_testkit::thread_count() <= threads,
        "proxy left threads behind"
    );
}

// ---------------------------------------------------------------- 1 blackhole

fn blackhole_case(n: usize) {
    let label = format!("blackhole N={n}");
    println!(
        "{label}: ttl {TTL} s, heartbeat {HEARTBEAT} s, I/O timeout {IO_TIMEOUT} s, stop keys on"
    );
    let server = pg_server();
    let proxy = Proxy::start(server.port());
    let locks = pg_locks(&via(&proxy), IO_TIMEOUT);
    let witness = pg_locks(&server.url(), IO_TIMEOUT);

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
    let io = locks.adapter().io_timeout();
    violations.extend(judge_release(&label, io, &released, release_started));
    finish(&label, Some(proxy), holds, violations);
}

#[test]
fn blackhole_1_hold() {
    blackhole_case(1);
}

#[test]
fn blackhole_100_holds() {
    blackhole_case(100);
}

// ---------------------------------------------------------------- 2 SIGSTOP

#[test]
fn server_frozen_past_the_ttl() {
    let label = "frozen postgres";
    println!("{label}: SIGSTOP (postmaster and backends) for ttl + 1 s, then SIGCONT; ttl {TTL} s, heartbeat {HEARTBEAT} s");
    let mut server = pg_server();
    let locks = pg_locks(&server.url(), IO_TIMEOUT);
    let witness = pg_locks(&server.url(), IO_TIMEOUT);
    let ks = keys("frozen", 10);
    let holds = hold_all(&locks, &ks);
    let told: Vec<Told> = holds.iter().map(watch).collect();
    std::thread::sleep(secs(1.2));
    assert!(holds.iter().all(|h| !h.is_lost()), "lost before the fault");

    wait_for_renewal(&witness, &ks[0]);
    let frozen = Instant::now();
    server.freeze();
    std::thread::sleep(secs(TTL + 1.0));
    server.thaw();
    let thawed = Instant::now();

    let taken = take_when_free(&witness, &ks, thawed + secs(5.0));
    wait_told(&told, thawed + secs(LATE_WAIT));
    // The latest the server could expire a lease: freeze + ttl (no
    // renewal can have landed during the freeze).
    let expiry = vec![Some(frozen + secs(TTL)); ks.len()];
    let told_at: Vec<f64> = told
        .iter()
        .filter_map(|t| t.get().map(|(at, _)| diff(frozen, *at)))
        .collect();
    println!(
        "  {label}: holders told at freeze + {}; thawed at freeze + {}; taken at thaw + {}",
        stats(told_at),
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

// ---------------------------------------------------------------- 3 restart

/// Postgres shut down right after a renewal (fast shutdown: connections
/// closed) and back a ttl later with its data: the holder must have been
/// told before shutdown + ttl (when its lease expires on the database
/// clock), so before the independent client can take it; fences rise.
#[test]
fn server_restarted_after_downtime() {
    let label = "restart after downtime";
    println!("{label}: fast shutdown right after a renewal, down for a ttl, back with its data");
    let mut server = pg_server();
    let locks = pg_locks(&server.url(), IO_TIMEOUT);
    let witness = pg_locks(&server.url(), IO_TIMEOUT);
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
    let taken = take_when_free(&witness, &ks, back + secs(5.0));
    wait_told(&told, back + secs(LATE_WAIT));
    let told_at: Vec<f64> = told
        .iter()
        .filter_map(|t| t.get().map(|(at, _)| diff(down, *at)))
        .collect();
    println!(
        "  {label}: holders told at shutdown + {}; server back at shutdown + {}",
        stats(told_at),
        ms(diff(down, back))
    );
    let expiry = vec![Some(down + secs(TTL)); ks.len()];
    let mut violations =
        judge_told_before(label, &ks, &told, &expiry, "shutdown + ttl (latest expiry)");
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

fn judge_fences(label: &str, before: &[u64], after: &[u64]) -> Vec<String> {
    let highest = before.iter().copied().max().unwrap_or(0);
    println!(
        "  {label}: fences before {:?}..{:?}, after {:?}..{:?}",
        before.iter().min(),
        before.iter().max(),
        after.iter().min(),
        after.iter().max()
    );
    if after.is_empty() {
        return vec![format!("{label}: no fence after the fault")];
    }
    after
        .iter()
        .filter(|f| **f <= highest)
        .map(|f| format!("{label}: fence {f} after the fault is not above {highest}"))
        .collect()
}

/// A restart shorter than the safety margin, twice: a fast shutdown (the
/// server closes every connection) and a crash (SIGKILL of every server
/// process, WAL recovery). The rows survive, so a hold may survive too; what
/// is asserted: no key is taken by anyone while its holder was not told
/// (told first, or not taken at all), and fences keep rising.
#[test]
fn server_restarted_at_once_and_crashed() {
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
        let mut server = pg_server();
        let locks = pg_locks(&server.url(), IO_TIMEOUT);
        let witness = pg_locks(&server.url(), IO_TIMEOUT);
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
            stats(told.iter().filter_map(|t| t.get().map(|(at, _)| diff(fault, *at))).collect())
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

// ---------------------------------------------------------------- 4 SIGKILL

#[test]
fn holder_process_killed() {
    let label = "holder SIGKILLed";
    let dir = TempDir::new("mistri-pgfault-kill");
    let server = pg_server();
    let key = unique("killed");
    let mut child = spawn_role(
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
    let witness = pg_locks(&server.url(), IO_TIMEOUT);
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
    let taken = take_when_free(
        &witness,
        std::slice::from_ref(&key),
        killed + secs(TTL + 3.0),
    )[0];
    let Some(taken) = taken else {
        panic!("{label}: lease not free {} s after the kill", TTL + 3.0);
    };
    let free_after = diff(killed, taken);
    let since_renewal = diff(last_renewal, taken);
    let new_fence = witness.fence(&key).unwrap();
    println!(
        "  {label}: lease taken by another client at kill + {} (last renewal + {}; ttl {}); fence {fence} -> {new_fence}",
        ms(free_after),
        ms(since_renewal),
        ms(TTL)
    );
    // Free when the database clock passes the last renewal + ttl: not
    // before (the renewal landed at most the witness's poll gap and a
    // round trip before it was seen: 50 ms is generous), and not much
    // after (its poll interval and a round trip; 0.5 s is generous). The
    // kill came within a millisecond of the renewal seen, long before the
    // next one (every 0.5 s).
    assert!(
        since_renewal >= TTL - 0.05,
        "{label}: free only {} after the last renewal seen, ttl {}",
        ms(since_renewal),
        ms(TTL)
    );
    assert!(
        free_after <= TTL + 0.5,
        "{label}: free only after {}",
        ms(free_after)
    );
    assert!(new_fence > fence, "{label}: fence {fence} -> {new_fence}");
}

// ---------------------------------------------------------------- 5 PgBouncer

/// Through PgBouncer in transaction pooling mode, with the push listener
/// off (`listen=off`; LISTEN cannot work through a transaction pooler):
/// every operation works (each is one statement, no session state), and a
/// stop flag reaches a hold by the tick (at most a second), not by push.
#[test]
fn through_pgbouncer_in_transaction_mode() {
    let label = "pgbouncer";
    let server = pg_server();
    // A pool of 2 server connections for many clients: statements of
    // different clients interleave on the same server sessions.
    let bouncer = PgBouncer::start_with_pool(&server, 2);
    let url = format!("{}?listen=off", bouncer.url());
    let a = pg_locks(&url, IO_TIMEOUT);
    let b = pg_locks(&url, IO_TIMEOUT);
    let direct = pg_locks(&server.url(), IO_TIMEOUT);
    let key = unique("bouncer");

    // Acquire, exclusion, fence, renew, held, info, release.
    assert!(a.acquire(&key, secs(30.0)).unwrap());
    let f1 = a.fence(&key).expect("fence");
    assert!(!b.acquire(&key, secs(30.0)).unwrap(), "exclusive");
    assert!(
        !direct.acquire(&key, secs(30.0)).unwrap(),
        "exclusive for a direct client too"
    );
    assert!(a.renew(&key, secs(30.0)).unwrap());
    assert!(!b.renew(&key, secs(30.0)).unwrap(), "only the owner renews");
    assert!(b.held(&key).unwrap());
    let info = b.info(&key).unwrap().expect("info");
    assert_eq!(info.holder.as_ref().map(|h| h.fence), Some(f1));
    let listed = b.list(&key).unwrap();
    assert!(listed.leases.iter().any(|l| l.key == key), "{listed:?}");
    assert!(!b.release(&key).unwrap(), "only the owner releases");
    assert!(a.release(&key).unwrap());
    assert!(!a.held(&key).unwrap());
    assert!(b.acquire(&key, secs(30.0)).unwrap());
    let f2 = b.fence(&key).expect("fence");
    assert!(f2 > f1, "fences rise: {f1} -> {f2}");
    assert!(a.break_lease(&key).unwrap());
    assert!(!b.held(&key).unwrap());

    // Flags.
    let flag = unique("bouncer-flag");
    assert!(!a.flag(&flag).unwrap());
    a.set_flag(&flag, secs(30.0)).unwrap();
    assert!(b.flag(&flag).unwrap());
    b.clear_flag(&flag).unwrap();
    assert!(!a.flag(&flag).unwrap());

    // Many small operations from threads: pooled sessions are shared.
    std::thread::scope(|s| {
        for t in 0..4 {
            let (a, key) = (&a, format!("{key}-t{t}"));
            s.spawn(move || {
                for _ in 0..25 {
                    assert!(a.acquire(&key, secs(30.0)).unwrap());
                    assert!(a.release(&key).unwrap());
                }
            });
        }
    });

    // A hold with a stop flag: told by the tick.
    let hold_key = unique("bouncer-hold");
    let stop_key = format!("stop-{hold_key}");
    let hold = a
        .hold(
            &hold_key,
            HoldOptions {
                stop_key: Some(stop_key.clone()),
                ..opts(TTL, HEARTBEAT)
            },
        )
        .unwrap()
        .expect("free");
    let told = watch(&hold);
    // A few renewals; the raise then lands mid-tick (not on a multiple of
    // the 0.5 s tick from the hold's start).
    std::thread::sleep(secs(3.0 * TTL / 2.0 + 0.2));
    // Nothing LISTENs: no session anywhere on the server ran LISTEN.
    let listening = server.sql(
        "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'listen%' AND pid <> pg_backend_pid()",
    );
    assert_eq!(
        listening, "0",
        "{label}: a session LISTENs through listen=off"
    );
    assert!(
        !hold.is_lost(),
        "{label}: renewals through the bouncer fail: {:?}",
        hold.signal().reason()
    );
    assert!(
        !b.acquire(&hold_key, secs(30.0)).unwrap(),
        "renewed through the bouncer"
    );
    let raised = Instant::now();
    b.set_flag(&stop_key, secs(30.0)).unwrap();
    let tick = HEARTBEAT.min(1.0);
    assert!(
        hold.signal().wait(Some(secs(tick + 2.0))),
        "{label}: stop flag not seen within the tick + 2 s"
    );
    let woke = Instant::now();
    // Callbacks run on the notifier thread, just after the waiters wake.
    wait_told(std::slice::from_ref(&told), woke + secs(2.0));
    let reason = hold.signal().reason().unwrap_or_default();
    let latency = diff(raised, woke);
    println!(
        "  {label}: stop flag -> signal {} (tick {}): {reason}; on_abort ran: {}",
        ms(latency),
        ms(tick),
        told.get().is_some()
    );
    assert!(told.get().is_some(), "{label}: on_abort never ran");
    assert!(reason.starts_with("stop flag"), "{reason}");
    assert!(latency <= tick + 1.0, "{label}: took {}", ms(latency));
    assert_eq!(hold.release().unwrap(), ReleaseOutcome::Released);
    assert!(
        b.acquire(&hold_key, secs(30.0)).unwrap(),
        "free after release"
    );
}

// ---------------------------------------------------------------- 6 soak

const SOAK_PROCESSES: usize = 4;
const SOAK_THREADS: usize = 2;
const SOAK_KEYS: usize = 3;
const SOAK_TTL: f64 = 1.0;
const SOAK_HEARTBEAT: f64 = 0.25;
const SOAK_IO_TIMEOUT: f64 = 0.5;
/// A fault slot of the schedule.
const SLOT: f64 = 1.5;

/// The soak's length: 8 s unless `MISTRI_SOAK_SECS` says otherwise.
fn soak_secs() -> f64 {
    std::env::var("MISTRI_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8.0)
}

#[derive(Debug, Clone)]
struct Interval {
    key: String,
    fence: u64,
    start: u64,
    end: u64,
    how: String,
    process: usize,
}

#[test]
fn mutual_exclusion_soak_under_faults() {
    let label = "soak";
    let soak = soak_secs();
    println!(
        "{label}: {SOAK_PROCESSES} processes x {SOAK_THREADS} threads, {SOAK_KEYS} keys, {soak} s, ttl {SOAK_TTL} s, heartbeat {SOAK_HEARTBEAT} s, I/O timeout {SOAK_IO_TIMEOUT} s"
    );
    let dir = TempDir::new("mistri-pgfault-soak");
    let mut server = pg_server();
    // The schema exists before the children race to create it (pg_server
    // made it; this keeps the first slot about faults, not DDL).
    let prefix = unique("soak");
    let proxies: Vec<Proxy> = (0..SOAK_PROCESSES)
        .map(|_| Proxy::start(server.port()))
        .collect();
    let mut children: Vec<Child> = proxies
        .iter()
        .enumerate()
        .map(|(i, p)| {
            spawn_role(
                "soak",
                &dir.0,
                &[
                    ("URL", via(p)),
                    ("KEY", prefix.clone()),
                    ("INDEX", i.to_string()),
                    ("SECS", soak.to_string()),
                ],
            )
        })
        .collect();

    // The schedule, deterministic, slot by slot (1.5 s each: a silence
    // of a slot outlives a lease, ttl 1 s): in every slot each process is,
    // at random, cut off (blackhole, 40%), slowed (0.3-1.2 s each way,
    // 20%) or healthy; the healthy ones are ready to take whatever lease a
    // faulted one loses. In the third slot the server is frozen for 1.2 s
    // and in the fourth restarted (fast shutdown), then every fifth slot
    // alternately.
    let mut rng = Lcg(0x5eed_f00d);
    let start = Instant::now();
    let mut counts = [0usize; 4]; // blackhole, delay, freeze, restart
    let mut slot = 0;
    while start.elapsed() < secs(soak) {
        let slot_end = Instant::now() + secs(SLOT);
        for p in &proxies {
            p.blackhole(false);
            p.delay(Duration::ZERO);
            match rng.next() % 10 {
                0..=3 => {
                    p.blackhole(true);
                    counts[0] += 1;
                }
                4..=5 => {
                    p.delay(Duration::from_millis(300 + rng.next() % 900));
                    counts[1] += 1;
                }
                _ => {}
            }
        }
        match slot {
            2 => {
                counts[2] += 1;
                server.freeze();
                std::thread::sleep(secs(1.2));
                server.thaw();
            }
            3 => {
                counts[3] += 1;
                server.restart();
            }
            n if n > 3 && n % 5 == 2 => {
                counts[2] += 1;
                server.freeze();
                std::thread::sleep(secs(1.2));
                server.thaw();
            }
            n if n > 3 && n % 5 == 3 => {
                counts[3] += 1;
                server.restart();
            }
            _ => {}
        }
        slot += 1;
        std::thread::sleep(slot_end.saturating_duration_since(Instant::now()));
    }
    for p in &proxies {
        p.blackhole(false);
        p.delay(Duration::ZERO);
    }
    // Children stop by themselves at the soak's end; a child stuck (say,
    // in a release) is killed 8 s later.
    let mut killed = 0;
    let give_up = Instant::now() + secs(8.0);
    for c in &mut children {
        loop {
            if c.try_wait().unwrap().is_some() {
                break;
            }
            if Instant::now() >= give_up {
                let _ = c.kill();
                let _ = c.wait();
                killed += 1;
                break;
            }
            std::thread::sleep(secs(0.02));
        }
    }
    drop(proxies);

    let mut records = Vec::new();
    for i in 0..SOAK_PROCESSES {
        let text = std::fs::read_to_string(dir.0.join(format!("records-{i}"))).unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() != 5 {
                continue; // a line cut by a kill
            }
            records.push(Interval {
                key: f[0].into(),
                fence: f[1].parse().unwrap(),
                start: f[2].parse().unwrap(),
                end: f[3].parse().unwrap(),
                how: f[4].into(),
                process: i,
            });
        }
    }
    let told = records.iter().filter(|r| r.how == "told").count();
    let per_process: Vec<usize> = (0..SOAK_PROCESSES)
        .map(|i| records.iter().filter(|r| r.process == i).count())
        .collect();

    // The witness: per key, sorted by start, no interval may begin before
    // an earlier one ended, and fences rise with start.
    let mut overlaps = Vec::new();
    let mut inversions = Vec::new();
    for k in 0..SOAK_KEYS {
        let key = format!("{prefix}-{k}");
        let mut mine: Vec<&Interval> = records.iter().filter(|r| r.key == key).collect();
        mine.sort_by_key(|r| r.start);
        for pair in mine.windows(2) {
            if pair[1].fence <= pair[0].fence {
                inversions.push(format!(
                    "{key}: fence {} (start {}) then fence {} (start {})",
                    pair[0].fence, pair[0].start, pair[1].fence, pair[1].start
                ));
            }
        }
        let mut latest: Option<&Interval> = None;
        for r in mine {
            if let Some(l) = latest {
                if l.end > r.start {
                    overlaps.push(format!(
                        "{key}: fence {} (process {}, ended by {}) still inside {} ms when fence {} (process {}) started",
                        l.fence,
                        l.process,
                        l.how,
                        (l.end - r.start) as f64 / 1e6,
                        r.fence,
                        r.process
                    ));
                }
            }
            match latest {
                Some(l) if r.end <= l.end => {}
                _ => latest = Some(r),
            }
        }
    }
    println!(
        "  {label}: {} holds recorded ({told} ended by being told, {} by release); per process {per_process:?}; {slot} fault slots of {SLOT} s: {} process-slots blackholed, {} delayed, {} server freezes, {} server restarts; children killed while stuck: {killed}",
        records.len(),
        records.len() - told,
        counts[0],
        counts[1],
        counts[2],
        counts[3]
    );
    println!(
        "  {label}: overlaps: {}; fence inversions: {}",
        overlaps.len(),
        inversions.len()
    );
    for o in overlaps.iter().take(5) {
        println!("    overlap: {o}");
    }
    assert!(
        records.len() >= 10,
        "{label}: too little contention to judge: {}",
        records.len()
    );
    assert!(
        overlaps.is_empty() && inversions.is_empty(),
        "{label}: {} overlaps, {} fence inversions:\n{}\n{}",
        overlaps.len(),
        inversions.len(),
        overlaps.join("\n"),
        inversions.join("\n")
    );
}

fn soak_child(dir: &Path) {
    let url = std::env::var("MISTRI_PGFAULT_URL").unwrap();
    let prefix = std::env::var("MISTRI_PGFAULT_KEY").unwrap();
    let index: usize = std::env::var("MISTRI_PGFAULT_INDEX")
        .unwrap()
        .parse()
        .unwrap();
    let soak: f64 = std::env::var("MISTRI_PGFAULT_SECS")
        .unwrap()
        .parse()
        .unwrap();
    let locks = pg_locks(&url, SOAK_IO_TIMEOUT);
    let out = Arc::new(
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(dir.join(format!("records-{index}")))
            .unwrap(),
    );
    let stop_at = Instant::now() + secs(soak);
    let threads: Vec<_> = (0..SOAK_THREADS)
        .map(|t| {
            let locks = locks.clone();
            let out = out.clone();
            let prefix = prefix.clone();
            std::thread::spawn(move || {
                let mut rng = Lcg(0xabcd + (index * 16 + t) as u64);
                let (mut won, mut refused, mut failed) = (0, 0, 0);
                let mut releasing = Duration::ZERO;
                while Instant::now() < stop_at {
                    let key = format!("{prefix}-{}", rng.next() % SOAK_KEYS as u64);
                    let hold = match locks.hold(&key, opts(SOAK_TTL, SOAK_HEARTBEAT)) {
                        Ok(Some(h)) => h,
                        Ok(None) => {
                            refused += 1;
                            std::thread::sleep(Duration::from_millis(2 + rng.next() % 4));
                            continue;
                        }
                        Err(_) => {
                            failed += 1;
                            std::thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                    };
                    let start = monotonic_ns();
                    let told_ns = Arc::new(OnceLock::new());
                    {
                        let cell = told_ns.clone();
                        hold.signal().on_abort(move |_| {
                            let _ = cell.set(monotonic_ns());
                        });
                    }
                    // Half the holds work briefly; half outlive the ttl.
                    let work = if rng.next() % 10 < 5 {
                        1200 + rng.next() % 1300
                    } else {
                        20 + rng.next() % 200
                    };
                    hold.signal().wait(Some(Duration::from_millis(work)));
                    let now = monotonic_ns();
                    let (end, how) = match told_ns.get() {
                        Some(&t) if t <= now => (t, "told"),
                        _ => (now, "released"),
                    };
                    // The record first: a release that hangs must not hide it.
                    let line = format!("{key} {} {start} {end} {how}\n", hold.fence());
                    (&*out).write_all(line.as_bytes()).unwrap();
                    won += 1;
                    let released = Instant::now();
                    let _ = hold.release();
                    releasing += released.elapsed();
                }
                eprintln!(
                    "    soak process {index} thread {t}: {won} holds, {refused} refused, {failed} errors, {:.1} s inside release()",
                    releasing.as_secs_f64()
                );
            })
        })
        .collect();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for t in threads {
            let _ = t.join();
        }
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout((stop_at + secs(5.0)).saturating_duration_since(Instant::now()));
    // SAFETY: _exit takes no pointers; skipping destructors here is the
    // point (a stuck release must not keep the child alive), and every
    // record was written with its own write call already.
    unsafe { libc::_exit(0) };
}

// ---------------------------------------------------------------- children

/// The child processes' entry point.
#[test]
fn child() {
    let Ok(role) = std::env::var("MISTRI_PGFAULT_ROLE") else {
        return;
    };
    let dir = PathBuf::from(std::env::var("MISTRI_PGFAULT_DIR").unwrap());
    match role.as_str() {
        "hold" => {
            let url = std::env::var("MISTRI_PGFAULT_URL").unwrap();
            let key = std::env::var("MISTRI_PGFAULT_KEY").unwrap();
            let locks = pg_locks(&url, IO_TIMEOUT);
            let hold = locks
                .hold(&key, opts(TTL, HEARTBEAT))
                .unwrap()
                .expect("free");
            std::fs::write(dir.join("ready.tmp"), hold.fence().to_string()).unwrap();
            std::fs::rename(dir.join("ready.tmp"), dir.join("ready")).unwrap();
            std::thread::sleep(secs(60.0));
        }
        "soak" => soak_child(&dir),
        other => panic!("unknown role {other}"),
    }
}

fn spawn_role(role: &str, dir: &Path, env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env("MISTRI_PGFAULT_ROLE", role)
        .env("MISTRI_PGFAULT_DIR", dir)
        .stdout(Stdio::null());
    for (k, v) in env {
        cmd.env(format!("MISTRI_PGFAULT_{k}"), v);
    }
    cmd.spawn().unwrap()
}

fn wait_for(path: &Path, limit: Duration, child: &mut Child) {
    let start = Instant::now();
    while !path.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("child exited before {}: {status}", path.display());
        }
        assert!(start.elapsed() < limit, "{} never appeared", path.display());
        std::thread::sleep(secs(0.005));
    }
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(unique(name));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// CLOCK_MONOTONIC in ns: one clock for every process on the host.
fn monotonic_ns() -> u64 {
    u64::try_from(mono_ns()).expect("monotonic clock is positive")
}

/// A small deterministic generator for the fault schedule and the work.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}
