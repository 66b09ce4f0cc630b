//! Acquire+release pairs per second, each backend next to a baseline run in
//! the same process against the same throwaway redis-server.
//!
//! Run: `cargo run --release -p mistri_locks_core --example bench [seconds]`
//!
//! - memory: `Locks::acquire` + `Locks::release` on the in-process backend.
//! - local: the same on the SQLite-file backend (WAL, synchronous=NORMAL).
//! - redis: the same on the Redis backend (2 round trips: the acquire script,
//!   SET NX PX + INCR of the fence, and the compare-and-delete script).
//! - raw baseline: the same client crate on one connection, one
//!   `SET key token NX PX` and one Lua compare-and-delete (EVALSHA) per pair,
//!   no pool, no fencing: the floor of any 2-round-trip lock.

use mistri_locks::Locks;
use mistri_locks_testkit::RedisServer;
use std::time::{Duration, Instant};

fn rate(seconds: f64, mut pair: impl FnMut(u64)) -> f64 {
    // warm up
    for i in 0..200 {
        pair(i);
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        for _ in 0..100 {
            pair(n);
            n += 1;
        }
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let ttl = Duration::from_secs(30);
    let server = RedisServer::start();

    let memory = Locks::memory();
    let mem = rate(seconds, |_| {
        assert!(memory.acquire("bench", ttl).unwrap());
        assert!(memory.release("bench").unwrap());
    });

    let dir = std::env::temp_dir().join(format!("mistri-bench-{}", std::process::id()));
    let local = Locks::local(Some(&dir.join("locks.db"))).unwrap();
    let loc = rate(seconds, |_| {
        assert!(local.acquire("bench", ttl).unwrap());
        assert!(local.release("bench").unwrap());
    });
    let _ = std::fs::remove_dir_all(&dir);

    let redis = Locks::redis(&server.url(), "mistri:bench").unwrap();
    let red = rate(seconds, |_| {
        assert!(redis.acquire("bench", ttl).unwrap());
        assert!(redis.release("bench").unwrap());
    });

    let client = redis::Client::open(server.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let cad = redis::Script::new(mistri_locks::redis::RELEASE_LUA);
    let raw = rate(seconds, |i| {
        let token = format!("token-{i}");
        let ok: Option<String> = redis::cmd("SET")
            .arg("raw:bench")
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query(&mut con)
            .unwrap();
        assert!(ok.is_some());
        let deleted: i64 = cad.key("raw:bench").arg(&token).invoke(&mut con).unwrap();
        assert_eq!(deleted, 1);
    });

    println!("acquire+release pairs/s ({seconds} s each, one redis-server on 127.0.0.1)");
    println!("{:<44} {:>12}", "backend", "pairs/s");
    println!("{:<44} {:>12.0}", "memory (Locks)", mem);
    println!("{:<44} {:>12.0}", "local (Locks, SQLite WAL file)", loc);
    println!("{:<44} {:>12.0}", "redis (Locks, pooled, fenced)", red);
    println!(
        "{:<44} {:>12.0}",
        "raw baseline (SET NX PX + Lua CAD, 1 conn)", raw
    );
    println!("redis / raw baseline: {:.2}", red / raw);
}
