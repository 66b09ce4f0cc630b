//! Acquire+release pairs per second on the Postgres adapter, next to two
//! baselines run in the same process against the same throwaway server.
//! A benchmark (run by `scripts/bench`), not a test.
//!
//! ```sh
//! cargo run --release -p mistri_locks_core --example pg_pairs -- [--port PORT] [--seconds 2]
//! ```
//!
//! Without `--port` it starts its own server (the testkit's `PgServer`).
//! Candidates are measured in interleaved slices; each keeps its best.
//!
//! - ours: `Locks::acquire` + `Locks::release` on [`Postgres`] (two round
//!   trips: the acquire function — fence row locked, expired rows pruned,
//!   the lease row inserted with its fence and holder description — and
//!   the release function, compare-and-delete + announcement).
//! - advisory: `SELECT pg_try_advisory_lock($1)` + `SELECT
//!   pg_advisory_unlock($1)` on one connection (what with_advisory_lock,
//!   django-pglock and DistributedLock.Postgres do): session state, no ttl,
//!   no fence, no owner token beyond the session.
//! - shedlock: a ShedLock-style row lease on one connection: `INSERT ...
//!   ON CONFLICT (name) DO UPDATE ... WHERE lock_until <= clock_timestamp()`
//!   (one row touched = acquired) and ShedLock's unlock, `UPDATE ... SET
//!   lock_until = clock_timestamp() WHERE name = $1 AND locked_by = $2`; a
//!   fresh `locked_by` per pair, as our tokens are.
//! - limit: two `SELECT 1` round trips on one connection, the floor of
//!   any two-round-trip lock over this client.
//!
//! The baselines use the testkit's `PgClient`: the same I/O style as the
//! adapter (a blocking std socket, one write per statement of
//! Parse/Bind/Describe/Execute/Sync on the unnamed statement, text
//! parameters), no pool, no runtime. Prints a table, then `key=value`
//! lines for `scripts/bench`.

use mistri_locks::{Locks, Postgres};
use mistri_locks_testkit::{PgClient, PgServer};
use std::time::{Duration, Instant};

/// Slices per candidate: many short ones, so that on a loaded machine each
/// side gets some quiet ones (the best slice is kept).
const ROUNDS: usize = 15;

/// Pairs/s of `pair` over `seconds`.
fn slice_rate(seconds: f64, pair: &mut dyn FnMut(u64), n: &mut u64) -> f64 {
    let start = Instant::now();
    let first = *n;
    while start.elapsed().as_secs_f64() < seconds {
        for _ in 0..20 {
            pair(*n);
            *n += 1;
        }
    }
    (*n - first) as f64 / start.elapsed().as_secs_f64()
}

