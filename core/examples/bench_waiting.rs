//! Waiting acquire on Redis: N waiters on one key. A benchmark (run by
//! `scripts/bench`), not a test.
//!
//! ```sh
//! cargo run --release -p mistri_locks_core --example bench_waiting -- \
//!     --redis redis://127.0.0.1:6379/0 [--waiters 100] [--handoffs 1000] \
//!     [--idle-seconds 3] [--hold-ms 1] [--baseline PYTHON]
//! ```
//!
//! Two phases, each measured with the server's `INFO commandstats` (every
//! command but `INFO` itself):
//! 1. *Idle*: the key is held by someone else for `--idle-seconds` while
//!    the N waiters (threads of this process, `acquire_with(wait=60 s)`)
//!    wait: Redis commands per second.
//! 2. *Hand-offs*: the N waiters take the key in turn `--handoffs` times,
//!    each holding it `--hold-ms` and releasing it, then waiting again:
//!    latency from the start of each release to the moment the next holder
//!    has the lease (p50, p99), and commands per second.
//!
//! `--baseline PYTHON`: runs `scripts/waiting_redis_py.py` with that
//! interpreter (which needs redis-py) against the same server right after:
//! redis-py's `Lock(blocking=True)`, which retries `SET NX PX` every 0.1 s
//! per waiter, in the same two phases. Output: `key=value` lines
//! (`wait_*` ours, `pywait_*` the baseline).

use mistri_locks::{AcquireOptions, Locks};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `CLOCK_MONOTONIC` in ns.
fn mono_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Calls so far of every command but `INFO` (commands run inside scripts
/// included), and of scripts (`EVALSHA`, `EVAL`).
fn commands(con: &mut redis::Connection) -> (f64, f64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("INFO");
    let calls =
        |l: &str| -> Option<f64> { l.split("calls=").nth(1)?.split(',').next()?.parse().ok() };
    let mut all = 0.0;
    let mut scripts = 0.0;
    for l in info.lines().filter(|l| l.starts_with("cmdstat_")) {
        let n = calls(l).unwrap_or(0.0);
        if !l.starts_with("cmdstat_info:") {
            all += n;
        }
        if l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:") {
            scripts += n;
        }
    }
    (all, scripts)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let url = arg("--redis").expect("--redis URL");
    let waiters: usize = arg("--waiters").map_or(100, |v| v.parse().unwrap());
    let handoffs: u64 = arg("--handoffs").map_or(1000, |v| v.parse().unwrap());
    let idle: f64 = arg("--idle-seconds").map_or(3.0, |v| v.parse().unwrap());
    let hold_ms: f64 = arg("--hold-ms").map_or(1.0, |v| v.parse().unwrap());
    let baseline = arg("--baseline");

    let client = redis::Client::open(url.as_str()).expect("url");
    let mut con = client.get_connection().expect("connect");
    let namespace = format!("bench-wait-{}", std::process::id());
    let locks = Locks::redis(&url, &namespace).expect("redis");
    let key = "the-key";
    let ttl = Duration::from_secs(30);

    // Phase 1: idle waiting while someone else holds the key.
    assert!(locks.acquire(key, ttl).expect("acquire"));
    let handed = Arc::new(AtomicU64::new(0));
    let released_at = Arc::new(AtomicI64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(handoffs as usize)));
    let go = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..waiters)
        .map(|_| {
            let (owner, handed, released_at, latencies, go) = (
                locks.new_owner(),
                handed.clone(),
                released_at.clone(),
                latencies.clone(),
                go.clone(),
            );
            std::thread::spawn(move || {
                let opts = AcquireOptions {
                    wait: Some(Duration::from_secs(60)),
                    ..AcquireOptions::default()
                };
                loop {
                    if handed.load(Ordering::SeqCst) >= handoffs {
                        return;
                    }
                    if !owner.acquire_with(key, ttl, &opts).expect("wait") {
                        continue;
                    }
                    let got = mono_ns();
                    let from = released_at.load(Ordering::SeqCst);
                    if !go.load(Ordering::SeqCst) || from == 0 {
                        continue; // not measuring yet (never: the key is held)
                    }
                    let n = handed.fetch_add(1, Ordering::SeqCst) + 1;
                    if n > handoffs {
                        // Done: the rest drain through without counting.
                        owner.release(key).expect("release");
                        return;
                    }
                    latencies.lock().unwrap().push((got - from) as f64 / 1e6);
                    std::thread::sleep(Duration::from_secs_f64(hold_ms / 1000.0));
                    released_at.store(mono_ns(), Ordering::SeqCst);
                    owner.release(key).expect("release");
                }
            })
        })
        .collect();
    // Let every waiter reach its place in line.
    std::thread::sleep(Duration::from_millis(500));
    let (before, _) = commands(&mut con);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(idle));
    let idle_rate = (commands(&mut con).0 - before) / t0.elapsed().as_secs_f64();

    // Phase 2: hand-offs.
    let (before, scripts_before) = commands(&mut con);
    let t0 = Instant::now();
    go.store(true, Ordering::SeqCst);
    released_at.store(mono_ns(), Ordering::SeqCst);
    assert!(locks.release(key).expect("release"));
    while handed.load(Ordering::SeqCst) < handoffs {
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = t0.elapsed().as_secs_f64();
    let (after, scripts_after) = commands(&mut con);
    let handoff_rate = (after - before) / took;
    // Scripts are acquire tries and releases (one per hand-off).
    let tries = scripts_after - scripts_before - handoffs as f64;
    for t in threads {
        t.join().expect("waiter");
    }
    let mut lat = latencies.lock().unwrap().clone();
    lat.sort_by(f64::total_cmp);
    println!("wait_waiters={waiters}");
    println!("wait_handoffs={}", lat.len());
    println!("wait_idle_cmds_per_s={idle_rate:.1}");
    println!("wait_handoff_cmds_per_s={handoff_rate:.1}");
    println!(
        "wait_cmds_per_handoff={:.2}",
        handoff_rate * took / lat.len().max(1) as f64
    );
    println!("wait_tries_per_handoff={:.2}", tries / handoffs as f64);
    println!("wait_p50_ms={:.3}", percentile(&lat, 0.5));
    println!("wait_p99_ms={:.3}", percentile(&lat, 0.99));
    println!("wait_handoffs_per_s={:.1}", lat.len() as f64 / took);

    if let Some(python) = baseline {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/waiting_redis_py.py"
        );
        let port = client.get_connection_info().addr().to_string();
        let port = port.rsplit(':').next().unwrap_or("6379").to_owned();
        let out = std::process::Command::new(python)
            .args([
                script,
                "--port",
                &port,
                "--waiters",
                &waiters.to_string(),
                "--handoffs",
                &handoffs.to_string(),
                "--idle-seconds",
                &idle.to_string(),
                "--hold-ms",
                &hold_ms.to_string(),
            ])
            .output()
            .expect("run the redis-py baseline");
        if out.status.success() {
            print!("{}", String::from_utf8_lossy(&out.stdout));
        } else {
            eprintln!("{}", String::from_utf8_lossy(&out.stderr));
            println!("pywait_error=1");
        }
    }
}
