//! The MySQL / MariaDB rows of `scripts/bench`: one throwaway MariaDB
//! (the testkit's `MariaDbServer`), every figure beside its baseline on
//! the same server in the same run. A benchmark, not a test.
//!
//! ```text
//! cargo run --release -p mistri_locks_core --example my_bench -- \
//!     [--seconds 2] [--holds 10000] [--scale-seconds 5]
//! ```
//!
//! - pairs: acquire + release through `Locks::open("mysql://…")` (a
//!   `CALL` each, with a fence, a queue and a holder description), against
//!   `SELECT GET_LOCK('k', 0)` + `SELECT RELEASE_LOCK('k')` and a
//!   ShedLock-style pair (`UPDATE … WHERE name = ? AND lock_until <= NOW(3)`,
//!   then the unlock `UPDATE`), each on one connection, one thread.
//! - scale: `--holds` holds in this process (ttl 10 s, heartbeat 1 s, no
//!   stop key), sampled for `--scale-seconds`: round trips per second (the
//!   server's `Com_commit`: each beat is one transaction in one round
//!   trip; nothing else commits meanwhile), statements per second
//!   (`Questions`) and the server's CPU, against ONE hand-written `UPDATE
//!   … WHERE name IN (…)` of as many ShedLock rows per second.
//!
//! Prints `key=value` lines, then a table.

use mistri_locks::{HoldOptions, Locks, OpenOptions};
use mistri_locks_testkit::{MariaDbClient, MariaDbServer};
use std::time::{Duration, Instant};

fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The server's CPU seconds so far (user + system), from /proc.
fn server_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|t| t.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn status(c: &mut MariaDbClient, name: &str) -> f64 {
    c.query(&format!("SHOW GLOBAL STATUS LIKE '{name}'"))
        .ok()
        .and_then(|rows| rows.first()?.get(1)?.clone())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn pairs_per_s(seconds: f64, mut pair: impl FnMut()) -> f64 {
    for _ in 0..20 {
        pair();
    }
    let began = Instant::now();
    let mut n = 0u64;
    while began.elapsed().as_secs_f64() < seconds {
        pair();
        n += 1;
    }
    n as f64 / began.elapsed().as_secs_f64()
}

/// Round trips, statements and server CPU per second over `seconds`.
fn sample(
    c: &mut MariaDbClient,
    pid: u32,
    seconds: f64,
    mut each_second: impl FnMut(),
) -> [f64; 3] {
    let (commits, questions, cpu) = (
        status(c, "Com_commit"),
        status(c, "Questions"),
        server_cpu(pid),
    );
    let began = Instant::now();
    while began.elapsed().as_secs_f64() < seconds {
        each_second();
        let next =
            Duration::from_secs_f64((began.elapsed().as_secs_f64().floor() + 1.0).min(seconds));
        if let Some(wait) = next.checked_sub(began.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    let took = began.elapsed().as_secs_f64();
    // The 2 status reads after the first `Questions` are this client's own.
    [
        (status(c, "Com_commit") - commits) / took,
        (status(c, "Questions") - questions - 2.0) / took,
        (server_cpu(pid) - cpu) / took * 60.0,
    ]
}

fn main() {
    let seconds = arg("--seconds", 2.0);
    let holds = arg("--holds", 10_000.0) as usize;
    let scale_seconds = arg("--scale-seconds", 5.0);
    let server = MariaDbServer::start();
    server.sql(
        "CREATE USER bench@'%'; GRANT ALL ON mistri.* TO bench@'%'; \
         CREATE TABLE shedlock (name VARCHAR(64) NOT NULL PRIMARY KEY, lock_until TIMESTAMP(3) NOT NULL, \
         locked_at TIMESTAMP(3) NOT NULL, locked_by VARCHAR(255) NOT NULL) ENGINE=InnoDB; \
         INSERT INTO shedlock VALUES ('k', NOW(3), NOW(3), 'me')",
    );
    let version = server.sql("SELECT VERSION()");
    let url = server.url();
    let mut kv: Vec<(String, f64)> = Vec::new();

    let locks = Locks::open_with(&url, &OpenOptions::new().namespace("bench")).expect("mysql://");
    let ttl = Duration::from_secs(30);
    kv.push((
        "my_pairs".into(),
        pairs_per_s(seconds, || {
            assert!(locks.acquire("k", ttl).unwrap());
            assert!(locks.release("k").unwrap());
        }),
    ));
    let mut c = MariaDbClient::connect(server.port(), "bench").unwrap();
    kv.push((
        "my_getlock_pairs".into(),
        pairs_per_s(seconds, || {
            let got = c.query("SELECT GET_LOCK('k', 0)").unwrap();
            assert_eq!(got[0][0].as_deref(), Some("1"));
            c.query("SELECT RELEASE_LOCK('k')").unwrap();
        }),
    ));
    kv.push((
        "my_shedlock_pairs".into(),
        pairs_per_s(seconds, || {
            c.query(
                "UPDATE shedlock SET lock_until = NOW(3) + INTERVAL 30 SECOND, locked_at = NOW(3), \
                 locked_by = 'me' WHERE name = 'k' AND lock_until <= NOW(3)",
            )
            .unwrap();
            c.query("UPDATE shedlock SET lock_until = NOW(3) WHERE name = 'k'")
                .unwrap();
        }),
    ));

    if holds > 0 {
        let options = HoldOptions {
            ttl: Duration::from_secs(10),
            heartbeat: Duration::from_secs(1),
            ..HoldOptions::default()
        };
        let began = Instant::now();
        let kept: Vec<_> = (0..holds)
            .map(|i| {
                locks
                    .hold(&format!("scale-{i}"), options.clone())
                    .unwrap()
                    .expect("free")
            })
            .collect();
        let took = began.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_secs(2));
        let mut stat = MariaDbClient::connect(server.port(), "bench").unwrap();
        let [rt, q, cpu] = sample(&mut stat, server.pid(), scale_seconds, || {});
        let lost = kept.iter().filter(|h| h.is_lost()).count();
        drop(kept);
        kv.extend([
            ("my_scale_take_s".into(), took),
            ("my_scale_round_trips_per_s".into(), rt),
            ("my_scale_statements_per_s".into(), q),
            ("my_scale_server_cpu_s_per_min".into(), cpu),
            ("my_scale_lost".into(), lost as f64),
        ]);
        // The baseline: as many ShedLock rows, one UPDATE a second.
        let mut values = Vec::with_capacity(holds);
        let mut names = Vec::with_capacity(holds);
        for i in 0..holds {
            values.push(format!(
                "('s{i}', NOW(3) + INTERVAL 10 SECOND, NOW(3), 'me')"
            ));
            names.push(format!("'s{i}'"));
        }
        c.query(&format!("INSERT INTO shedlock VALUES {}", values.join(",")))
            .unwrap();
        let update = format!(
            "UPDATE shedlock SET lock_until = NOW(3) + INTERVAL 10 SECOND WHERE name IN ({}) AND locked_by = 'me'",
            names.join(",")
        );
        let [rt, q, cpu] = sample(&mut stat, server.pid(), scale_seconds, || {
            c.query(&update).unwrap();
        });
        kv.extend([
            ("my_base_round_trips_per_s".into(), rt.max(q)),
            ("my_base_statements_per_s".into(), q),
            ("my_base_server_cpu_s_per_min".into(), cpu),
        ]);
    }

    for (k, v) in &kv {
        println!("{k}={v:.3}");
    }
    let get = |k: &str| kv.iter().find(|(n, _)| n == k).map_or(0.0, |(_, v)| *v);
    println!("\nMySQL rows: one MariaDB {version} on loopback, same server, same run");
    let pairs = get("my_pairs");
    for (base, name) in [
        ("my_getlock_pairs", "GET_LOCK + RELEASE_LOCK, 1 conn"),
        (
            "my_shedlock_pairs",
            "ShedLock-style UPDATE + unlock UPDATE, 1 conn",
        ),
    ] {
        println!(
            "  acquire+release pairs/s  {pairs:>9.0}  vs {name}: {:>9.0}  ratio {:.2} (goal >= 0.5 vs GET_LOCK)",
            get(base),
            pairs / get(base).max(1e-9)
        );
    }
    if holds > 0 {
        println!(
            "  {holds} holds, hb 1 s: round trips/s {:.2} (goal 1), statements/s {:.1}, server CPU {:.2} s/min, lost {}  vs 1 hand-written UPDATE/s: statements/s {:.1}, server CPU {:.2} s/min",
            get("my_scale_round_trips_per_s"),
            get("my_scale_statements_per_s"),
            get("my_scale_server_cpu_s_per_min"),
            get("my_scale_lost"),
            get("my_base_statements_per_s"),
            get("my_base_server_cpu_s_per_min"),
        );
    }
}
