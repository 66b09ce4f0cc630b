//! A measured study for issue 41, "stop and hand-off without LISTEN": on
//! a throwaway MariaDB ([`MariaDbServer`]), what a stop costs and how soon
//! it is heard when each process polls, and with two faster doorbells.
//! Every figure is printed beside its baseline from the same run.
//!
//! ```text
//! cargo run --release -p mistri_locks_testkit --example mariadb_poll
//! cargo run --release -p mistri_locks_testkit --example mariadb_poll -- --seconds 5 --raises 40
//! ```
//!
//! Each "process" is a thread with its own TCP connection (the server
//! cannot tell the two apart); each watches `KEYS` keys of its own. The
//! client is the testkit's minimal MySQL-protocol client
//! ([`MariaDbClient`]), so nothing but the server is measured. Results
//! are in docs/MYSQL.md.

use mistri_locks_testkit::{MariaDbClient, MariaDbRow, MariaDbServer};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Keys each process watches (its holds' stop flags and the lines it
/// waits in).
const KEYS: usize = 10;

/// Runs a statement the study needs to succeed.
trait Exec {
    fn exec(&mut self, sql: &str);
}

impl Exec for MariaDbClient {
    fn exec(&mut self, sql: &str) {
        if let Err(e) = self.query(sql) {
            panic!("{sql}: {e}");
        }
    }
}

// ---- measuring ----

/// The server's CPU time so far (user + system), from /proc.
fn server_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the comm.
    // SAFETY: sysconf takes no pointers.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100);
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 1000 / hz.max(1))
}

fn questions(c: &mut MariaDbClient) -> u64 {
    let rows = c
        .query("SHOW GLOBAL STATUS LIKE 'Questions'")
        .expect("status");
    rows[0][1].as_deref().unwrap_or("0").parse().unwrap_or(0)
}

/// Server queries per second and CPU share while `f` runs for `secs`.
struct Cost {
    qps: f64,
    cpu: f64,
}

