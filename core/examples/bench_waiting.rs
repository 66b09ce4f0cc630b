//! Waiting acquire on Redis: N waiters on one key. A benchmark (run by
//! `scripts/bench`), not a test.
//!
//! ```sh
//! cargo run --release -p mistri_locks_core --example bench_waiting -- \
//!     --redis redis://127.0.0.1:6379/0 [--waiters 100] [--handoffs 1000] \
//!     [--idle-seconds 3] [--hold-ms 1] [--procs 4] [--baseline PYTHON]
//!     [--one-each "20 100"]
//! ```
//!
//! Two phases, each measured with the server's `INFO commandstats` (every
//! command but `INFO`, including those that scripts run):
//! 1. *Idle*: the key is held by someone else for `--idle-seconds` while
//!    the N waiters (`acquire_with(wait=60 s)`) wait: Redis commands per
//!    second.
//! 2. *Hand-offs*: the N waiters take the key in turn `--handoffs` times,
//!    each holding it `--hold-ms` and releasing it, then waiting again:
//!    latency from the start of each release to the moment the next holder
//!    has the lease (p50, p99; `CLOCK_MONOTONIC`, one clock for every
//!    process), acquire tries per hand-off (scripts run, minus the
//!    releases) and commands per second. A holder counts its turn with an
//!    `INCR` (not counted in the figures).
//!
//! Run once with all N waiters as threads of this process (`wait_*`:
//! releases in the process ring the next waiter directly), then, with
//! `--procs P` > 1, with the waiters spread over P processes (`waitx_*`:
//! most hand-offs cross processes, woken by the release announcement).
//!
//! `--one-each "P1 P2 …"` (issue 21's measurement) replaces those two runs:
//! for each P, P processes (this one and P − 1 children) with ONE waiter
//! each (`waitpP_*`): every hand-off crosses processes, and what a release
//! announces, and to whom, decides the tries per hand-off (goal ≤ 1.5) and
//! the commands while they wait. Before the idle phase it waits (up to
//! 60 s) until `CLIENT LIST` shows P subscribed connections (each waiting
//! process's listener), so 100 processes starting on a busy machine are
//! all in line when the clock starts. The baseline then runs once per P
//! with P threads (`pywaitP_*`): redis-py's polling costs the same per
//! waiter whether the waiters are threads or processes.
//!
//! `--baseline PYTHON`: runs `scripts/waiting_redis_py.py` with that
//! interpreter (which needs redis-py) against the same server afterwards:
//! redis-py's `Lock(blocking=True)`, which retries `SET NX PX` every 0.1 s
//! per waiter, in the same two phases with N threads (`pywait_*`).
//! Output: `key=value` lines.

use mistri_locks::{AcquireOptions, Locks};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEY: &str = "the-key";
const TTL: Duration = Duration::from_secs(30);

/// `CLOCK_MONOTONIC` in ns: one clock for every process of the host.
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
/// included), and of scripts (`EVALSHA`, `EVAL`) other than the expiry
/// reads (the `EXPIRES` script, counted by the one `PTTL` it runs: no
/// other script the waiters run calls `PTTL`).
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
        if l.starts_with("cmdstat_pttl:") {
            scripts -= n;
        }
    }
    (all, scripts)
}

/// Connections with a subscription (`sub=`, `psub=` or `ssub=` > 0).
fn subscribed(con: &mut redis::Connection) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(con)
        .expect("CLIENT LIST");
    list.lines()
        .filter(|l| {
            l.split_whitespace().any(|f| {
                ["sub=", "psub=", "ssub="]
                    .iter()
                    .any(|p| f.strip_prefix(p).is_some_and(|v| v != "0"))
            })
        })
        .count()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

