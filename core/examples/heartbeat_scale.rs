//! Heartbeat at scale: N holds in this process on Redis or Postgres at a
//! 1 s heartbeat. A benchmark (run by `scripts/bench`), not a test.
//!
//! ```sh
//! cargo run --release -p mistri_locks_core --example heartbeat_scale -- \
//!     --redis redis://127.0.0.1:6379/0 --holds 10000 [--seconds 20] [--threads] [--tag NAME]
//! cargo run --release -p mistri_locks_core --example heartbeat_scale -- \
//!     --postgres postgres://postgres@127.0.0.1:5432/postgres [--server-pid PID] \
//!     --holds 10000 [--sql-renewer] [--tag NAME]
//! ```
//!
//! On Postgres the server-side counts come from the statistics views (row
//! updates of the lease tables in `pg_stat_user_tables`: a renewal updates
//! its row; and `pg_stat_database.xact_commit`: every statement is its own
//! transaction), read with the testkit's `PgClient`;
//! with `--server-pid` (the postmaster) the server's CPU (postmaster and
//! backends, from /proc) is sampled too. `--sql-renewer` is the Postgres
//! baseline: N rows of a ShedLock-style table renewed by ONE hand-written
//! `UPDATE ... WHERE name = ANY($1) AND locked_by = $2` per second on one
//! connection (no engine, no stop flags, no deadlines).
//!
//! Default mode: N holds through one [`Locks`] (ttl 10 s, heartbeat 1 s, no
//! stop key: renewals only, like the pipelined renewer it is compared with),
//! taken by 4 threads as fast as the server allows (so they are spread over
//! ~N × 0.1 ms, not taken at one instant). `--threads`: the seed-style
//! baseline, one thread per lease that sleeps to the next second and renews
//! it with one compare-and-renew round trip.
//!
//! After a 2 s settle, it samples `--seconds` seconds and prints
//! `key=value` lines: the process's threads (and how many are heartbeat
//! threads), heartbeat batches per second as the adapter saw them (a batch
//! is one pipelined round trip), renewal commands per second from the
//! server's `INFO commandstats`, process CPU seconds per minute (user +
//! system, from `/proc/self/stat`), RSS (MB), and how many leases are still
//! held at the end.

use mistri_locks::{
    Adapter, Beat, FlagWatch, FlagWatcher, HoldOptions, Identity, Lease, LeaseInfo, Listing, Locks,
    Postgres, Redis, Renewal, Renewed, Result,
};
use mistri_locks_testkit::PgClient;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// The adapter, counting the engine's batches (round trips).
struct Counted {
    inner: Box<dyn Adapter>,
    beats: Arc<AtomicU64>,
}

impl Adapter for Counted {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn io_timeout(&self) -> Duration {
        self.inner.io_timeout()
    }
    fn acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lease>> {
        self.inner.acquire(key, ttl)
    }
    fn acquire_as(&self, key: &str, ttl: Duration, who: &Identity) -> Result<Option<Lease>> {
        self.inner.acquire_as(key, ttl, who)
    }
    fn info(&self, key: &str) -> Result<Option<LeaseInfo>> {
        self.inner.info(key)
    }
    fn list(&self, prefix: &str) -> Result<Listing> {
        self.inner.list(prefix)
    }
    fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool> {
        self.inner.renew(lease, ttl)
    }
    fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease)
    }
    fn release_by(&self, lease: &Lease, deadline: Instant) -> Result<bool> {
        self.inner.release_by(lease, deadline)
    }
    fn held(&self, key: &str) -> Result<bool> {
        self.inner.held(key)
    }
    fn break_lease(&self, key: &str) -> Result<bool> {
        self.inner.break_lease(key)
    }
    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()> {
        self.inner.set_flag(key, ttl)
    }
    fn flag(&self, key: &str) -> Result<bool> {
        self.inner.flag(key)
    }
    fn clear_flag(&self, key: &str) -> Result<()> {
        self.inner.clear_flag(key)
    }
    fn watch_flags(&self, watcher: Weak<dyn FlagWatcher>) -> Option<FlagWatch> {
        self.inner.watch_flags(watcher)
    }
    fn renew_within(&self, renewal: &Renewal<'_>) -> Result<Renewed> {
        self.inner.renew_within(renewal)
    }
    fn beat(&self, renewals: &[Renewal<'_>], flags: &[&str], deadline: Instant) -> Result<Beat> {
        self.beats.fetch_add(1, Ordering::Relaxed);
        let t = Instant::now();
        let r = self.inner.beat(renewals, flags, deadline);
        if std::env::var_os("SCALE_TRACE").is_some() {
            eprintln!(
                "beat at {:?}: {} renewals in {:?}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis()
                    % 100_000,
                renewals.len(),
                t.elapsed()
            );
        }
        r
    }
}

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name (which may hold spaces) end with ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 here.
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

