//! What the waiters' queue costs the exclusive acquire when nobody waits,
//! side by side in one run on one connection to a fresh redis-server:
//! the acquire script before the queue (as of de0ec49, 3 keys), and the
//! current one with the queue keys given (5 keys, no line id: one
//! `EXISTS` of the missing queue key). Alternating batches; each acquire
//! is followed by a plain `DEL` (not a script), so the server's
//! `usec_per_call` of `EVALSHA` (`INFO commandstats`) is the acquire's.
//!
//! `cargo run --release -p mistri_locks_core --example queue_cost -- 20000`
use mistri_locks::internals::ACQUIRE_LUA;
use mistri_locks_testkit::RedisServer;
use redis::{Connection, Script};
use std::time::{Duration, Instant};

const ROUNDS: usize = 10;

/// The exclusive acquire script before the queue (de0ec49).
const BEFORE_LUA: &str = "\
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then
  return 0
end
local now = redis.call('TIME')
local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
local fence = (tonumber(redis.call('GET', KEYS[2])) or 0) + 1
if floor > fence then
  fence = floor
end
fence = string.format('%.0f', fence)
local value = ARGV[1]
if ARGV[3] then
  value = table.concat({ARGV[1], ARGV[2], fence, string.format('%.0f', math.floor(floor / 1000)),
    ARGV[4] or '0', ARGV[3]}, ' ')
end
if not redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
  return 0
end
redis.call('SET', KEYS[2], fence)
return tonumber(fence)
";

/// `pairs` acquires (each followed by a `DEL` of the lease) with the
/// first `keys` keys.
fn pairs(con: &mut Connection, acquire: &Script, keys: usize, pairs: usize) {
    let ns = "bench";
    let all = [
        format!("{ns}:lease:{{job}}"),
        format!("{ns}:fence:{{job}}"),
        format!("{ns}:slots:{{job}}"),
        format!("{ns}:queue:{{job}}"),
        format!("{ns}:queued:{{job}}"),
    ];
    for i in 0..pairs {
        let fence: u64 = acquire
            .key(&all[..keys])
            .arg(format!("token-{i}"))
            .arg(5000)
            .arg("bench")
            .arg(0)
            .invoke(con)
            .unwrap();
        assert!(fence > 0);
        let n: i64 = redis::cmd("DEL").arg(&all[0]).query(con).unwrap();
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

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let server = RedisServer::start();
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let scripts = [
        ("before the queue  (3 keys)", Script::new(BEFORE_LUA), 3),
        ("with the queue    (5 keys)", Script::new(ACQUIRE_LUA), 5),
    ];
    for (_, script, keys) in &scripts {
        pairs(&mut con, script, *keys, 1000); // warm up, load scripts
    }
    let batch = n / ROUNDS;
    let mut time = [Duration::ZERO; 2];
    let mut server_us = [0.0f64; 2];
    for _ in 0..ROUNDS {
        for (i, (_, script, keys)) in scripts.iter().enumerate() {
            redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query::<()>(&mut con)
                .unwrap();
            let t = Instant::now();
            pairs(&mut con, script, *keys, batch);
            time[i] += t.elapsed();
            server_us[i] += usec_per_evalsha(&mut con) / ROUNDS as f64;
        }
    }
    let per = |d: Duration| d.as_secs_f64() * 1e6 / (batch * ROUNDS) as f64;
    println!(
        "redis, {} exclusive acquires (+ DEL) each, nobody waiting, alternating batches:",
        batch * ROUNDS
    );
    for (i, (name, _, _)) in scripts.iter().enumerate() {
        println!(
            "  {name}: {:6.1} µs/acquire+DEL client, {:5.2} µs/acquire server",
            per(time[i]),
            server_us[i]
        );
    }
}