/// Runs `threads` waiters on `locks` until the shared turn counter (the
/// Redis key `turns`) passes `handoffs`; each turn's (acquired, release
/// started) times.
fn waiters(
    url: &str,
    locks: &Locks,
    turns: &str,
    threads: usize,
    handoffs: u64,
    hold: Duration,
) -> Vec<(i64, i64)> {
    let events = Arc::new(Mutex::new(Vec::new()));
    let client = redis::Client::open(url).expect("url");
    let threads: Vec<_> = (0..threads)
        .map(|_| {
            let (owner, events, turns) = (locks.new_owner(), events.clone(), turns.to_owned());
            let mut con = client.get_connection().expect("connect");
            std::thread::spawn(move || {
                let opts = AcquireOptions {
                    wait: Some(Duration::from_secs(60)),
                    ..AcquireOptions::default()
                };
                loop {
                    if !owner.acquire_with(KEY, TTL, &opts).expect("wait") {
                        continue;
                    }
                    let got = mono_ns();
                    let n: u64 = redis::cmd("INCR").arg(&turns).query(&mut con).unwrap();
                    if n > handoffs {
                        owner.release(KEY).expect("release");
                        return;
                    }
                    std::thread::sleep(hold);
                    let released = mono_ns();
                    owner.release(KEY).expect("release");
                    events.lock().unwrap().push((got, released));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("waiter");
    }
    let events = events.lock().unwrap().clone();
    events
}

/// One run: `waiters` waiters over `procs` processes (this one and
/// children); prints `{tag}_*` lines.
#[allow(clippy::too_many_arguments)]
fn run(
    tag: &str,
    url: &str,
    waiters_n: usize,
    procs: usize,
    handoffs: u64,
    idle: f64,
    hold: Duration,
    con: &mut redis::Connection,
) {
    let namespace = format!("bench-wait-{}-{tag}", std::process::id());
    let turns = format!("{namespace}:turns");
    let locks = Locks::redis(url, &namespace).expect("redis");
    assert!(locks.acquire(KEY, TTL).expect("acquire"));
    let share = |i: usize| waiters_n / procs + usize::from(i < waiters_n % procs);
    let children: Vec<_> = (1..procs)
        .map(|i| {
            Command::new(std::env::current_exe().unwrap())
                .env("BENCH_WAIT_CHILD", "1")
                .args([url, &namespace, &turns])
                .args([share(i).to_string(), handoffs.to_string()])
                .arg(hold.as_nanos().to_string())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a waiting process")
        })
        .collect();
    let here = {
        let (url, locks, turns, n) = (url.to_owned(), locks.clone(), turns.clone(), share(0));
        std::thread::spawn(move || waiters(&url, &locks, &turns, n, handoffs, hold))
    };
    // Every waiter in line (processes started, connected, tried once).
    std::thread::sleep(Duration::from_millis(1000));
    if procs > 1 {
        let t0 = Instant::now();
        while subscribed(con) < procs && t0.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let (before, _) = commands(con);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(idle));
    let idle_rate = (commands(con).0 - before) / t0.elapsed().as_secs_f64();

    let (before, scripts_before) = commands(con);
    let t0 = Instant::now();
    let first_release = mono_ns();
    assert!(locks.release(KEY).expect("release"));
    let mut polls = 0.0;
    loop {
        polls += 1.0;
        let n: u64 = redis::cmd("GET")
            .arg(&turns)
            .query::<Option<u64>>(con)
            .unwrap()
            .unwrap_or(0);
        if n >= handoffs {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = t0.elapsed().as_secs_f64();
    let (after, scripts_after) = commands(con);
    let mut events = here.join().expect("waiters");
    for child in children {
        let out = child.wait_with_output().expect("a waiting process");
        assert!(out.status.success(), "a waiting process failed");
        for line in BufReader::new(&out.stdout[..])
            .lines()
            .map_while(Result::ok)
        {
            if let Some((a, r)) = line.split_once(' ') {
                events.push((a.parse().unwrap(), r.parse().unwrap()));
            }
        }
    }
    events.sort_unstable();
    let mut lat = Vec::with_capacity(events.len());
    let mut from = first_release;
    for (acquired, released) in &events {
        lat.push((acquired - from) as f64 / 1e6);
        from = *released;
    }
    lat.sort_by(f64::total_cmp);
    let n = handoffs as f64;
    // One waiter per process: every turn's release is followed by a new
    // wait of that process (its first try joins the queue).
    let turns_start_waits = waiters_n == procs && procs > 1;
    // Not the lock's: each turn's INCR, and the GETs above.
    let spent = (after - before - n - polls).max(0.0);
    println!("{tag}_waiters={waiters_n}");
    println!("{tag}_procs={procs}");
    println!("{tag}_handoffs={}", lat.len());
    println!("{tag}_idle_cmds_per_s={idle_rate:.1}");
    println!("{tag}_cmds_per_handoff={:.2}", spent / n);
    // Acquire tries (scripts minus the releases and the expiry reads);
    // each turn also starts a new wait whose first try joins the queue
    // (refused: another line is ahead), so the tries a release causes are
    // the rest.
    let tries = (scripts_after - scripts_before - n) / n;
    println!("{tag}_tries_per_handoff={tries:.2}");
    if turns_start_waits {
        println!("{tag}_tries_after_release={:.2}", (tries - 1.0).max(0.0));
    }
    println!("{tag}_p50_ms={:.3}", percentile(&lat, 0.5));
    println!("{tag}_p99_ms={:.3}", percentile(&lat, 0.99));
    println!("{tag}_handoffs_per_s={:.1}", n / took);
}

/// A waiting process of a `--procs` run: prints `acquired released` lines.
fn child() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, namespace, turns, threads, handoffs, hold] = &args[..] else {
        panic!("child arguments: {args:?}");
    };
    let locks = Locks::redis(url, namespace).expect("redis");
    let hold = Duration::from_nanos(hold.parse().unwrap());
    let events = waiters(
        url,
        &locks,
        turns,
        threads.parse().unwrap(),
        handoffs.parse().unwrap(),
        hold,
    );
    for (a, r) in events {
        println!("{a} {r}");
    }
}

fn main() {
    if std::env::var_os("BENCH_WAIT_CHILD").is_some() {
        return child();
    }
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
    let procs: usize = arg("--procs").map_or(1, |v| v.parse().unwrap());
    let baseline = arg("--baseline");

    let one_each: Option<Vec<usize>> = arg("--one-each").map(|l| {
        l.split_whitespace()
            .map(|v| v.parse().expect("--one-each: numbers"))
            .collect()
    });
    let hold = Duration::from_secs_f64(hold_ms / 1000.0);

    let client = redis::Client::open(url.as_str()).expect("url");
    let mut con = client.get_connection().expect("connect");
    // (tag, waiters): the runs; the baseline runs once per waiter count.
    let mut runs = Vec::new();
    match &one_each {
        Some(list) => {
            for &p in list {
                let tag = format!("waitp{p}");
                run(&tag, &url, p, p, handoffs, idle, hold, &mut con);
                runs.push((format!("pywait{p}_"), p));
            }
        }
        None => {
            run("wait", &url, waiters, 1, handoffs, idle, hold, &mut con);
            if procs > 1 {
                run(
                    "waitx", &url, waiters, procs, handoffs, idle, hold, &mut con,
                );
            }
            runs.push(("pywait_".to_owned(), waiters));
        }
    }

    if let Some(python) = baseline {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/waiting_redis_py.py"
        );
        let addr = client.get_connection_info().addr().to_string();
        let port = addr.rsplit(':').next().unwrap_or("6379").to_owned();
        for (prefix, waiters) in runs {
            let out = Command::new(&python)
                .args([script, "--port", &port])
                .args(["--waiters", &waiters.to_string()])
                .args(["--handoffs", &handoffs.to_string()])
                .args(["--idle-seconds", &idle.to_string()])
                .args(["--hold-ms", &hold_ms.to_string()])
                .output()
                .expect("run the redis-py baseline");
            if out.status.success() {
                print!(
                    "{}",
                    String::from_utf8_lossy(&out.stdout).replace("pywait_", &prefix)
                );
            } else {
                eprintln!("{}", String::from_utf8_lossy(&out.stderr));
                println!("{prefix}error=1");
            }
        }
    }
}