/// `(all threads, heartbeat threads)` of this process.
fn threads() -> (usize, usize) {
    let mut all = 0;
    let mut beat = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        all += 1;
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.starts_with("mistri-heartbea") {
            beat += 1;
        }
    }
    (all, beat)
}

/// Where the server-side counts come from.
enum Server {
    Redis(redis::Connection),
    Postgres { port: u16, pid: Option<i32> },
}

impl Server {
    /// Renewals the server has run so far.
    fn renewals(&mut self) -> f64 {
        match self {
            Server::Redis(con) => server_renewals(con),
            // Row updates of the lease tables: a renewal updates its row
            // (whether by the schema's `renew` function or the heartbeat's
            // set-based UPDATE); acquires insert.
            Server::Postgres { port, .. } => pg_stat(
                *port,
                "SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables \
                 WHERE relname IN ('leases', 'scale_shedlock')",
            ),
        }
    }

    /// Statements (transactions) the server has committed so far
    /// (Postgres only).
    fn statements(&mut self) -> f64 {
        match self {
            Server::Redis(_) => 0.0,
            Server::Postgres { port, .. } => pg_stat(
                *port,
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
            ),
        }
    }

    /// CPU seconds of the server's processes (Postgres with a pid).
    fn cpu(&self) -> Option<f64> {
        match self {
            Server::Postgres { pid: Some(pid), .. } => Some(server_cpu_seconds(*pid)),
            _ => None,
        }
    }
}

/// A statistics counter, read on a fresh connection (stats are flushed by
/// the backends at most once a second; the window is long enough).
fn pg_stat(port: u16, sql: &str) -> f64 {
    let mut c = PgClient::connect(port).expect("stats connection");
    c.value(sql)
        .expect("stats query")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// utime + stime of `pid` and its children, in seconds.
fn server_cpu_seconds(pid: i32) -> f64 {
    let ticks = |stat: &str| -> Option<(i32, f64)> {
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ppid: i32 = f[1].parse().ok()?;
        Some((
            ppid,
            f[11].parse::<f64>().ok()? + f[12].parse::<f64>().ok()?,
        ))
    };
    let mut total = 0.0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((ppid, t)) = ticks(&stat) {
            if p == pid || ppid == pid {
                total += t;
            }
        }
    }
    // SAFETY: sysconf has no preconditions.
    total / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// The port of a `postgres://…@host:PORT/…` URL.
fn pg_port(url: &str) -> u16 {
    let authority = url.split("://").nth(1).unwrap().split('/').next().unwrap();
    let hostport = authority.rsplit('@').next().unwrap();
    hostport
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .expect("a port in the URL")
}

/// The baseline on Postgres: `n` ShedLock-style rows renewed by one
/// hand-written statement per second on one connection. Returns the
/// thread, which stops at `stop` and reports whether every renewal touched
/// all `n` rows.
fn sql_renewer(
    port: u16,
    n: usize,
    heartbeat: Duration,
    stop: Arc<AtomicBool>,
    beats: Arc<AtomicU64>,
) -> std::thread::JoinHandle<bool> {
    let mut c = PgClient::connect(port).unwrap();
    c.simple(
        "DROP TABLE IF EXISTS scale_shedlock; \
         CREATE TABLE scale_shedlock (name varchar(64) PRIMARY KEY, \
           lock_until timestamptz NOT NULL, locked_at timestamptz NOT NULL, \
           locked_by varchar(255) NOT NULL)",
    )
    .unwrap();
    let me = format!("renewer-{}", std::process::id());
    let names: Vec<String> = (0..n).map(|i| format!("hold-{i}")).collect();
    for chunk in names.chunks(1000) {
        let array = format!("{{{}}}", chunk.join(","));
        c.query(
            "INSERT INTO scale_shedlock SELECT x, clock_timestamp() + interval '10 s', clock_timestamp(), $2 FROM unnest($1::text[]) x",
            &[&array, &me],
        )
        .unwrap();
    }
    let array = format!("{{{}}}", names.join(","));
    std::thread::spawn(move || {
        let mut next = Instant::now() + heartbeat;
        let mut ok = true;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            next += heartbeat;
            beats.fetch_add(1, Ordering::Relaxed);
            let touched = c
                .execute(
                    "UPDATE scale_shedlock SET lock_until = clock_timestamp() + interval '10 s' \
                     WHERE name = ANY($1::text[]) AND locked_by = $2",
                    &[&array, &me],
                )
                .unwrap_or(0);
            ok = ok && touched == n as u64;
        }
        ok
    })
}

