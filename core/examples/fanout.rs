//! The fleet fan-out: what a release costs while N other processes listen
//! for announcements (issue 21). A benchmark (run by `scripts/bench`), not
//! a test.
//!
//! ```sh
//! cargo build --release -p mistri_locks_cli -p mistri_locks_core --example fanout
//! target/release/examples/fanout --redis redis://127.0.0.1:6379/0 \
//!     --cli target/release/mistri-locks [--listeners "0 10 100 500"] \
//!     [--seconds 2] [--stop-trials 50] [--namespace mistri:fanout]
//! ```
//!
//! For each N of `--listeners`, then the first N once more (so the usual
//! list brackets the fleets with two N=0 runs, `fan_0_1` and `fan_0_2`):
//! 1. starts N processes `mistri-locks --url URL --namespace NS run
//!    fan:R:key-i --stop-key fan:R:stop-i -- sleep 600`, all in one process
//!    group of their own (and each with `PR_SET_PDEATHSIG`, so they go if
//!    this process dies), and waits until every lease is held and `CLIENT
//!    LIST` shows N subscribed connections (`sub=` or `psub=` > 0: each
//!    holder's listener);
//! 2. *calibration*: a raw socket of its own `PSUBSCRIBE`s `NS:r*:{*` (the
//!    pattern of the listeners before the change) during one acquire +
//!    release of the pair key: the bytes it receives are what one pattern
//!    listener is sent per release (`msg_bytes`, measured). If nothing
//!    arrives (the release announces nothing), `msg_bytes` is the RESP size
//!    of a `message` frame on `NS:released:{KEY}` with a 16-digit payload
//!    (`msg_bytes_measured=0`);
//! 3. *background*: one idle second (or `--seconds`, if shorter): the
//!    fleet's own heartbeats and flag reads, as Redis CPU, bytes sent and
//!    commands per second;
//! 4. *pairs*: `Locks::acquire` + `Locks::release` of an unrelated key for
//!    `--seconds`: pairs/s, Redis CPU per pair (`INFO cpu` used_cpu_sys +
//!    used_cpu_user delta / pairs, in µs) and bytes the server sent per
//!    pair (`INFO stats` total_net_output_bytes delta / pairs). Both are
//!    raw: the fleet's background is in them (reported next to them, and
//!    taken out in `net_cpu_us_per_pair` and `net_bytes_per_pair`: the
//!    figure less the background rate times the window, per pair);
//! 5. *stop → exit*: for min(N, `--stop-trials`) holders in turn,
//!    `Locks::set_flag` of its stop key, then the time until that CLI
//!    process has exited (polled every 200 µs; `run` exits 76 when its stop
//!    flag trips: it SIGTERMs `sleep`, reaps it, releases its lease). So
//!    the figure is the raise's round trip + the announcement + the trip +
//!    the CLI's teardown (its release round trip and exit): coarser than
//!    `stop_latency`'s in-process wake-up, but it is the fleet's own
//!    holders that are timed, with every other listener still running;
//! 6. SIGTERM to the group, up to 10 s to reap, then SIGKILL to the group;
//!    `sleep` children still alive after that (their CLI's
//!    `PR_SET_PDEATHSIG` should have ended them) are SIGKILLed too and
//!    counted (`leftover_sleeps`).
//!
//! At the end, per N (mean of its runs): `fan_N_pairs_per_s`,
//! `fan_N_cpu_us_per_pair`, `fan_N_bytes_per_pair`, the ratios to N=0, and
//! `fan_N_msgs_per_release` = (bytes/pair(N) − bytes/pair(0)) / msg_bytes,
//! the bytes per pair less each run's background bytes per pair.
//! Output: `key=value` lines.

use mistri_locks::Locks;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(30);
const PAIR_KEY: &str = "fan:pair";

struct Info {
    cpu_s: f64,
    out_bytes: f64,
    commands: f64,
}

