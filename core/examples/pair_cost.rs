//! What an exclusive acquire+release pair costs the Redis server, the
//! scripts of this build next to those before the short path (eaaf124),
//! side by side in one run on one connection: alternating batches, each
//! script's `usec_per_call` read from `INFO commandstats` after a
//! `CONFIG RESETSTAT` (the acquire batch deletes each lease with a plain
//! `DEL`, the release batch sets it with a plain `SET`, so `EVALSHA` is
//! only the script measured).
//!
//! `cargo run --release -p mistri_locks_core --example pair_cost -- 20000`
//! (`MISTRI_BENCH_URL=redis://…` to use a server of your own, e.g. one
//! pinned to another core than this program).
//!
//! `pair_cost --client locks|raw N` instead runs N pairs of one kind only,
//! for a client-side count: `valgrind --tool=callgrind` of N and of 0
//! pairs, the difference divided by N is the client's instructions per
//! pair (`locks`: `Locks::acquire` + `Locks::release`; `raw`: redis-rs
//! `SET NX PX` + a Lua compare-and-delete).
use mistri_locks::internals::{ACQUIRE_LUA, RELEASE_LUA};
use mistri_locks::Locks;
use mistri_locks_testkit::RedisServer;
use redis::{Connection, Script};
use std::time::Duration;

const ROUNDS: usize = 10;

/// The exclusive acquire script before the short path (eaaf124).
const ACQUIRE_BEFORE: &str = "\
local now = redis.call('TIME')
local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
local line = ARGV[5]
local function refuse()
  if line then
    local ms = math.floor(floor / 1000)
    redis.call('ZADD', KEYS[4], 'NX', string.format('%.0f', ms), line)
    redis.call('HSET', KEYS[5], line, string.format('%.0f', ms + tonumber(ARGV[6])))
    redis.call('PEXPIRE', KEYS[4], ARGV[6])
    redis.call('PEXPIRE', KEYS[5], ARGV[6])
  end
  return 0
end
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then
  return refuse()
end
if KEYS[4] and (line or redis.call('EXISTS', KEYS[4]) == 1) then
  local ms = math.floor(floor / 1000)
  while true do
    local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
    if not head or head == line then
      break
    end
    local d = tonumber(redis.call('HGET', KEYS[5], head))
    if d and d > ms then
      return refuse()
    end
    redis.call('ZREM', KEYS[4], head)
    redis.call('HDEL', KEYS[5], head)
  end
end
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
  return refuse()
end
redis.call('SET', KEYS[2], fence)
if line then
  redis.call('ZREM', KEYS[4], line)
  redis.call('HDEL', KEYS[5], line)
end
return tonumber(fence)";

/// The release script before (eaaf124).
const RELEASE_BEFORE: &str = "\
local v = redis.call('GET', KEYS[1])
if v and (v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ' ') then
  local n = redis.call('DEL', KEYS[1])
  if ARGV[2] then
    redis.call('PUBLISH', ARGV[2], ARGV[3] or '0')
  end
  return n
end
return 0";

const KEYS: [&str; 5] = [
    "mistri:locks:lease:{job}",
    "mistri:locks:fence:{job}",
    "mistri:locks:slots:{job}",
    "mistri:locks:queue:{job}",
    "mistri:locks:queued:{job}",
];

/// The server's mean µs per `EVALSHA` since the last reset.
fn usec_per_evalsha(con: &mut Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec_per_call=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

fn reset(con: &mut Connection) {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(con)
        .unwrap();
}

/// `n` acquires as the adapter sends them (5 keys, token, ttl, label,
/// heartbeat), each lease deleted by a plain `DEL`.
fn acquires(con: &mut Connection, script: &Script, n: usize) {
    for i in 0..n {
        let fence: u64 = script
            .key(&KEYS[..])
            .arg(format!("{i:032x}"))
            .arg(30_000)
            .arg("host:1234 bench")
            .arg(1000)
            .invoke(con)
            .unwrap();
        assert!(fence > 0);
        let _: i64 = redis::cmd("DEL").arg(KEYS[0]).query(con).unwrap();
    }
}

/// `n` releases as the adapter sends them (token, channel, fence) of a
/// described lease set by a plain `SET`.
fn releases(con: &mut Connection, script: &Script, n: usize) {
    for i in 0..n {
        let token = format!("{i:032x}");
        let _: () = redis::cmd("SET")
            .arg(KEYS[0])
            .arg(format!(
                "{token} 30000 1764490000000001 1764490000000 1000 host:1234 bench"
            ))
            .arg("PX")
            .arg(30_000)
            .query(con)
            .unwrap();
        let n: i64 = script
            .key(KEYS[0])
            .arg(&token)
            .arg("mistri:locks:released:{job}")
            .arg(1_764_490_000_000_001u64)
            .invoke(con)
            .unwrap();
        assert_eq!(n, 1);
    }
}

fn client(url: &str, kind: &str, n: u64) {
    let ttl = Duration::from_secs(30);
    let locks = Locks::redis(url, "mistri:bench").unwrap();
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let cad = Script::new("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0");
    // The same setup whatever N: connections open, scripts loaded.
    assert!(locks.acquire("bench", ttl).unwrap());
    assert!(locks.release("bench").unwrap());
    let _: i64 = cad.key("raw:bench").arg("t").invoke(&mut con).unwrap();
    for i in 0..n {
        if kind == "locks" {
            assert!(locks.acquire("bench", ttl).unwrap());
            assert!(locks.release("bench").unwrap());
        } else {
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
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let server = match std::env::var("MISTRI_BENCH_URL") {
        Ok(url) => Err(url),
        Err(_) => Ok(RedisServer::start()),
    };
    let url = match &server {
        Ok(s) => s.url(),
        Err(url) => url.clone(),
    };
    if args.first().map(String::as_str) == Some("--client") {
        let n = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
        client(&url, &args[1], n);
        return;
    }
    let n: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let scripts = [
        ("acquire", "before", Script::new(ACQUIRE_BEFORE)),
        ("acquire", "now", Script::new(ACQUIRE_LUA)),
        ("release", "before", Script::new(RELEASE_BEFORE)),
        ("release", "now", Script::new(RELEASE_LUA)),
    ];
    let run = |con: &mut Connection, (op, _, script): &(&str, &str, Script), n| {
        if *op == "acquire" {
            acquires(con, script, n);
        } else {
            releases(con, script, n);
        }
    };
    let _: i64 = redis::cmd("DEL").arg(&KEYS[..]).query(&mut con).unwrap();
    for s in &scripts {
        run(&mut con, s, 500); // warm up, load the scripts
    }
    let batch = n / ROUNDS;
    let mut us = [0.0f64; 4];
    for _ in 0..ROUNDS {
        for (i, s) in scripts.iter().enumerate() {
            reset(&mut con);
            run(&mut con, s, batch);
            us[i] += usec_per_evalsha(&mut con) / ROUNDS as f64;
        }
    }
    println!(
        "redis server µs per call (INFO commandstats), {} of each, alternating batches:",
        batch * ROUNDS
    );
    for (i, (op, when, _)) in scripts.iter().enumerate() {
        println!("  {op} {when:<6} {:6.2}", us[i]);
    }
    println!(
        "  pair    before {:6.2}\n  pair    now    {:6.2}",
        us[0] + us[2],
        us[1] + us[3]
    );
}
