//! Fencing numbers never go backwards, also when the backend lost its data:
//! a redis-server restarted without persistence, `FLUSHALL`, a counter
//! evicted under a live lease, a Local database file deleted.

mod common;
use common::*;
use mistri_locks::{Error, Locks};
use mistri_locks_testkit::{unique, RedisServer};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Sends one inline command to 127.0.0.1:`port` and returns the raw reply.
fn command(port: u16, line: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(format!("{line}\r\nQUIT\r\n").as_bytes())
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.strip_suffix("+OK\r\n").unwrap_or(&out).to_owned()
}

/// A plain redis-server (no persistence) started on a port that a stopped
/// [`RedisServer`] used: the same address, none of the data.
struct Restarted {
    child: Child,
    dir: PathBuf,
}

impl Restarted {
    fn on_port(port: u16) -> Restarted {
        let dir = std::env::temp_dir().join(unique("mistri-redis-restart"));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server");
        let mut restarted = Restarted { child, dir };
        let start = Instant::now();
        loop {
            let up = TcpStream::connect(("127.0.0.1", port)).is_ok()
                && command(port, "PING").contains("PONG");
            if up {
                return restarted;
            }
            if let Ok(Some(status)) = restarted.child.try_wait() {
                panic!("redis-server on port {port} exited: {status}");
            }
            assert!(start.elapsed() < secs(10.0), "no redis-server on {port}");
            std::thread::sleep(secs(0.01));
        }
    }
}

impl Drop for Restarted {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Acquires `key` and returns its fence, retrying connection errors for a
/// while (the pool still holds connections to a server that went away).
fn fence_of(locks: &Locks, key: &str) -> u64 {
    let start = Instant::now();
    loop {
        match locks.acquire(key, secs(30.0)) {
            Ok(true) => {
                let fence = locks.fence(key).expect("a fence for a held lease");
                assert!(locks.release(key).unwrap());
                return fence;
            }
            Ok(false) => panic!("{key} is held"),
            Err(Error::Connection(e)) if start.elapsed() < secs(10.0) => {
                eprintln!("retrying after: {e}");
                std::thread::sleep(secs(0.05));
            }
            Err(e) => panic!("acquire {key}: {e}"),
        }
    }
}

fn rising(locks: &Locks, key: &str, times: usize, mut last: u64) -> u64 {
    for _ in 0..times {
        let fence = fence_of(locks, key);
        assert!(fence > last, "fence {fence} after {last}");
        last = fence;
    }
    last
}

#[test]
fn redis_fences_rise_across_a_restart_without_persistence() {
    let mut server = RedisServer::start();
    let port = server.port();
    let locks = Locks::redis(&server.url(), "mistri:test").unwrap();
    let before = rising(&locks, "job", 4, 0);
    assert!(before < i64::MAX as u64);
    server.stop();
    let _again = Restarted::on_port(port);
    assert_eq!(command(port, "DBSIZE"), ":0\r\n", "the data is gone");
    let after = fence_of(&locks, "job");
    assert!(
        after > before,
        "fence {after} after {before} before the restart"
    );
    rising(&locks, "job", 3, after);
    // Another key's fences rise on their own, above the clock too.
    assert!(fence_of(&locks, "other") > before);
}

#[test]
fn redis_fences_rise_after_flushall() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:test").unwrap();
    let before = rising(&locks, "job", 4, 0);
    assert_eq!(server.command("FLUSHALL"), "+OK\r\n");
    let after = fence_of(&locks, "job");
    assert!(
        after > before,
        "fence {after} after {before} before FLUSHALL"
    );
}

#[test]
fn redis_counter_lost_under_a_live_lease() {
    // Eviction or a partial replica sync can lose the counter while the
    // lease key lives: the holder keeps its fence, and the next acquire,
    // possible only once that lease is gone, still gets a greater one.
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:test").unwrap();
    rising(&locks, "job", 2, 0);
    assert!(locks.acquire("job", secs(30.0)).unwrap());
    let held = locks.fence("job").unwrap();
    assert_eq!(server.command("DEL mistri:test:fence:{job}"), ":1\r\n");
    let other = locks.new_owner();
    assert!(!other.acquire("job", secs(30.0)).unwrap(), "still held");
    assert!(locks.release("job").unwrap());
    let after = fence_of(&other, "job");
    assert!(after > held, "fence {after} after {held}");
}