fn info(con: &mut redis::Connection) -> Info {
    // Two small sections (their replies are in the next delta's bytes).
    let (cpu, stats): (String, String) = redis::pipe()
        .cmd("INFO")
        .arg("cpu")
        .cmd("INFO")
        .arg("stats")
        .query(con)
        .unwrap();
    let text = cpu + &stats;
    let field = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    Info {
        cpu_s: field("used_cpu_sys") + field("used_cpu_user"),
        out_bytes: field("total_net_output_bytes"),
        commands: field("total_commands_processed"),
    }
}

/// (connections with a subscription, `sub=` total, `psub=` total).
fn subscribers(con: &mut redis::Connection) -> (usize, u64, u64) {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(con).unwrap();
    let (mut conns, mut subs, mut psubs) = (0, 0, 0);
    for line in list.lines() {
        let get = |name: &str| -> u64 {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(name))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let (s, p, ss) = (get("sub="), get("psub="), get("ssub="));
        if s + p + ss > 0 {
            conns += 1;
        }
        subs += s + ss;
        psubs += p;
    }
    (conns, subs, psubs)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

/// The N holders of one run; killed and reaped when dropped.
struct Fleet {
    children: Vec<Option<Child>>,
    pgid: i32,
    sleeps: Vec<i32>,
}

impl Fleet {
    fn spawn(cli: &str, url: &str, namespace: &str, run: usize, n: usize) -> Fleet {
        let mut fleet = Fleet {
            children: Vec::with_capacity(n),
            pgid: 0,
            sleeps: Vec::new(),
        };
        for i in 0..n {
            let mut cmd = Command::new(cli);
            cmd.args(["--url", url, "--namespace", namespace, "run"])
                .arg(format!("fan:{run}:key-{i}"))
                .arg("--stop-key")
                .arg(format!("fan:{run}:stop-{i}"))
                .args(["--grace", "1", "--", "sleep", "600"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(fleet.pgid);
            // SAFETY: in the forked child only prctl, an async-signal-safe
            // call with integer arguments.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    Ok(())
                });
            }
            let child = cmd.spawn().expect("spawn the mistri-locks CLI");
            if fleet.pgid == 0 {
                fleet.pgid = child.id() as i32;
            }
            fleet.children.push(Some(child));
        }
        fleet
    }

    /// The `sleep` under each CLI process (to make sure they die too).
    fn find_sleeps(&mut self) {
        for child in self.children.iter().flatten() {
            let id = child.id();
            let path = format!("/proc/{id}/task/{id}/children");
            if let Ok(text) = std::fs::read_to_string(path) {
                self.sleeps.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok()),
                );
            }
        }
    }

    /// Waits up to `limit` for child `i` to exit: its status code.
    fn wait_exit(&mut self, i: usize, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        let child = self.children[i].as_mut()?;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.children[i] = None;
                return Some(status.code().unwrap_or(-1));
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// SIGTERM, up to 10 s, SIGKILL; every child reaped. The number of
    /// `sleep`s that outlived their CLI (then killed).
    fn end(&mut self) -> usize {
        if self.pgid == 0 {
            return 0;
        }
        if self.sleeps.is_empty() {
            self.find_sleeps();
        }
        // SAFETY: a signal to our own children's process group.
        unsafe { libc::killpg(self.pgid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && self.children.iter().any(Option::is_some) {
            for slot in &mut self.children {
                if let Some(child) = slot {
                    if let Ok(Some(_)) = child.try_wait() {
                        *slot = None;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: as above.
        unsafe { libc::killpg(self.pgid, libc::SIGKILL) };
        for mut child in self.children.drain(..).flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.pgid = 0;
        // Their CLI is gone, and with it (PR_SET_PDEATHSIG) each sleep:
        // give them a moment, then make sure.
        std::thread::sleep(Duration::from_millis(50));
        let mut left = 0;
        for pid in self.sleeps.drain(..) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit(')')
                .next()
                .is_some_and(|s| s.trim_start().starts_with('Z'));
            if comm.trim() == "sleep" && !zombie {
                left += 1;
                // SAFETY: a signal to a sleep our CLI child started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        left
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.end();
    }
}

/// Bytes one `PSUBSCRIBE NS:r*:{*` socket receives for one release of
/// the pair key; None if nothing arrives in 200 ms.
fn calibrate(addr: &str, locks: &Locks, namespace: &str) -> Option<f64> {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    let pattern = format!("{namespace}:r*:{{*");
    write!(
        s,
        "*2\r\n$10\r\nPSUBSCRIBE\r\n${}\r\n{pattern}\r\n",
        pattern.len()
    )
    .unwrap();
    let mut buf = [0u8; 4096];
    let mut got = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    // The subscribe confirmation ends with `:1\r\n`.
    while !got.ends_with(b":1\r\n") {
        let n = s.read(&mut buf).expect("psubscribe reply");
        assert!(n > 0, "psubscribe: connection closed");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(locks.acquire(PAIR_KEY, TTL).unwrap());
    assert!(locks.release(PAIR_KEY).unwrap());
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut bytes = 0;
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        bytes += n;
    }
    (bytes > 0).then_some(bytes as f64)
}

/// A `message` frame on `NS:released:{KEY}` with a 16-digit payload.
fn message_frame(namespace: &str) -> f64 {
    let channel = format!("{namespace}:released:{{{PAIR_KEY}}}");
    let payload = "1234567890123456";
    format!(
        "*3\r\n$7\r\nmessage\r\n${}\r\n{channel}\r\n${}\r\n{payload}\r\n",
        channel.len(),
        payload.len()
    )
    .len() as f64
}

/// Subscribers of `channel`.
fn numsub(con: &mut redis::Connection, channel: &str) -> i64 {
    let reply: Vec<redis::Value> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(con)
        .unwrap_or_default();
    match reply.get(1) {
        Some(redis::Value::Int(n)) => *n,
        _ => 0,
    }
}

#[allow(clippy::too_many_arguments)]
fn one_run(
    tag: &str,
    run: usize,
    n: usize,
    cli: &str,
    url: &str,
    addr: &str,
    namespace: &str,
    seconds: f64,
    stop_trials: usize,
    locks: &Locks,
    con: &mut redis::Connection,
    out: &mut BTreeMap<String, f64>,
) {
    let mut put = |k: &str, v: f64| {
        println!("{tag}_{k}={v:.3}");
        out.insert(format!("{tag}_{k}"), v);
    };
    let t0 = Instant::now();
    let mut fleet = Fleet::spawn(cli, url, namespace, run, n);
    let (conns, subs, psubs) = loop {
        let seen = subscribers(con);
        if seen.0 >= n && (0..n).all(|i| locks.held(&format!("fan:{run}:key-{i}")).unwrap_or(false))
        {
            break seen;
        }
        for (i, c) in fleet.children.iter_mut().enumerate() {
            if let Some(Ok(Some(status))) = c.as_mut().map(Child::try_wait) {
                panic!("listener {i} exited early: {status}");
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{n} listeners not ready after 120 s ({} subscribed)",
            seen.0
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    fleet.find_sleeps();
    put("listeners", n as f64);
    put("ready_s", t0.elapsed().as_secs_f64());
    put("subscribed_conns", conns as f64);
    put("sub_total", subs as f64);
    put("psub_total", psubs as f64);
    // Let the start-up settle (first renewals, connection pools).
    std::thread::sleep(Duration::from_millis(300));

    let (msg, measured) = match calibrate(addr, locks, namespace) {
        Some(b) => (b, 1.0),
        None => (message_frame(namespace), 0.0),
    };
    put("msg_bytes", msg);
    put("msg_bytes_measured", measured);

    let idle = seconds.min(1.0);
    let a = info(con);
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(idle));
    let b = info(con);
    let el = t.elapsed().as_secs_f64();
    let bg_bytes = (b.out_bytes - a.out_bytes) / el;
    let bg_cpu = (b.cpu_s - a.cpu_s) * 1e6 / el;
    put("bg_bytes_per_s", bg_bytes);
    put("bg_cpu_us_per_s", bg_cpu);
    put("bg_cmds_per_s", (b.commands - a.commands) / el);

    let a = info(con);
    let t = Instant::now();
    let window = Duration::from_secs_f64(seconds);
    let mut pairs = 0u64;
    while t.elapsed() < window {
        for _ in 0..32 {
            assert!(locks.acquire(PAIR_KEY, TTL).unwrap(), "pair key held");
            assert!(locks.release(PAIR_KEY).unwrap());
        }
        pairs += 32;
    }
    let el = t.elapsed().as_secs_f64();
    let b = info(con);
    let p = pairs as f64;
    let bytes = (b.out_bytes - a.out_bytes) / p;
    put("pairs", p);
    put("pairs_per_s", p / el);
    put("cpu_us_per_pair", (b.cpu_s - a.cpu_s) * 1e6 / p);
    put("bytes_per_pair", bytes);
    put("net_bytes_per_pair", bytes - bg_bytes * el / p);
    put(
        "net_cpu_us_per_pair",
        (b.cpu_s - a.cpu_s) * 1e6 / p - bg_cpu * el / p,
    );

    // Stop -> signal while the fleet listens: a hold of this process with
    // a stop key, raised from another connection, timed to the signal
    // (in process, so no process teardown is in the figure).
    if stop_trials > 0 {
        let stop = format!("fan:{run}:own-stop");
        let raiser = Locks::redis(url, namespace).expect("redis");
        let mut lat = Vec::with_capacity(stop_trials);
        for i in 0..stop_trials {
            let opts = mistri_locks::HoldOptions {
                stop_key: Some(stop.clone()),
                ..mistri_locks::HoldOptions::default()
            };
            let hold = locks
                .hold(&format!("fan:{run}:own-{i}"), opts)
                .expect("hold")
                .expect("free");
            let channel = format!("{namespace}:raised:{{{stop}}}");
            let t = Instant::now();
            while numsub(con, &channel) < 1 && t.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(2));
            }
            std::thread::sleep(Duration::from_millis(5));
            let t = Instant::now();
            raiser.set_flag(&stop, Duration::from_secs(60)).unwrap();
            assert!(
                hold.signal().wait(Some(Duration::from_secs(5))),
                "not stopped"
            );
            lat.push(t.elapsed().as_secs_f64() * 1e3);
            hold.release().unwrap();
            raiser.clear_flag(&stop).unwrap();
        }
        lat.sort_by(f64::total_cmp);
        put("signal_p50_ms", percentile(&lat, 0.5));
        put("signal_p99_ms", percentile(&lat, 0.99));
    }

    let trials = n.min(stop_trials);
    if trials > 0 {
        let mut lat = Vec::with_capacity(trials);
        let mut stopped = 0;
        for i in 0..trials {
            std::thread::sleep(Duration::from_millis(2));
            let t = Instant::now();
            locks
                .set_flag(&format!("fan:{run}:stop-{i}"), Duration::from_secs(60))
                .unwrap();
            let code = fleet.wait_exit(i, Duration::from_secs(5));
            lat.push(t.elapsed().as_secs_f64() * 1e3);
            stopped += usize::from(code == Some(76));
        }
        lat.sort_by(f64::total_cmp);
        put("stop_trials", trials as f64);
        put("stop_exit76", stopped as f64);
        put("stop_p50_ms", percentile(&lat, 0.5));
        put("stop_p99_ms", percentile(&lat, 0.99));
        put("stop_max_ms", lat[lat.len() - 1]);
    }
    let t = Instant::now();
    let left = fleet.end();
    put("teardown_s", t.elapsed().as_secs_f64());
    put("leftover_sleeps", left as f64);
    for i in 0..trials {
        let _ = locks.clear_flag(&format!("fan:{run}:stop-{i}"));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let url = arg("--redis").expect("--redis URL");
    let cli = arg("--cli").expect("--cli PATH (the mistri-locks binary)");
    let list: Vec<usize> = arg("--listeners")
        .unwrap_or_else(|| "0 10 100 500".into())
        .split_whitespace()
        .map(|v| v.parse().expect("--listeners: numbers"))
        .collect();
    let seconds: f64 = arg("--seconds").map_or(2.0, |v| v.parse().unwrap());
    let stop_trials: usize = arg("--stop-trials").map_or(50, |v| v.parse().unwrap());
    let namespace = arg("--namespace").unwrap_or_else(|| "mistri:fanout".into());
    assert!(!list.is_empty(), "--listeners: at least one N");

    let client = redis::Client::open(url.as_str()).expect("url");
    let addr = client.get_connection_info().addr().to_string();
    let mut con = client.get_connection().expect("connect");
    let locks = Locks::redis(&url, &namespace).expect("redis");
    // Warm the pool and the scripts.
    for _ in 0..200 {
        assert!(locks.acquire(PAIR_KEY, TTL).unwrap());
        assert!(locks.release(PAIR_KEY).unwrap());
    }

    let mut order = list.clone();
    order.push(list[0]);
    let mut out = BTreeMap::new();
    let mut rounds: BTreeMap<usize, usize> = BTreeMap::new();
    // Unique keys per invocation and run (nothing of an earlier run is met).
    let base = std::process::id() as usize * 100;
    for (r, &n) in order.iter().enumerate() {
        let round = rounds.entry(n).or_default();
        *round += 1;
        let tag = format!("fan_{n}_{round}");
        eprintln!("fanout: N={n} (run {round})");
        one_run(
            &tag,
            base + r,
            n,
            &cli,
            &url,
            &addr,
            &namespace,
            seconds,
            stop_trials,
            &locks,
            &mut con,
            &mut out,
        );
    }

    // Per N: the mean of its runs, and against N=0.
    let mean = |n: usize, f: &str| -> Option<f64> {
        let v: Vec<f64> = (1..=rounds.get(&n).copied().unwrap_or(0))
            .filter_map(|r| out.get(&format!("fan_{n}_{r}_{f}")).copied())
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let zero = rounds.contains_key(&0);
    for &n in rounds.keys() {
        for f in [
            "pairs_per_s",
            "cpu_us_per_pair",
            "net_cpu_us_per_pair",
            "bytes_per_pair",
            "net_bytes_per_pair",
            "msg_bytes",
            "stop_p50_ms",
            "stop_p99_ms",
            "sub_total",
            "psub_total",
        ] {
            if let Some(v) = mean(n, f) {
                println!("fan_{n}_{f}={v:.3}");
            }
        }
        if !zero {
            continue;
        }
        let ratio = |f: &str| Some(mean(n, f)? / mean(0, f)?);
        if let Some(v) = ratio("pairs_per_s") {
            println!("fan_{n}_pairs_ratio={v:.3}");
        }
        if let Some(v) = ratio("cpu_us_per_pair") {
            println!("fan_{n}_cpu_ratio={v:.3}");
        }
        if let Some(v) = ratio("net_cpu_us_per_pair") {
            println!("fan_{n}_net_cpu_ratio={v:.3}");
        }
        if let (Some(b), Some(b0), Some(m)) = (
            mean(n, "net_bytes_per_pair"),
            mean(0, "net_bytes_per_pair"),
            mean(n, "msg_bytes"),
        ) {
            println!("fan_{n}_msgs_per_release={:.3}", (b - b0) / m);
        }
    }
}
