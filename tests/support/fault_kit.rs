//! The fault suites' kit: what every backend's fault suite shares, so a
//! suite (`core/tests/network_faults.rs` for Redis,
//! `core/tests/postgres_faults.rs` for PostgreSQL) is a list of cases: the
//! judges of the promises (told first, exclusive while held, release
//! bounded, fences rising), the independent witness that takes a key the
//! moment it is free, the figures they print, the one-at-a-time guard, and
//! (in [`cases`], `tests/support/fault_cases.rs`) one generic body per case
//! and the `fault_suite!` macro that lists them for a backend.
//!
//! Included by path (`#[path = "../../tests/support/fault_kit.rs"] mod
//! fault_kit;`) rather than part of the testkit crate: its judges take the
//! core's `Hold` and `Locks`, and the testkit depending on the core would
//! build the core twice for the core's own unit tests (which use the
//! testkit's servers). The servers a case faults are the testkit's, behind
//! its `FaultServer` trait (start, stop, freeze, thaw, restart, proxy),
//! which `RedisServer` and `PgServer` implement; a suite adds how a client
//! reaches its server ([`cases::FaultBackend`]) and lists its cases.
//!
//! # One case at a time
//!
//! A case measures how late a holder is told against a ttl of one or two
//! seconds, and faults a server it started for itself; two cases on two
//! cores would measure each other. Every case takes [`one_at_a_time`]
//! first (`fault_suite!` takes it for each case it lists; a suite's own
//! case takes it itself), so `cargo test --workspace` (which runs a file's
//! tests on as many threads as there are cores) runs them one after
//! another, as the headers' `--test-threads=1` does.

#![allow(dead_code)] // each suite uses its own subset

use mistri_locks::{Error, Hold, HoldOptions, Locks};
use mistri_locks_testkit::Proxy;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::common::{opts, secs};
use mistri_locks_testkit::unique;

#[path = "fault_cases.rs"]
pub mod cases;

/// Held by each case for its whole run (module header).
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Lease ttl, heartbeat and I/O timeout of the single-process cases.
pub const TTL: f64 = 2.0;

pub const HEARTBEAT: f64 = 0.5;

pub const IO_TIMEOUT: f64 = 1.0;

/// `release()` must return within the adapter's timeout plus this.
pub const RELEASE_SLACK: f64 = 1.0;

/// How long past the moment it is due a case waits for a late "told", to
/// measure how late it was (a bounded wait: the figure is then "> this").
pub const LATE_WAIT: f64 = 5.0;

/// When a hold's signal tripped, and why (set by an `on_abort` callback).
pub type Told = Arc<OnceLock<(Instant, String)>>;

pub fn watch(hold: &Hold) -> Told {
    let told: Told = Arc::default();
    let cell = told.clone();
    hold.signal().on_abort(move |reason| {
        let _ = cell.set((Instant::now(), reason.unwrap_or("").to_owned()));
    });
    told
}

/// A hold of the cases: ttl, heartbeat, and a stop key of its own.
pub fn hold_opts(key: &str) -> HoldOptions {
    HoldOptions {
        stop_key: Some(format!("stop-{key}")),
        ..opts(TTL, HEARTBEAT)
    }
}

/// A hold on each of `keys` (all free).
pub fn hold_all(locks: &Locks, keys: &[String]) -> Vec<Hold> {
    keys.iter()
        .map(|k| locks.hold(k, hold_opts(k)).unwrap().expect("free key"))
        .collect()
}

/// How long the lease on `key` has left on the server's clock, read by
/// `witness` (straight to the server); `None` if there is none or the read
/// failed.
pub fn time_left(witness: &Locks, key: &str) -> Option<Duration> {
    witness.info(key).ok().flatten().and_then(|i| i.time_left)
}

/// Waits until a renewal of `key` has just landed on the server (the time
/// left on its lease, read straight from the server, jumps back up), so a
/// fault started right after it has the last confirmable renewal at "now":
/// the lease's latest server expiry is then now + ttl, which makes the
/// "told before expiry" bound sharp instead of depending on where in the
/// renewal cycle the fault happened to start.
pub fn wait_for_renewal(witness: &Locks, key: &str) {
    let start = Instant::now();
    let mut prev = time_left(witness, key);
    assert!(prev.is_some(), "{key}: no lease seen by the witness");
    while start.elapsed() < secs(3.0) {
        let now = time_left(witness, key);
        if let (Some(now), Some(prev)) = (now, prev) {
            if now > prev + Duration::from_millis(100) {
                return;
            }
        }
        prev = now.or(prev);
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("no renewal of {key} seen within 3 s (harness: is the hold renewing?)");
}

pub fn keys(prefix: &str, n: usize) -> Vec<String> {
    let base = unique(prefix);
    (0..n).map(|i| format!("{base}-{i}")).collect()
}

/// Every 50th index plus the last (all of them for small `n`).
pub fn sample(n: usize) -> Vec<usize> {
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
pub fn take_when_free(witness: &Locks, keys: &[String], until: Instant) -> Vec<Option<Instant>> {
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
pub fn wait_told(told: &[Told], until: Instant) {
    while Instant::now() < until && told.iter().any(|t| t.get().is_none()) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub fn ms(d: f64) -> String {
    format!("{:.0} ms", d * 1000.0)
}

/// Signed seconds `b - a`.
pub fn diff(a: Instant, b: Instant) -> f64 {
    if b >= a {
        (b - a).as_secs_f64()
    } else {
        -(a - b).as_secs_f64()
    }
}

pub fn stats(mut v: Vec<f64>) -> String {
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
pub fn judge_told_before(
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

/// Ends a case: closes the proxy first (so any call stuck on its sockets
/// fails fast), releases the holds off-thread with a bounded wait, then
/// fails with every violation found.
pub fn finish(label: &str, proxy: Option<Proxy>, holds: Vec<Hold>, violations: Vec<String>) {
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
pub fn release_in_background(hold: Hold) -> mpsc::Receiver<(Duration, Result<(), Error>)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let start = Instant::now();
        let result = hold.release().map(|_| ());
        let _ = tx.send((start.elapsed(), result));
    });
    rx
}

pub fn wait_for(path: &Path, limit: Duration, child: &mut Child) {
    let start = Instant::now();
    while !path.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("child exited before {}: {status}", path.display());
        }
        assert!(start.elapsed() < limit, "{} never appeared", path.display());
        std::thread::sleep(secs(0.005));
    }
}

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
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

/// For keys whose holder was NOT told: the independent client must not
/// have got the lease either (a surviving hold stays exclusive).
pub fn judge_exclusive_while_held(
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

/// Fences keep rising: every fence after the fault is above every fence
/// before it. Prints both ranges; returns the violations.
pub fn judge_fences(label: &str, before: &[u64], after: &[u64]) -> Vec<String> {
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

/// Promise 2: the release returned within the adapter's I/O timeout + 1 s.
pub fn judge_release(
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

/// Re-executes this test binary as a child running `role` (its `child`
/// test reads `{prefix}_ROLE`, `{prefix}_DIR` and `{prefix}_<name>` for
/// each of `env`).
pub fn spawn_role(prefix: &str, role: &str, dir: &Path, env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env(format!("{prefix}_ROLE"), role)
        .env(format!("{prefix}_DIR"), dir)
        .stdout(Stdio::null());
    for (k, v) in env {
        cmd.env(format!("{prefix}_{k}"), v);
    }
    cmd.spawn().unwrap()
}