#[test]
fn redis_counter_ahead_of_the_clock_keeps_counting() {
    // A counter the clock has not caught up with (another writer, a clock
    // stepped back) still wins: fences rise by one.
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:test").unwrap();
    let ahead: u64 = 1 << 52;
    assert_eq!(
        server.command(&format!("SET mistri:test:fence:{{job}} {ahead}")),
        "+OK\r\n"
    );
    assert_eq!(fence_of(&locks, "job"), ahead + 1);
    assert_eq!(fence_of(&locks, "job"), ahead + 2);
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn local_fences_rise_when_the_database_file_is_deleted() {
    let dir = Dir(std::env::temp_dir().join(unique("mistri-fence-local")));
    let db = dir.0.join("locks.db");
    let before = {
        let locks = Locks::local(Some(&db)).unwrap();
        rising(&locks, "job", 4, 0)
    };
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    assert!(!db.exists());
    let locks = Locks::local(Some(&db)).unwrap();
    let after = fence_of(&locks, "job");
    assert!(
        after > before,
        "fence {after} after {before} in the old file"
    );
    rising(&locks, "job", 3, after);
}

#[test]
fn memory_fences_rise_across_adapters() {
    // One process, but a fresh adapter (a restarted process) still issues
    // greater numbers: the counter is floored by the realtime clock.
    let before = rising(&Locks::memory(), "job", 4, 0);
    let after = fence_of(&Locks::memory(), "job");
    assert!(after > before, "fence {after} after {before}");
}

/// Acquires and releases `key` on `locks` and returns its fence (Memory:
/// no connection to retry).
fn memory_fence(locks: &Locks, key: &str) -> u64 {
    assert!(locks.acquire(key, secs(30.0)).unwrap(), "{key} is held");
    let fence = locks.fence(key).expect("a fence for a held lease");
    assert!(locks.release(key).unwrap());
    fence
}

#[test]
fn memory_fences_rise_across_adapters_while_another_is_contended() {
    // Two threads contend for one adapter's lock (an acquire that waited
    // for the lock must not pair a stale instant with a fresh wall
    // reading); every fresh adapter's first fence is above every fence
    // the contended one issued before it.
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let old = Arc::new(Locks::memory());
    let issued = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let (old, issued, done) = (old.clone(), issued.clone(), done.clone());
            std::thread::spawn(move || {
                let key = format!("job-{t}");
                while !done.load(Ordering::Relaxed) {
                    issued.fetch_max(memory_fence(&old, &key), Ordering::SeqCst);
                }
            })
        })
        .collect();
    let mut failures = Vec::new();
    for round in 0..3000 {
        let before = issued.load(Ordering::SeqCst);
        let first = memory_fence(&Locks::memory(), "job");
        if first <= before {
            failures.push(format!("round {round}: {first} after {before}"));
        }
    }
    done.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        failures.is_empty(),
        "{} fell back: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}

#[test]
fn the_protocol_document_carries_the_exact_acquire_script() {
    let doc = include_str!("../../docs/PROTOCOL.md");
    assert!(
        doc.contains(mistri_locks::internals::ACQUIRE_LUA),
        "docs/PROTOCOL.md must quote ACQUIRE_LUA verbatim"
    );
}

#[test]
fn redis_fence_counters_get_a_long_ttl_and_fences_still_rise_without_them() {
    // A counter idle for 7 days is 7 days below the clock floor: it
    // expires then, and the next fence is the floor, still higher.
    let server = RedisServer::start();
    let port = server.port();
    let locks = Locks::redis(&server.url(), "mistri:test").unwrap();
    let before = rising(&locks, "job", 2, 0);
    let ttl = |key: &str| -> i64 {
        let reply = command(port, &format!("PTTL mistri:test:fence:{{{key}}}"));
        reply.trim().trim_start_matches(':').parse().unwrap()
    };
    let week = 7 * 24 * 3600 * 1000;
    let left = ttl("job");
    assert!(left > week - 60_000 && left <= week, "PTTL {left}");
    // N-holder leases share the counter and refresh it the same way.
    let slot = locks.adapter();
    let who = mistri_locks::Identity::of_process();
    let lease = slot.acquire_limited("slots", secs(5.0), &who, 2).unwrap();
    let left = ttl("slots");
    assert!(left > week - 60_000 && left <= week, "PTTL {left}");
    assert!(slot.release(&lease.unwrap()).unwrap());
    // The counter gone (as when it expires): fences still rise.
    command(port, "DEL mistri:test:fence:{job}");
    rising(&locks, "job", 2, before);
}

