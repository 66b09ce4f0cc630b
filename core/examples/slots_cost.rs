//! What N-holder leases cost the exclusive acquire, side by side in one run.
//!
//! - Redis: the exclusive acquire script refuses while `{ns}:slots:{KEY}`
//!   exists (its `KEYS[3]`, one `EXISTS` inside the script). The same
//!   script with 2 keys skips that check: both forms, alternating batches
//!   on one connection to a fresh redis-server, each acquire followed by
//!   its release; client-side time per pair, and the server's own
//!   `usec_per_call` of `EVALSHA` (`INFO commandstats`).
//! - Memory: exclusive acquire + release pairs with no N-holder lease in
//!   the store, and with 1,000 live ones on other keys.
//!
//! `cargo run --release -p mistri_locks_core --example slots_cost -- 20000`
use mistri_locks::internals::{ACQUIRE_LUA, RELEASE_LUA};
use mistri_locks::{Adapter, Identity, Memory};
use mistri_locks_testkit::RedisServer;
use redis::{Connection, Script};
use std::time::{Duration, Instant};

const ROUNDS: usize = 10;

/// `pairs` exclusive acquire + release pairs with `keys` keys given to the
/// acquire script (2: no slots check; 3: with it).
fn pairs(con: &mut Connection, acquire: &Script, release: &Script, keys: usize, pairs: usize) {
    let ns = "bench";
    let all = [
        format!("{ns}:lease:{{job}}"),
        format!("{ns}:fence:{{job}}"),
        format!("{ns}:slots:{{job}}"),
    ];
    for i in 0..pairs {
        let token = format!("token-{i}");
        let fence: u64 = acquire
            .key(&all[..keys])
            .arg(&token)
            .arg(5000)
            .arg("bench")
            .arg(0)
            .invoke(con)
            .unwrap();
        assert!(fence > 0);
        let n: i64 = release.key(&all[0]).arg(&token).invoke(con).unwrap();
        assert_eq!(n, 1);
    }
}

/// The server's mean µs per `EVALSHA` since the last reset.
fn usec_per_evalsha(con: &mut Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec_per_call=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

fn redis_rows(n: usize) {
    let server = RedisServer::start();
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let (acquire, release) = (Script::new(ACQUIRE_LUA), Script::new(RELEASE_LUA));
    pairs(&mut con, &acquire, &release, 3, 1000); // warm up, load scripts
    let batch = n / ROUNDS;
    let mut time = [Duration::ZERO; 2];
    let mut server_us = [0.0f64; 2];
    for _ in 0..ROUNDS {
        for (i, keys) in [2usize, 3].into_iter().enumerate() {
            redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query::<()>(&mut con)
                .unwrap();
            let t = Instant::now();
            pairs(&mut con, &acquire, &release, keys, batch);
            time[i] += t.elapsed();
            server_us[i] += usec_per_evalsha(&mut con) / ROUNDS as f64;
        }
    }
    let per = |d: Duration| d.as_secs_f64() * 1e6 / (batch * ROUNDS) as f64;
    println!(
        "redis, {} acquire+release pairs each, alternating batches:",
        batch * ROUNDS
    );
    println!(
        "  without the slots check (2 keys): {:6.1} µs/pair client, {:5.2} µs/EVALSHA server",
        per(time[0]),
        server_us[0]
    );
    println!(
        "  with the slots check    (3 keys): {:6.1} µs/pair client, {:5.2} µs/EVALSHA server",
        per(time[1]),
        server_us[1]
    );
}

fn memory_rows(n: usize) {
    let who = Identity::of_process();
    let ttl = Duration::from_secs(60);
    let run = |m: &Memory| {
        let t = Instant::now();
        for _ in 0..n {
            let lease = m.acquire_as("job", ttl, &who).unwrap().unwrap();
            assert!(m.release(&lease).unwrap());
        }
        t.elapsed().as_secs_f64() * 1e9 / n as f64
    };
    let plain = Memory::new();
    let busy = Memory::new();
    for i in 0..1000 {
        busy.acquire_limited(&format!("sem-{i}"), ttl, &who, 3)
            .unwrap()
            .unwrap();
    }
    let (mut a, mut b) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        a = a.min(run(&plain));
        b = b.min(run(&busy));
    }
    println!("memory, {n} exclusive acquire+release pairs, best of 5:");
    println!("  no N-holder lease in the store:        {a:6.0} ns/pair");
    println!("  1,000 live N-holder leases, other keys: {b:6.0} ns/pair");
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    memory_rows(n * 10);
    redis_rows(n);
}
