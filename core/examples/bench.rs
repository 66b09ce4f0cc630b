//! Acquire+release pairs per second, each backend next to a baseline run in
//! the same process against the same throwaway redis-server.
//!
//! Run: `cargo run --release -p mistri_locks_core --example bench [seconds]`
//! (candidates are measured in interleaved slices; each keeps its best).
//! `scripts/bench` runs it against its own server (`MISTRI_BENCH_URL`) and
//! reads the `key=value` lines printed at the end.
//!
//! - memory: `Locks::acquire` + `Locks::release` on the in-process backend.
//! - local: the same on the SQLite-file backend (WAL, synchronous=NORMAL).
//! - redis: the same on the Redis backend (2 round trips: the acquire script,
//!   `SET NX PX` of the described lease + the fence counter, and the
//!   release script, compare-and-delete + announcement).
//! - raw baseline: the same client crate on one connection, one
//!   `SET key token NX PX` and one Lua compare-and-delete (EVALSHA) per pair,
//!   no pool, no fencing: the floor of any 2-round-trip lock.
//! - limit: two prepacked `SET NX PX` round trips on a held key (refused by
//!   the server at once), the redis-benchmark `-c 1` figure measured in
//!   this process, slice for slice like the others (`scripts/bench`'s
//!   redis-benchmark runs are averages over a whole run, while each
//!   candidate here keeps its best slice).

use mistri_locks::Locks;
use mistri_locks_testkit::RedisServer;
use redis::ConnectionLike;
use std::time::{Duration, Instant};

/// The raw baseline's release: the classic compare-and-delete (fixed here,
/// so the baseline does not move with this project's release script).
const CAD_LUA: &str = "\
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

/// Slices per candidate: many short ones, so that on a loaded machine each
/// side gets some quiet ones (the best slice is kept).
const ROUNDS: usize = 15;

/// Pairs/s of `pair` over `seconds`.
fn slice_rate(seconds: f64, pair: &mut dyn FnMut(u64), n: &mut u64) -> f64 {
    let start = Instant::now();
    let first = *n;
    while start.elapsed().as_secs_f64() < seconds {
        for _ in 0..100 {
            pair(*n);
            *n += 1;
        }
    }
    (*n - first) as f64 / start.elapsed().as_secs_f64()
}

/// Measures the candidates in interleaved slices ([`ROUNDS`] rounds, `seconds` per
/// candidate in all) and keeps each one's best slice, so a burst of load on
/// the machine hits every candidate alike.
fn compare<const N: usize>(seconds: f64, mut pairs: [&mut dyn FnMut(u64); N]) -> [f64; N] {
    let mut counters = [0u64; N];
    for (pair, n) in pairs.iter_mut().zip(counters.iter_mut()) {
        for _ in 0..200 {
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
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let ttl = Duration::from_secs(30);
    // scripts/bench passes its own (pinned) server.
    let server = match std::env::var("MISTRI_BENCH_URL") {
        Ok(url) => Err(url),
        Err(_) => Ok(RedisServer::start()),
    };
    let url = match &server {
        Ok(s) => s.url(),
        Err(url) => url.clone(),
    };

    let memory = Locks::memory();
    let dir = std::env::temp_dir().join(format!("mistri-bench-{}", std::process::id()));
    let local = Locks::local(Some(&dir.join("locks.db"))).unwrap();
    let redis = Locks::redis(&url, "mistri:bench").unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut con = client.get_connection().unwrap();
    let cad = redis::Script::new(CAD_LUA);

    // The limit, in this process: what redis-benchmark -c 1 measures (a
    // prepacked `SET NX PX` on a held key: the server refuses it at once),
    // two per pair.
    let mut lim_con = client.get_connection().unwrap();
    let setnx = redis::cmd("SET")
        .arg("limit:bench")
        .arg("x")
        .arg("NX")
        .arg("PX")
        .arg(600_000)
        .get_packed_command();
    let _ = lim_con.req_packed_command(&setnx).unwrap();

    let [mem, loc, red, raw, lim] = compare(
        seconds,
        [
            &mut |_| {
                assert!(memory.acquire("bench", ttl).unwrap());
                assert!(memory.release("bench").unwrap());
            },
            &mut |_| {
                assert!(local.acquire("bench", ttl).unwrap());
                assert!(local.release("bench").unwrap());
            },
            &mut |_| {
                assert!(redis.acquire("bench", ttl).unwrap());
                assert!(redis.release("bench").unwrap());
            },
            &mut |i| {
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
            },
            &mut |_| {
                for _ in 0..2 {
                    let reply = lim_con.req_packed_command(&setnx).unwrap();
                    assert_eq!(reply, redis::Value::Nil);
                }
            },
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);

    println!("acquire+release pairs/s (best of {ROUNDS} interleaved slices, {seconds} s each in all; one redis-server on 127.0.0.1)");
    println!("{:<44} {:>12}", "backend", "pairs/s");
    println!("{:<44} {:>12.0}", "memory (Locks)", mem);
    println!("{:<44} {:>12.0}", "local (Locks, SQLite WAL file)", loc);
    println!("{:<44} {:>12.0}", "redis (Locks, pooled, fenced)", red);
    println!(
        "{:<44} {:>12.0}",
        "raw baseline (SET NX PX + Lua CAD, 1 conn)", raw
    );
    println!(
        "{:<44} {:>12.0}",
        "limit (2 x prepacked SET NX PX, 1 conn)", lim
    );
    println!("redis / raw baseline: {:.2}", red / raw);
    println!("redis / limit (in process): {:.2}", red / lim);
    println!("rust_memory_pairs={mem:.0}");
    println!("rust_local_pairs={loc:.0}");
    println!("rust_redis_pairs={red:.0}");
    println!("rust_raw_pairs={raw:.0}");
    println!("rust_limit_pairs={lim:.0}");
}