#[test]
fn postgres_prunes_fence_rows_far_below_the_clock_floor() {
    use mistri_locks::Postgres;
    use mistri_locks_testkit::PgServer;
    let server = PgServer::start();
    let locks = Locks::new(Postgres::open(&server.url(), "prune").unwrap());
    let kept = fence_of(&locks, "recent");
    // A counter from 8 days ago, no lease: prunable; one with a live lease
    // is not.
    let old = kept - 8 * 24 * 3600 * 1_000_000;
    server.sql(&format!(
        "INSERT INTO mistri_locks.fences VALUES ('prune', 'old', {old}), \
         ('prune', 'held-long', {old})"
    ));
    server.sql(
        "INSERT INTO mistri_locks.leases VALUES ('prune', 'held-long', 't', 1, 1, \
         now() + interval '1 hour', now(), now(), 3600000, 0, 'x')",
    );
    let count = |key: &str| {
        server
            .sql(&format!(
                "SELECT count(*) FROM mistri_locks.fences WHERE ns = 'prune' AND key = '{key}'"
            ))
            .trim()
            .to_owned()
    };
    // The sweep runs with 2 % of acquires: 2,000 make missing it
    // practically impossible (0.98^2000).
    let mut n = 0;
    while count("old") == "1" {
        assert!(n < 2_000, "never swept");
        fence_of(&locks, &format!("k{}", n % 8));
        n += 1;
    }
    assert_eq!(
        count("held-long"),
        "1",
        "a key with a lease keeps its counter"
    );
    assert_eq!(count("recent"), "1");
    assert!(fence_of(&locks, "old") > old);
}

/// The wall clock now, in µs since 1970 (a fence's floor).
fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// The "restarted process" of the next test: prints the first fence a
/// fresh Memory adapter issues. Does nothing unless `MISTRI_TEST_ROLE` is
/// set.
#[test]
fn memory_restarted_process() {
    if std::env::var("MISTRI_TEST_ROLE").as_deref() != Ok("memory-restart") {
        return;
    }
    println!("fence={}", memory_fence(&Locks::memory(), "job"));
}

/// Issue 39, finding 9: a tight loop of acquisitions (a bounded count;
/// above one per µs the counter used to run ahead of the clock: 3.98 s
/// after 7 million in 3 s) leaves its last fence at most 1 ms ahead of
/// the wall clock (a protocol bound: an acquire waits for the clock
/// beyond it), and a new process started after it issues a higher fence.
/// (How far the old code ran ahead depended on the loop's speed: 67 ms in
/// a release build here, while a debug build's loop stays near the clock;
/// `core/src/backend/memory_tests.rs` puts the counter at the bound
/// instead, in any build.)
#[test]
fn memory_fences_rise_across_a_restart_after_a_tight_loop() {
    use mistri_locks::Adapter;
    let memory = mistri_locks::Memory::new();
    let mut last = 0;
    let mut worst = i64::MIN;
    for _ in 0..300_000 {
        let lease = memory.acquire("job", secs(30.0)).unwrap().expect("free");
        assert!(lease.fence() > last, "{} after {last}", lease.fence());
        last = lease.fence();
        assert!(memory.release(&lease).unwrap());
        worst = worst.max(last as i64 - wall_us() as i64);
    }
    println!("300,000 acquisitions: the fence at most {worst} µs ahead of the clock");
    assert!(worst <= 1_000, "a fence {worst} µs ahead of the wall clock");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["memory_restarted_process", "--exact", "--nocapture"])
        .args(["--test-threads=1"])
        .env("MISTRI_TEST_ROLE", "memory-restart")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let first: u64 = text
        .lines()
        .find_map(|l| l.split("fence=").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no fence in: {text}"));
    assert!(first > last, "the new process issued {first} after {last}");
}