/// Calls of renewal-carrying commands (`evalsha`, `eval`) so far.
fn server_renewals(con: &mut redis::Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<f64>()
                .ok()
        })
        .sum()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let pg_url = arg("--postgres");
    let url = pg_url
        .clone()
        .or_else(|| arg("--redis"))
        .expect("--redis URL or --postgres URL");
    let sql_renew = args.iter().any(|a| a == "--sql-renewer");
    let n: usize = arg("--holds").map_or(1000, |s| s.parse().unwrap());
    let seconds: f64 = arg("--seconds").map_or(20.0, |s| s.parse().unwrap());
    let per_thread = args.iter().any(|a| a == "--threads");
    let tag = arg("--tag").unwrap_or_else(|| format!("scale_{n}"));
    let ttl = Duration::from_secs(10);
    let heartbeat = Duration::from_secs(1);
    let namespace = format!("mistri:scale:{}", std::process::id());

    let mut server = match &pg_url {
        Some(u) => Server::Postgres {
            port: pg_port(u),
            pid: arg("--server-pid").map(|p| p.parse().unwrap()),
        },
        None => Server::Redis(
            redis::Client::open(url.as_str())
                .unwrap()
                .get_connection()
                .unwrap(),
        ),
    };
    let beats = Arc::new(AtomicU64::new(0));
    let inner: Box<dyn Adapter> = match &pg_url {
        Some(u) => Box::new(Postgres::open(u, &namespace).unwrap()),
        None => Box::new(Redis::open(&url, &namespace).unwrap()),
    };
    let adapter: Arc<dyn Adapter> = Arc::new(Counted {
        inner,
        beats: beats.clone(),
    });
    let locks = Locks::from_arc(adapter.clone());
    let acquirers = 4;

    let stop = Arc::new(AtomicBool::new(false));
    let kept = Arc::new(AtomicU64::new(0));
    let mut holds = Vec::new();
    let mut workers = Vec::new();
    let t0 = Instant::now();
    let mut renewer = None;
    if sql_renew {
        let Server::Postgres { port, .. } = &server else {
            panic!("--sql-renewer is a Postgres baseline: give --postgres URL");
        };
        renewer = Some(sql_renewer(
            *port,
            n,
            heartbeat,
            stop.clone(),
            beats.clone(),
        ));
    } else if per_thread {
        let ready = Arc::new(AtomicU64::new(0));
        for i in 0..n {
            let (adapter, stop, kept, ready) =
                (adapter.clone(), stop.clone(), kept.clone(), ready.clone());
            workers.push(
                std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let lease = adapter.acquire(&format!("hold-{i}"), ttl).unwrap().unwrap();
                        ready.fetch_add(1, Ordering::SeqCst);
                        let mut next = Instant::now() + heartbeat;
                        let mut ok = true;
                        while !stop.load(Ordering::Relaxed) {
                            std::thread::sleep(next.saturating_duration_since(Instant::now()));
                            next += heartbeat;
                            ok = adapter.renew(&lease, ttl).unwrap_or(false) && ok;
                        }
                        if ok && adapter.renew(&lease, ttl).unwrap_or(false) {
                            kept.fetch_add(1, Ordering::SeqCst);
                        }
                        let _ = adapter.release(&lease);
                    })
                    .unwrap(),
            );
        }
        while ready.load(Ordering::SeqCst) < n as u64 {
            std::thread::sleep(Duration::from_millis(10));
        }
    } else {
        let opts = HoldOptions {
            ttl,
            heartbeat,
            ..HoldOptions::default()
        };
        holds = std::thread::scope(|s| {
            let parts: Vec<_> = (0..acquirers)
                .map(|t| {
                    let (locks, opts) = (&locks, &opts);
                    s.spawn(move || {
                        (t..n)
                            .step_by(acquirers)
                            .map(|i| {
                                locks
                                    .hold(&format!("hold-{i}"), opts.clone())
                                    .unwrap()
                                    .unwrap()
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            parts.into_iter().flat_map(|p| p.join().unwrap()).collect()
        });
    }
    let taken = t0.elapsed().as_secs_f64();
    let rss_taken = rss_mb();
    std::thread::sleep(Duration::from_secs(2));

    // The server's CPU first: the statistics reads open connections of
    // their own, whose start-up is not the heartbeat's cost.
    let scpu0 = server.cpu();
    let (cpu0, beats0, ren0, st0, w0) = (
        cpu_seconds(),
        beats.load(Ordering::Relaxed),
        server.renewals(),
        server.statements(),
        Instant::now(),
    );
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let scpu1 = server.cpu();
    let (cpu1, beats1, ren1, st1, window) = (
        cpu_seconds(),
        beats.load(Ordering::Relaxed),
        server.renewals(),
        server.statements(),
        w0.elapsed().as_secs_f64(),
    );
    let rss = rss_mb();
    let (all_threads, beat_threads) = threads();

    if let Some(r) = renewer {
        stop.store(true, Ordering::SeqCst);
        if r.join().unwrap() {
            kept.store(n as u64, Ordering::SeqCst);
        }
    } else if per_thread {
        stop.store(true, Ordering::SeqCst);
        for w in workers {
            w.join().unwrap();
        }
    } else {
        let alive = holds.iter().filter(|h| !h.is_lost()).count();
        kept.store(alive as u64, Ordering::SeqCst);
        for h in &holds {
            let _ = h.release();
        }
    }
    let beat_rate = if per_thread {
        // Every renewal is its own round trip.
        (ren1 - ren0) / window
    } else {
        (beats1 - beats0) as f64 / window
    };
    println!("{tag}_holds={n}");
    println!("{tag}_taken_s={taken:.2}");
    println!("{tag}_window_s={window:.1}");
    println!("{tag}_threads={all_threads}");
    println!(
        "{tag}_beat_threads={}",
        if per_thread { n } else { beat_threads }
    );
    println!("{tag}_round_trips_per_s={beat_rate:.2}");
    println!("{tag}_renewals_per_s={:.0}", (ren1 - ren0) / window);
    println!("{tag}_cpu_s_per_min={:.3}", (cpu1 - cpu0) / window * 60.0);
    println!("{tag}_rss_mb={rss:.1}");
    println!("{tag}_rss_taken_mb={rss_taken:.1}");
    println!("{tag}_kept={}", kept.load(Ordering::SeqCst));
    if pg_url.is_some() {
        println!("{tag}_server_statements_per_s={:.2}", (st1 - st0) / window);
        if let (Some(a), Some(b)) = (scpu0, scpu1) {
            println!("{tag}_server_cpu_s_per_min={:.3}", (b - a) / window * 60.0);
        }
    }
}
