//! MySQL / MariaDB without LISTEN: stop → signal latency and hand-off
//! latency across processes, and what an idle watching process costs the
//! server, at `--processes N` holder processes on one throwaway MariaDB
//! (the testkit's `MariaDbServer`). A benchmark, not a test (the figures
//! are in docs/MYSQL.md).
//!
//! ```text
//! cargo run --release -p mistri_locks_core --example my_latency -- --processes 1 --trials 60
//! cargo run --release -p mistri_locks_core --example my_latency -- --processes 200 --trials 60
//! ```
//!
//! Each holder process (this binary again) holds a key of its own with a
//! stop key (ttl 30 s, heartbeat 1 s: the beat reads the flag once a
//! second; the poller every 0.2 s), raised 0.4–0.6 s after it was armed
//! (a new hold reads its flag once its watch is live). Idle: with every hold armed, the
//! server's `Questions` over 3 s, per process. Stop: the stopper (this
//! process) reads `CLOCK_MONOTONIC` and raises a random holder's flag;
//! the holder reads the clock when its signal wakes it. Hand-off: this
//! process holds a key, a waiter process waits for it (`acquire_with`,
//! its line queued), and the clock runs from just before this process's
//! release to the waiter's acquire returning. Prints `key=value` lines
//! (milliseconds) and a summary.

use mistri_locks::{AcquireOptions, HoldOptions, Locks, OpenOptions};
use mistri_locks_testkit::{MariaDbClient, MariaDbServer};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
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

const NS: &str = "mistri:latency";

fn open(url: &str) -> Locks {
    Locks::open_with(url, &OpenOptions::new().namespace(NS)).expect("mysql://")
}

/// A holder: `arm KEY STOP` holds KEY watching STOP, says `ready`, and
/// when the signal wakes it says `woke NS` and releases.
fn holder(url: &str) {
    let locks = open(url);
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["arm", key, stop] => {
                let options = HoldOptions {
                    ttl: Duration::from_secs(30),
                    heartbeat: Duration::from_secs(1),
                    stop_key: Some((*stop).to_owned()),
                    ..HoldOptions::default()
                };
                let hold = locks.hold(key, options).unwrap().expect("free");
                println!("ready");
                let woke = hold.signal().wait(Some(Duration::from_secs(60)));
                println!("woke {} {woke}", mono_ns());
                let _ = hold.release();
            }
            ["wait", key] => {
                let opts = AcquireOptions {
                    wait: Some(Duration::from_secs(20)),
                    ..AcquireOptions::default()
                };
                println!("waiting");
                let got = locks
                    .acquire_with(key, Duration::from_secs(30), &opts)
                    .unwrap();
                println!("got {} {got}", mono_ns());
                let _ = locks.release(key);
            }
            _ => return,
        }
    }
}

