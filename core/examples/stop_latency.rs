//! Cross-process stop → signal latency, and lease-loss latency, on Redis,
//! Local and Postgres (`--postgres URL`: by LISTEN/NOTIFY on a direct
//! connection). A benchmark (run by `scripts/bench`), not a test.
//!
//! ```sh
//! cargo run --release -p mistri_locks_core --example stop_latency -- \
//!     --redis redis://127.0.0.1:6379/0 --local /tmp/x/locks.db [--trials 200] [--loss-trials 10]
//! ```
//!
//! This process is the stopper; it re-executes itself as the holder (one
//! child per backend, `--holder redis|local TARGET`). Per trial the holder
//! makes a hold (ttl 30 s, heartbeat 1 s: the tick is 1 s) watching a fresh
//! stop key and says "ready"; the stopper waits 0–3 ms (so raises don't line
//! up with anything), reads `CLOCK_MONOTONIC` and raises the flag with
//! `set_flag`; the holder's thread blocked in `signal.wait` reads the clock
//! when it wakes and reports it. Latency = woken − raised: the raise's own
//! round trip, the push, the wake-up. Five warm-up trials are not counted.
//!
//! Lease loss: the holder holds with heartbeat 1 s; 0–1 s later the stopper
//! deletes the lease behind it (`break_lease`), and the holder reports when
//! its signal tripped with `lease lost:`. Bounded by the renewal interval
//! (1 s): there is no push for that.
//!
//! Prints `key=value` lines (milliseconds) for `scripts/bench`.

use mistri_locks::{HoldOptions, Locks, Postgres};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

fn mono_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

fn open(kind: &str, target: &str) -> Locks {
    match kind {
        "redis" => Locks::redis(target, "mistri:bench").unwrap(),
        "local" => Locks::local(Some(std::path::Path::new(target))).unwrap(),
        "postgres" => Locks::new(Postgres::open(target, "mistri:bench").unwrap()),
        other => panic!("unknown backend {other}"),
    }
}

/// The holder: reads commands from stdin, answers on stdout.
/// `stop N` / `loss N`: hold job-N, say `ready`, then the wake-up time.
fn holder(kind: &str, target: &str) {
    let locks = open(kind, target);
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line.unwrap();
        let mut parts = line.split_whitespace();
        let (Some(what), Some(n)) = (parts.next(), parts.next()) else {
            continue;
        };
        let opts = HoldOptions {
            ttl: Duration::from_secs(30),
            heartbeat: Duration::from_secs(1),
            stop_key: Some(format!("stop-{n}-{}", std::process::id())),
            ..HoldOptions::default()
        };
        let key = format!("job-{n}-{}", std::process::id());
        let hold = locks.hold(&key, opts.clone()).unwrap().expect("free");
        writeln!(out, "ready {} {}", opts.stop_key.unwrap(), key).unwrap();
        out.flush().unwrap();
        let woke = hold.signal().wait(Some(Duration::from_secs(10)));
        let at = mono_ns();
        let reason = hold.signal().reason().unwrap_or_default();
        let ok = woke
            && match what {
                "stop" => reason.starts_with("stop flag"),
                _ => reason.starts_with("lease lost"),
            };
        writeln!(out, "{} {at}", if ok { "woke" } else { "failed" }).unwrap();
        out.flush().unwrap();
        let _ = hold.release();
        let _ = locks.clear_flag(&format!("stop-{n}-{}", std::process::id()));
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Runs `trials` trials of `what` against a fresh holder process.
fn measure(kind: &str, target: &str, what: &str, trials: usize, warmup: usize) -> Vec<f64> {
    let locks = open(kind, target);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--holder", kind, target])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = child.stdin.take().unwrap();
    let mut from = BufReader::new(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    let mut rng = std::process::id() as u64;
    for n in 0..trials + warmup {
        writeln!(to, "{what} {n}").unwrap();
        to.flush().unwrap();
        let mut line = String::new();
        from.read_line(&mut line).unwrap();
        let mut parts = line.split_whitespace().skip(1);
        let (stop, key) = (parts.next().unwrap(), parts.next().unwrap());
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // Stops: 0-3 ms after ready. Losses: anywhere in the 1 s renewal
        // cycle, so the figure is not always a whole interval.
        let spread = if what == "stop" { 3_000 } else { 1_000_000 };
        std::thread::sleep(Duration::from_micros((rng >> 33) % spread));
        let raised = mono_ns();
        match what {
            "stop" => locks.set_flag(stop, Duration::from_secs(60)).unwrap(),
            _ => {
                locks.break_lease(key).unwrap();
            }
        }
        line.clear();
        from.read_line(&mut line).unwrap();
        let mut parts = line.split_whitespace();
        assert_eq!(parts.next(), Some("woke"), "trial {n}: {line}");
        let woke: i64 = parts.next().unwrap().parse().unwrap();
        if n >= warmup {
            seen.push((woke - raised) as f64 / 1e6);
        }
    }
    drop(to);
    let _ = child.wait();
    seen.sort_by(f64::total_cmp);
    seen
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--holder") {
        return holder(&args[1], &args[2]);
    }
    let mut trials = 200;
    let mut loss_trials = 10;
    let mut backends = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--redis" => backends.push(("redis", it.next().unwrap().clone())),
            "--local" => backends.push(("local", it.next().unwrap().clone())),
            "--postgres" => backends.push(("postgres", it.next().unwrap().clone())),
            "--trials" => trials = it.next().unwrap().parse().unwrap(),
            "--loss-trials" => loss_trials = it.next().unwrap().parse().unwrap(),
            other => panic!("unknown argument {other}"),
        }
    }
    for (kind, target) in &backends {
        let stop = measure(kind, target, "stop", trials, 5);
        println!("{kind}_stop_trials={}", stop.len());
        println!("{kind}_stop_p50_ms={:.3}", percentile(&stop, 0.5));
        println!("{kind}_stop_p99_ms={:.3}", percentile(&stop, 0.99));
        println!("{kind}_stop_max_ms={:.3}", stop[stop.len() - 1]);
        if loss_trials > 0 {
            let loss = measure(kind, target, "loss", loss_trials, 0);
            println!("{kind}_loss_trials={}", loss.len());
            println!("{kind}_loss_p50_ms={:.3}", percentile(&loss, 0.5));
            println!("{kind}_loss_max_ms={:.3}", loss[loss.len() - 1]);
        }
    }
}
