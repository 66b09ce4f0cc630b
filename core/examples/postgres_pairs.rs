//! The Postgres backend's costs on a throwaway server on loopback, beside
//! baselines run in the same script by `pgbench` (C, one connection, the
//! extended protocol): acquire + release pairs/s against
//! `pg_try_advisory_lock` + `pg_advisory_unlock` and against a
//! ShedLock-style row-lease upsert; and one heartbeat tick (one
//! statement) at N holds. A benchmark, not a test.
//!
//! ```sh
//! cargo run --release -p mistri_locks_core --example postgres_pairs -- [SECONDS] [HOLDS]
//! ```

use mistri_locks::{Adapter, Postgres, Renewal};
use mistri_locks_testkit::{pg_bindir, PgServer};
use std::process::Command;
use std::time::{Duration, Instant};

fn pgbench(server: &PgServer, name: &str, script: &str, seconds: u64) -> String {
    let dir = std::env::temp_dir().join(mistri_locks_testkit::unique("pgbench"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join(format!("{name}.sql"));
    std::fs::write(&file, script).expect("script");
    let out = Command::new(pg_bindir().join("pgbench"))
        .args(["-n", "-M", "extended", "-c", "1", "-T"])
        .arg(seconds.to_string())
        .arg("-f")
        .arg(&file)
        .args(["-h", "127.0.0.1", "-p"])
        .arg(server.port().to_string())
        .args(["-U", "postgres", "postgres"])
        .output()
        .expect("pgbench runs");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.starts_with("tps"))
        .map(|l| l.split_whitespace().nth(2).unwrap_or("?").to_owned())
        .unwrap_or_else(|| format!("failed: {}", String::from_utf8_lossy(&out.stderr)))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().map_or(Ok(3), |s| s.parse())?;
    let holds: usize = args.next().map_or(Ok(10_000), |s| s.parse())?;
    let server = PgServer::start();
    let pg = Postgres::open(&server.url(), "bench")?;
    let ttl = Duration::from_secs(30);
    for _ in 0..200 {
        let l = pg.acquire("pairs", ttl)?.expect("free");
        pg.release(&l)?;
    }
    let start = Instant::now();
    let mut pairs = 0u64;
    while start.elapsed() < Duration::from_secs(seconds) {
        let l = pg.acquire("pairs", ttl)?.expect("free");
        pg.release(&l)?;
        pairs += 1;
    }
    let rate = pairs as f64 / start.elapsed().as_secs_f64();
    println!("mistri_locks acquire+release pairs/s: {rate:.0}");
    let advisory = pgbench(
        &server,
        "advisory",
        "SELECT pg_try_advisory_lock(42);\nSELECT pg_advisory_unlock(42);\n",
        seconds,
    );
    println!("pg_try_advisory_lock+pg_advisory_unlock pairs/s (pgbench): {advisory}");
    server.sql(
        "CREATE TABLE IF NOT EXISTS shedlock (name text PRIMARY KEY, lock_until timestamptz, \
         locked_at timestamptz, locked_by text)",
    );
    let shedlock = pgbench(
        &server,
        "shedlock",
        "INSERT INTO shedlock VALUES ('job', now() + interval '30 s', now(), 'me') \
         ON CONFLICT (name) DO UPDATE SET lock_until = EXCLUDED.lock_until, \
         locked_at = EXCLUDED.locked_at, locked_by = EXCLUDED.locked_by \
         WHERE shedlock.lock_until <= now();\n\
         UPDATE shedlock SET lock_until = now() WHERE name = 'job' AND locked_by = 'me';\n",
        seconds,
    );
    println!("ShedLock-style upsert+unlock pairs/s (pgbench): {shedlock}");

    // One heartbeat tick at `holds` holds (half of them watching a flag).
    let leases: Vec<_> = (0..holds)
        .map(|i| {
            pg.acquire(&format!("hold:{i}"), ttl)
                .map(|l| l.expect("free"))
        })
        .collect::<Result<_, _>>()?;
    let renewals: Vec<Renewal<'_>> = leases
        .iter()
        .map(|lease| Renewal {
            lease,
            ttl,
            min_left: Duration::from_secs(1),
        })
        .collect();
    let flags: Vec<String> = (0..holds / 2).map(|i| format!("stop:{i}")).collect();
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let beat = pg.beat(
            &renewals,
            &flag_refs,
            Instant::now() + Duration::from_secs(30),
        )?;
        best = best.min(t.elapsed());
        assert!(beat.renewals.iter().all(|r| r.is_ok()));
    }
    println!(
        "heartbeat tick, {holds} renewals + {} flags in ONE statement: best {:.1} ms",
        flags.len(),
        best.as_secs_f64() * 1000.0
    );
    Ok(())
}