struct Proc {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Proc {
    fn start(url: &str) -> Proc {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--child", url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        Proc {
            child,
            input,
            output,
        }
    }
    fn say(&mut self, line: &str) {
        writeln!(self.input, "{line}").unwrap();
    }
    fn hear(&mut self) -> Vec<String> {
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        line.split_whitespace().map(str::to_owned).collect()
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn questions(c: &mut MariaDbClient) -> f64 {
    status(c, "Questions")
}

fn status(c: &mut MariaDbClient, name: &str) -> f64 {
    c.query(&format!("SHOW GLOBAL STATUS LIKE '{name}'"))
        .ok()
        .and_then(|r| r.first()?.get(1)?.clone())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        return holder(&args[i + 1]);
    }
    let arg = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (n, trials) = (arg("--processes", 1), arg("--trials", 60));
    let server = MariaDbServer::start();
    server.sql("CREATE USER bench@'%'; GRANT ALL ON mistri.* TO bench@'%'");
    let url = server.url();
    let locks = open(&url);
    locks.held("warm-up").unwrap(); // the schema, once
    let mut procs: Vec<Proc> = (0..n).map(|_| Proc::start(&url)).collect();
    let mut round = vec![0u64; n];
    for (i, p) in procs.iter_mut().enumerate() {
        p.say(&format!("arm hold-{i} stop-{i}-0"));
    }
    for p in &mut procs {
        assert_eq!(p.hear()[0], "ready");
    }
    // Idle: every hold armed, nothing raised.
    std::thread::sleep(Duration::from_secs(2));
    let mut stat = MariaDbClient::connect(server.port(), "bench").unwrap();
    let window = 3.0;
    let kinds = ["Com_select", "Com_update", "Com_commit", "Com_rollback"];
    let k0: Vec<f64> = kinds.iter().map(|k| status(&mut stat, k)).collect();
    let q0 = questions(&mut stat);
    std::thread::sleep(Duration::from_secs_f64(window));
    // The second read counts itself.
    let idle = (questions(&mut stat) - q0 - 1.0) / window;
    for (k, v0) in kinds.iter().zip(k0) {
        println!(
            "my_{n}_idle_{}_per_s={:.1}",
            k.to_lowercase(),
            (status(&mut stat, k) - v0) / window
        );
    }
    // Stop: raise a random holder's flag.
    let mut seed = 0x9e37_79b9_u64;
    let mut stops = Vec::new();
    for t in 0..trials + 5 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let i = (seed >> 33) as usize % n;
        // Not right after the re-arm: a new hold reads its flag once its
        // watch is live, which would measure that read, not the poll.
        std::thread::sleep(Duration::from_micros(400_000 + (seed >> 20) % 200_000));
        let raised = mono_ns();
        locks
            .set_flag(&format!("stop-{i}-{}", round[i]), Duration::from_secs(60))
            .unwrap();
        let words = procs[i].hear();
        assert_eq!((words[0].as_str(), words[2].as_str()), ("woke", "true"));
        if t >= 5 {
            stops.push((words[1].parse::<i64>().unwrap() - raised) as f64 / 1e6);
        }
        round[i] += 1;
        procs[i].say(&format!("arm hold-{i} stop-{i}-{}", round[i]));
        assert_eq!(procs[i].hear()[0], "ready");
    }
    // Hand-off: this process holds, a waiter process waits.
    let mut waiter = Proc::start(&url);
    let mut handoffs = Vec::new();
    for t in 0..trials.min(30) + 3 {
        let key = format!("handoff-{t}");
        assert!(locks.acquire(&key, Duration::from_secs(30)).unwrap());
        waiter.say(&format!("wait {key}"));
        assert_eq!(waiter.hear()[0], "waiting");
        std::thread::sleep(Duration::from_millis(300));
        let released = mono_ns();
        assert!(locks.release(&key).unwrap());
        let words = waiter.hear();
        assert_eq!((words[0].as_str(), words[2].as_str()), ("got", "true"));
        if t >= 3 {
            handoffs.push((words[1].parse::<i64>().unwrap() - released) as f64 / 1e6);
        }
    }
    for p in procs.iter_mut().chain(std::iter::once(&mut waiter)) {
        p.say("quit");
        let _ = p.child.kill();
        let _ = p.child.wait();
    }
    stops.sort_by(f64::total_cmp);
    handoffs.sort_by(f64::total_cmp);
    let tag = format!("my_{n}");
    println!("{tag}_idle_queries_per_s={idle:.2}");
    println!(
        "{tag}_idle_queries_per_s_per_process={:.2}",
        idle / n as f64
    );
    for (what, v) in [("stop", &stops), ("handoff", &handoffs)] {
        for (p, q) in [("p50", 0.5), ("p99", 0.99), ("max", 1.0)] {
            println!("{tag}_{what}_{p}_ms={:.1}", pct(v, q));
        }
    }
    println!(
        "\nMariaDB, {n} holder process(es): idle {idle:.1} queries/s ({:.2} per process); stop -> signal p50 {:.1} / p99 {:.1} / max {:.1} ms ({} raises); hand-off p50 {:.1} / p99 {:.1} / max {:.1} ms ({} hand-offs)",
        idle / n as f64,
        pct(&stops, 0.5),
        pct(&stops, 0.99),
        pct(&stops, 1.0),
        stops.len(),
        pct(&handoffs, 0.5),
        pct(&handoffs, 0.99),
        pct(&handoffs, 1.0),
        handoffs.len()
    );
}