/// The candidates in interleaved slices, each keeping its best.
fn compare<const N: usize>(seconds: f64, mut pairs: [&mut dyn FnMut(u64); N]) -> [f64; N] {
    let mut counters = [0u64; N];
    for (pair, n) in pairs.iter_mut().zip(counters.iter_mut()) {
        for _ in 0..100 {
            pair(*n); // warm up
            *n += 1;
        }
    }
    let mut best = [0.0f64; N];
    for _ in 0..ROUNDS {
        for i in 0..N {
            best[i] = best[i].max(slice_rate(
                seconds / ROUNDS as f64,
                pairs[i],
                &mut counters[i],
            ));
        }
    }
    best
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let seconds: f64 = arg("--seconds").map_or(2.0, |s| s.parse().unwrap());
    let own = match arg("--port") {
        Some(_) => None,
        None => Some(PgServer::start()),
    };
    let port: u16 = match &own {
        Some(s) => s.port(),
        None => arg("--port").unwrap().parse().unwrap(),
    };
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let ttl = Duration::from_secs(30);

    let ours = Locks::new(Postgres::open(&url, "mistri:bench").unwrap());
    assert!(!ours.held("bench").unwrap()); // creates the schema

    let mut adv = PgClient::connect(port).unwrap();
    let mut shed = PgClient::connect(port).unwrap();
    shed.simple(
        "DROP TABLE IF EXISTS bench_shedlock; \
         CREATE TABLE bench_shedlock (name varchar(64) PRIMARY KEY, \
           lock_until timestamptz NOT NULL, locked_at timestamptz NOT NULL, \
           locked_by varchar(255) NOT NULL)",
    )
    .unwrap();
    let mut lim = PgClient::connect(port).unwrap();

    // One round trip, for the stop-latency rows.
    let mut rtts = Vec::new();
    for _ in 0..2000.min((seconds * 1000.0) as usize + 50) {
        let t = Instant::now();
        lim.query("SELECT 1", &[]).unwrap();
        rtts.push(t.elapsed().as_secs_f64() * 1e3);
    }
    rtts.sort_by(f64::total_cmp);
    let rtt = rtts[rtts.len() / 2];

    const SHED_LOCK: &str = "INSERT INTO bench_shedlock (name, lock_until, locked_at, locked_by) \
        VALUES ($1, clock_timestamp() + $2::interval, clock_timestamp(), $3) \
        ON CONFLICT (name) DO UPDATE SET lock_until = clock_timestamp() + $2::interval, \
          locked_at = clock_timestamp(), locked_by = $3 \
        WHERE bench_shedlock.lock_until <= clock_timestamp()";
    const SHED_UNLOCK: &str =
        "UPDATE bench_shedlock SET lock_until = clock_timestamp() WHERE name = $1 AND locked_by = $2";

    let [mine, advisory, shedlock, limit] = compare(
        seconds,
        [
            &mut |_| {
                assert!(ours.acquire("bench", ttl).unwrap());
                assert!(ours.release("bench").unwrap());
            },
            &mut |_| {
                let got = adv
                    .query("SELECT pg_try_advisory_lock($1::bigint)", &["7402"])
                    .unwrap();
                assert_eq!(got[0][0].as_deref(), Some("t"));
                let freed = adv
                    .query("SELECT pg_advisory_unlock($1::bigint)", &["7402"])
                    .unwrap();
                assert_eq!(freed[0][0].as_deref(), Some("t"));
            },
            &mut |i| {
                let token = format!("host-{}-{i}", std::process::id());
                let n = shed
                    .execute(SHED_LOCK, &["bench", "30 seconds", &token])
                    .unwrap();
                assert_eq!(n, 1, "ShedLock-style acquire refused");
                let n = shed.execute(SHED_UNLOCK, &["bench", &token]).unwrap();
                assert_eq!(n, 1, "ShedLock-style unlock missed");
            },
            &mut |_| {
                for _ in 0..2 {
                    lim.query("SELECT 1", &[]).unwrap();
                }
            },
        ],
    );

    println!("acquire+release pairs/s on PostgreSQL (best of {ROUNDS} interleaved slices, {seconds} s each in all; one server on 127.0.0.1)");
    println!("baselines: the testkit's PgClient (blocking std socket, one write per statement, unnamed statement, text parameters) - the adapter's I/O style");
    println!("{:<58} {:>10}", "candidate", "pairs/s");
    println!(
        "{:<58} {:>10.0}",
        "postgres (Locks: row lease, fenced, described)", mine
    );
    println!(
        "{:<58} {:>10.0}",
        "pg_try_advisory_lock + pg_advisory_unlock (1 conn)", advisory
    );
    println!(
        "{:<58} {:>10.0}",
        "ShedLock-style upsert + unlock UPDATE (1 conn)", shedlock
    );
    println!("{:<58} {:>10.0}", "limit (2 x SELECT 1, 1 conn)", limit);
    println!("postgres / advisory: {:.2}", mine / advisory);
    println!("postgres / shedlock: {:.2}", mine / shedlock);
    println!("postgres / limit: {:.2}", mine / limit);
    println!("pg_pairs={mine:.0}");
    println!("pg_advisory_pairs={advisory:.0}");
    println!("pg_shedlock_pairs={shedlock:.0}");
    println!("pg_limit_pairs={limit:.0}");
    println!("pg_rtt_ms={rtt:.3}");
}