fn measure(server: &MariaDbServer, admin: &mut MariaDbClient, f: impl FnOnce()) -> Cost {
    let q0 = questions(admin);
    let c0 = server_cpu(server.pid());
    let t0 = Instant::now();
    f();
    let wall = t0.elapsed().as_secs_f64();
    let c1 = server_cpu(server.pid());
    let q1 = questions(admin);
    Cost {
        // Minus the one status query of `measure` itself.
        qps: (q1 - q0).saturating_sub(1) as f64 / wall,
        cpu: (c1 - c0).as_secs_f64() / wall * 100.0,
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn keys_of(p: usize) -> Vec<String> {
    (0..KEYS).map(|k| format!("p{p}-k{k}")).collect()
}

fn in_list(keys: &[String]) -> String {
    keys.iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(",")
}

/// How a listener learns of a raised flag.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Open connections that send nothing (the baseline).
    Idle,
    /// One `SELECT k FROM flags WHERE k IN (..its keys..)` per tick.
    Poll(Duration),
    /// `SELECT .. IF(flag raised, 0, SLEEP(park))`, woken by `KILL QUERY`.
    Doorbell { park: Duration },
    /// One primary-key read of a bell counter every `every`; the watch
    /// query only when the counter moved.
    BellTable(Duration),
}

/// When each flag was raised and seen, by key.
type Log = Arc<Mutex<std::collections::HashMap<String, Instant>>>;

struct Run {
    stop: Arc<AtomicBool>,
    seen: Log,
    latencies: Arc<Mutex<Vec<f64>>>,
    ids: Arc<Mutex<Vec<(usize, u64)>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    errors: Arc<AtomicU64>,
    /// Statements listeners ran because of a raise (beyond their idle
    /// rhythm): reads after a bell moved, early returns of a parked
    /// query, the DELETE of a seen flag.
    woken: Arc<AtomicU64>,
}

fn listeners(port: u16, n: usize, mode: Mode, raised: Log) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let ids = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(AtomicU64::new(0));
    let woken = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for p in 0..n {
        let woken2 = woken.clone();
        let (stop, raised, latencies, ids, errors, ready) = (
            stop.clone(),
            raised.clone(),
            latencies.clone(),
            ids.clone(),
            errors.clone(),
            ready.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let mut c = MariaDbClient::connect(port, "study").expect("listener connects");
            let keys = keys_of(p);
            let list = in_list(&keys);
            ids.lock().unwrap().push((p, c.id()));
            ready.fetch_add(1, Ordering::SeqCst);
            let watch = format!("SELECT k FROM flags WHERE k IN ({list})");
            let on_rows = |c: &mut MariaDbClient, rows: Vec<MariaDbRow>| {
                for row in rows {
                    let Some(k) = row.first().cloned().flatten() else {
                        continue;
                    };
                    let read_at = Instant::now();
                    c.exec(&format!("DELETE FROM flags WHERE k = '{k}'"));
                    // Deleted first, then no longer pending: the raiser
                    // raises a key again only once it is cleared.
                    if let Some(at) = raised.lock().unwrap().remove(&k) {
                        latencies
                            .lock()
                            .unwrap()
                            .push(read_at.duration_since(at).as_secs_f64() * 1000.0);
                    }
                    woken2.fetch_add(1, Ordering::Relaxed);
                }
            };
            // A random phase, so ticks are spread as real processes' are.
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((p as u64 + 1) * 0x1234_5677));
            let phase = |rng: &mut Rng, every: Duration| {
                Duration::from_micros(rng.below(every.as_micros() as u64))
            };
            match mode {
                Mode::Idle => {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
                Mode::Poll(every) => {
                    let mut next = Instant::now() + phase(&mut rng, every);
                    while !stop.load(Ordering::Relaxed) {
                        let now = Instant::now();
                        if now < next {
                            std::thread::sleep((next - now).min(Duration::from_millis(20)));
                            continue;
                        }
                        next += every;
                        match c.query(&watch) {
                            Ok(rows) => on_rows(&mut c, rows),
                            Err(_) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                Mode::BellTable(every) => {
                    let mut next = Instant::now() + phase(&mut rng, every);
                    let mut last: Option<String> = None;
                    while !stop.load(Ordering::Relaxed) {
                        let now = Instant::now();
                        if now < next {
                            std::thread::sleep((next - now).min(Duration::from_millis(20)));
                            continue;
                        }
                        next += every;
                        let bell = c
                            .query("SELECT n FROM bell WHERE id = 1")
                            .ok()
                            .and_then(|r| r.first().and_then(|row| row[0].clone()));
                        if bell != last {
                            if last.is_some() {
                                woken2.fetch_add(1, Ordering::Relaxed);
                            }
                            last = bell;
                            if let Ok(rows) = c.query(&watch) {
                                on_rows(&mut c, rows);
                            }
                        }
                    }
                }
                Mode::Doorbell { park } => {
                    // Raised flags and the park in one statement: a flag
                    // committed before the statement's read is seen, one
                    // committed after it is followed by a KILL QUERY that
                    // finds the statement running (module docs).
                    let park_s = park.as_secs_f64();
                    let q = format!(
                        "SELECT k FROM flags WHERE k IN ({list}) \
                         UNION ALL SELECT NULL FROM DUAL \
                         WHERE NOT EXISTS (SELECT 1 FROM flags WHERE k IN ({list})) \
                         AND SLEEP({park_s}) < 0"
                    );
                    while !stop.load(Ordering::Relaxed) {
                        let began = Instant::now();
                        match c.query(&q) {
                            Ok(rows) => {
                                if began.elapsed() < park {
                                    woken2.fetch_add(1, Ordering::Relaxed);
                                }
                                on_rows(&mut c, rows)
                            }
                            // 1317: interrupted; the next round reads.
                            Err(e) if e.starts_with("1317") => {
                                woken2.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
            }
        }));
    }
    while ready.load(Ordering::SeqCst) < n as u64 {
        std::thread::sleep(Duration::from_millis(5));
    }
    Run {
        stop,
        seen: raised,
        latencies,
        ids,
        threads,
        errors,
        woken,
    }
}

impl Run {
    fn finish(self, admin: &mut MariaDbClient, doorbell: bool) -> (Vec<f64>, u64, u64) {
        self.stop.store(true, Ordering::SeqCst);
        let woken = self.woken.load(Ordering::SeqCst);
        if doorbell {
            for (_, id) in self.ids.lock().unwrap().iter() {
                let _ = admin.query(&format!("KILL QUERY {id}"));
            }
        }
        for t in self.threads {
            let _ = t.join();
        }
        let mut l = self.latencies.lock().unwrap().clone();
        l.sort_by(f64::total_cmp);
        (l, self.errors.load(Ordering::Relaxed), woken)
    }
}

/// Raises `count` flags on random listeners, `gap` apart (jittered), as
/// `raise` says; each raise's instant is logged before its first statement.
fn raise_flags(
    port: u16,
    run: &Run,
    n: usize,
    count: usize,
    gap: Duration,
    doorbell: bool,
    bell_table: bool,
) -> (Vec<f64>, u64) {
    let mut c = MariaDbClient::connect(port, "study").expect("raiser connects");
    let mut statements = 0u64;
    let mut rng = Rng(0xDEAD_BEEF_CAFE_F00D);
    let mut raise_ms = Vec::new();
    for i in 0..count {
        // A key that is not raised already (its listener has cleared it).
        let key = loop {
            let p = rng.below(n as u64) as usize;
            let key = format!("p{p}-k{}", rng.below(KEYS as u64));
            if !run.seen.lock().unwrap().contains_key(&key) {
                break key;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        run.seen.lock().unwrap().insert(key.clone(), Instant::now());
        let t = Instant::now();
        c.exec(&format!(
            "INSERT INTO flags (k, raised_us) VALUES ('{key}', {i}) \
             ON DUPLICATE KEY UPDATE raised_us = VALUES(raised_us)"
        ));
        statements += 1;
        if bell_table {
            c.exec("UPDATE bell SET n = n + 1 WHERE id = 1");
            statements += 1;
        }
        if doorbell {
            // Who parks on this key: its process's registered connection.
            let rows = c
                .query(&format!("SELECT conn_id FROM bells WHERE k = '{key}'"))
                .expect("bells");
            statements += 1;
            for row in rows {
                if let Some(id) = row[0].as_deref() {
                    let _ = c.query(&format!("KILL QUERY {id}"));
                    statements += 1;
                }
            }
        }
        raise_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        let jitter = rng.below(gap.as_millis() as u64 + 1);
        std::thread::sleep(gap / 2 + Duration::from_millis(jitter));
    }
    // Let the last one be heard.
    std::thread::sleep(Duration::from_millis(1200));
    raise_ms.sort_by(f64::total_cmp);
    (raise_ms, statements)
}

fn main() {
    let mut seconds = 8.0f64;
    let mut raises = 60usize;
    let mut many = 200usize;
    let few = 1usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--seconds" => seconds = v.parse().expect("--seconds N"),
            "--raises" => raises = v.parse().expect("--raises N"),
            "--processes" => many = v.parse().expect("--processes N"),
            _ => panic!("usage: mariadb_poll [--seconds S] [--raises N] [--processes N]"),
        }
    }
    let t0 = Instant::now();
    let server = MariaDbServer::start();
    let (install, start) = server.startup();
    println!(
        "server: {} (mariadb-install-db {:.2} s, start {:.2} s, whole {:.2} s)",
        server.sql("SELECT VERSION()"),
        install.as_secs_f64(),
        start.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    // A user like the URL's (rights on its database only), with no
    // password so this client needs no hashing.
    server.sql(
        "CREATE USER 'study'@'%'; GRANT ALL ON mistri.* TO 'study'@'%'; \
         CREATE USER 'other'@'%'; GRANT ALL ON mistri.* TO 'other'@'%'; \
         CREATE TABLE flags (k VARBINARY(255) PRIMARY KEY, raised_us BIGINT NOT NULL) ENGINE=InnoDB; \
         CREATE TABLE bells (k VARBINARY(255) NOT NULL, conn_id BIGINT UNSIGNED NOT NULL, \
           PRIMARY KEY (k, conn_id)) ENGINE=InnoDB; \
         CREATE TABLE bell (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB; \
         INSERT INTO bell VALUES (1, 0)",
    );
    let port = server.port();
    let mut admin = MariaDbClient::connect(port, "study").expect("connect");
    // Unrelated flags so the index is not trivially empty.
    for chunk in 0..10 {
        let values: Vec<String> = (0..1000)
            .map(|i| format!("('other-{chunk}-{i}', 0)"))
            .collect();
        admin.exec(&format!("INSERT INTO flags VALUES {}", values.join(",")));
    }
    let log = || -> Log { Arc::new(Mutex::new(std::collections::HashMap::new())) };
    let dur = Duration::from_secs_f64(seconds);

    println!("\n(a) idle cost: server queries/s and CPU (% of one core) over {seconds} s");
    println!(
        "    {:<48} {:>10} {:>12} {:>9}",
        "", "q/s", "q/s/process", "CPU %"
    );
    let row = |name: &str, n: usize, c: &Cost| {
        println!(
            "    {name:<48} {:>10.1} {:>12.2} {:>9.2}",
            c.qps,
            c.qps / n as f64,
            c.cpu
        );
    };
    {
        let cost = measure(&server, &mut admin, || std::thread::sleep(dur));
        row("baseline: no client but this one", 1, &cost);
        cost
    };
    for (n, mode, name) in [
        (
            many,
            Mode::Idle,
            format!("baseline: {many} open connections, silent"),
        ),
        (
            1,
            Mode::Poll(Duration::from_secs(1)),
            "tick poll 1 s, 1 process".into(),
        ),
        (
            many,
            Mode::Poll(Duration::from_secs(1)),
            format!("tick poll 1 s, {many} processes"),
        ),
        (
            many,
            Mode::Poll(Duration::from_millis(200)),
            format!("tick poll 200 ms, {many} processes"),
        ),
        (
            many,
            Mode::BellTable(Duration::from_millis(100)),
            format!("bell table every 100 ms, {many} processes"),
        ),
        (
            1,
            Mode::Doorbell {
                park: Duration::from_secs(1),
            },
            "parked SLEEP(1) doorbell, 1 process".into(),
        ),
        (
            many,
            Mode::Doorbell {
                park: Duration::from_secs(1),
            },
            format!("parked SLEEP(1) doorbell, {many} processes"),
        ),
    ] {
        let run = listeners(port, n, mode, log());
        if let Mode::Doorbell { .. } = mode {
            register_bells(&mut admin, &run);
        }
        let cost = measure(&server, &mut admin, || std::thread::sleep(dur));
        row(&name, n, &cost);
        let (_, errors, _) = run.finish(&mut admin, matches!(mode, Mode::Doorbell { .. }));
        assert_eq!(errors, 0, "{name}: {errors} queries failed");
        admin.exec("DELETE FROM bells");
    }

    println!(
        "\n(b) stop latency, raise (flag committed) -> listener has read it, {raises} raises on \
         random listeners; ms; q/release = statements the raiser and every listener ran for one raise"
    );
    println!(
        "    {:<44} {:>8} {:>8} {:>8} {:>8} {:>16} {:>12}",
        "", "p50", "p99", "max", "heard", "raise p50/p99", "q/release"
    );
    for (n, mode, name) in [
        (
            few,
            Mode::Poll(Duration::from_secs(1)),
            "tick poll 1 s (baseline)",
        ),
        (
            many,
            Mode::Poll(Duration::from_secs(1)),
            "tick poll 1 s (baseline)",
        ),
        (
            few,
            Mode::Poll(Duration::from_millis(200)),
            "tick poll 200 ms",
        ),
        (
            many,
            Mode::Poll(Duration::from_millis(200)),
            "tick poll 200 ms",
        ),
        (
            few,
            Mode::BellTable(Duration::from_millis(100)),
            "bell table every 100 ms",
        ),
        (
            many,
            Mode::BellTable(Duration::from_millis(100)),
            "bell table every 100 ms",
        ),
        (
            few,
            Mode::Doorbell {
                park: Duration::from_secs(1),
            },
            "parked SLEEP(1) + KILL QUERY",
        ),
        (
            many,
            Mode::Doorbell {
                park: Duration::from_secs(1),
            },
            "parked SLEEP(1) + KILL QUERY",
        ),
    ] {
        let doorbell = matches!(mode, Mode::Doorbell { .. });
        let name = format!("{name}, {n} processes");
        let run = listeners(port, n, mode, log());
        if doorbell {
            register_bells(&mut admin, &run);
        }
        let (raise_ms, statements) = raise_flags(
            port,
            &run,
            n,
            raises,
            Duration::from_millis(100),
            doorbell,
            matches!(mode, Mode::BellTable(_)),
        );
        let (lat, errors, woken) = run.finish(&mut admin, doorbell);
        assert_eq!(errors, 0, "{name}: {errors} queries failed");
        println!(
            "    {name:<44} {:>8.1} {:>8.1} {:>8.1} {:>8} {:>7.2}/{:<8.2} {:>12.2}",
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            lat.last().copied().unwrap_or(f64::NAN),
            format!("{}/{raises}", lat.len()),
            percentile(&raise_ms, 0.5),
            percentile(&raise_ms, 0.99),
            (statements + woken) as f64 / raises as f64,
        );
        admin.exec("DELETE FROM bells");
        admin.exec("DELETE FROM flags WHERE k LIKE 'p%'");
    }

    // (b2), the hand-off through the study's procedures, is gone with
    // them: the shipped backend's hand-off is measured by the core's
    // `my_latency` example (docs/MYSQL.md).

    // Who may ring whom: KILL QUERY of another user's connection needs
    // CONNECTION ADMIN (MariaDB 10.5.2+) or SUPER.
    let mut victim = MariaDbClient::connect(port, "study").expect("connect");
    let mut stranger = MariaDbClient::connect(port, "other").expect("connect");
    let mut same_user = MariaDbClient::connect(port, "study").expect("connect");
    println!("\n(c) privileges: KILL QUERY of a parked connection of user `study`");
    println!(
        "    by user `study` (no PROCESS/CONNECTION ADMIN): {}",
        match same_user.query(&format!("KILL QUERY {}", victim.id())) {
            Ok(_) => "allowed".to_owned(),
            Err(e) => format!("refused ({e})"),
        }
    );
    println!(
        "    by user `other` (no PROCESS/CONNECTION ADMIN): {}",
        match stranger.query(&format!("KILL QUERY {}", victim.id())) {
            Ok(_) => "allowed".to_owned(),
            Err(e) => format!("refused ({e})"),
        }
    );
    let _ = victim.query("SELECT 1");
    println!("\ntotal {:.1} s", t0.elapsed().as_secs_f64());
}

/// Each listener registers its connection id against each key it watches.
fn register_bells(admin: &mut MariaDbClient, run: &Run) {
    let ids = run.ids.lock().unwrap().clone();
    for chunk in ids.chunks(50) {
        let values: Vec<String> = chunk
            .iter()
            .flat_map(|(p, id)| {
                keys_of(*p)
                    .into_iter()
                    .map(move |k| format!("('{k}', {id})"))
            })
            .collect();
        admin.exec(&format!("INSERT INTO bells VALUES {}", values.join(",")));
    }
}
