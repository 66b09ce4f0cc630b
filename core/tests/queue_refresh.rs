//! A waiting line's queue entry is short-lived and refreshed
//! (`docs/PROTOCOL.md`, "Waiting"): it lives [`QUEUE_ENTRY_TTL`] after the
//! line's last try, and a queued line's head tries at least every
//! [`QUEUE_REFRESH`], on Redis, Local and PostgreSQL (real servers from the
//! testkit; the waiting line is this test binary re-executed with
//! `MISTRI_TEST_ROLE`).
//!
//! - A live line that waits long (the lease has 30 s left, so its timers
//!   alone would try every [`mistri_locks::SAFETY_POLL`], beyond the
//!   entry's ttl) keeps a live entry the whole time, and gets the lease
//!   when it is released.
//! - A frozen line (SIGSTOP; on Local SIGKILL: a process stopped inside
//!   a write transaction would hold the database's lock, its busy timeout
//!   for everyone) at the head of the queue blocks a free lease only until
//!   its entry lapses: a waiter here gets it within [`QUEUE_ENTRY_TTL`] +
//!   [`QUEUE_REFRESH`] of the freeze (its own next refreshing try), plus
//!   [`SLACK`] for that try itself. Before, the entry lived 6 s.

mod common;
use common::*;
use mistri_locks::{AcquireOptions, Locks, QUEUE_ENTRY_TTL, QUEUE_REFRESH};
use mistri_locks_testkit::{unique, PgServer, RedisServer};
use std::io::{BufReader, Lines};
use std::path::PathBuf;
use std::process::{Child, ChildStderr};
use std::time::{Duration, Instant};

/// What one try may take on top of the protocol's times: the I/O timeout
/// the waiter here is opened with (Redis, PostgreSQL; Local's tries wait
/// for no server).
const SLACK: Duration = Duration::from_secs(1);

/// The waiter here: Redis and PostgreSQL with the I/O timeout [`SLACK`].
fn open_here(target: &str) -> Locks {
    if target.starts_with('/') {
        return Locks::open(target).unwrap();
    }
    let options = mistri_locks::OpenOptions::default().io_timeout(SLACK);
    Locks::open_with(target, &options).unwrap()
}

fn waiting(wait: Duration) -> AcquireOptions {
    AcquireOptions {
        wait: Some(wait),
        ..AcquireOptions::default()
    }
}

/// The waiting process's entry point (does nothing unless re-executed).
#[test]
fn child() {
    let Ok(target) = std::env::var("MISTRI_TEST_ROLE") else {
        return;
    };
    let key = std::env::var("MISTRI_TEST_KEY").unwrap();
    let locks = Locks::open(&target).unwrap();
    eprintln!("ready");
    let got = locks
        .acquire_with(&key, secs(30.0), &waiting(secs(60.0)))
        .unwrap();
    eprintln!("acquired {got}");
}

/// A waiting process, killed when dropped.
struct Waiter {
    child: Child,
    said: Lines<BufReader<ChildStderr>>,
}

impl Waiter {
    fn start(target: &str, key: &str) -> Waiter {
        let (child, said) =
            spawn_ready_child(&[("MISTRI_TEST_ROLE", target), ("MISTRI_TEST_KEY", key)]);
        Waiter { child, said }
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    }

    /// Stops it, and returns once every thread of it is stopped (kill(2)
    /// returns before a thread running on another core has stopped: it
    /// could still hear the release and take the lease). Up to 20 s.
    fn freeze(&self) {
        self.signal(libc::SIGSTOP);
        let tasks = format!("/proc/{}/task", self.child.id());
        let end = Instant::now() + secs(20.0);
        loop {
            let stopped = std::fs::read_dir(&tasks).unwrap().flatten().all(|t| {
                let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                // "pid (comm) S ...": the state follows the last ')'.
                let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
                matches!(state, Some(Some('T' | 't')))
            });
            if stopped {
                return;
            }
            assert!(Instant::now() < end, "the waiting process never stopped");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Its verdict: the line it printed last ("acquired true").
    fn verdict(mut self) -> String {
        let got = self
            .said
            .by_ref()
            .map_while(Result::ok)
            .find(|l| l.starts_with("acquired "))
            .unwrap_or_default();
        let _ = self.child.wait();
        got
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where a test reads the backend's queue of lines.
enum Queue<'a> {
    Redis(String),
    Local(PathBuf),
    Postgres(&'a PgServer),
}

/// `CLOCK_BOOTTIME` in ns, Local's clock.
fn boottime_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

impl Queue<'_> {
    /// How many live entries (deadline ahead, by the backend's clock) the
    /// queue of `key` has.
    fn live(&self, key: &str) -> i64 {
        match self {
            Queue::Redis(url) => {
                let mut con = ::redis::Client::open(url.as_str())
                    .unwrap()
                    .get_connection()
                    .unwrap();
                let (s, us): (i64, i64) = ::redis::cmd("TIME").query(&mut con).unwrap();
                let now_ms = s * 1000 + us / 1000;
                let deadlines: Vec<(String, i64)> = ::redis::cmd("HGETALL")
                    .arg(format!("mistri:locks:queued:{{{key}}}"))
                    .query(&mut con)
                    .unwrap();
                deadlines.iter().filter(|(_, d)| *d > now_ms).count() as i64
            }
            Queue::Local(path) => rusqlite::Connection::open(path)
                .unwrap()
                .query_row(
                    "SELECT count(*) FROM queue WHERE key = ?1 AND expires_ns > ?2",
                    rusqlite::params![key, boottime_ns()],
                    |r| r.get(0),
                )
                .unwrap(),
            Queue::Postgres(server) => server
                .sql(&format!(
                    "SELECT count(*) FROM mistri_locks.queue WHERE key = '{key}' \
                     AND deadline > clock_timestamp()"
                ))
                .trim()
                .parse()
                .unwrap(),
        }
    }

    /// Waits (up to 20 s, for a process to start on a busy machine) until
    /// `key` has one live entry.
    fn wait_for_one(&self, key: &str) {
        let end = Instant::now() + secs(20.0);
        while self.live(key) != 1 {
            assert!(Instant::now() < end, "no line ever queued for {key}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The lease is held 30 s; a waiting process's line stays live for 3 x
/// the entry's ttl, then gets the lease at its release.
fn a_live_line_keeps_its_entry(name: &str, target: &str, queue: &Queue) {
    let locks = Locks::open(target).unwrap();
    let key = unique("long");
    assert!(locks.acquire(&key, secs(30.0)).unwrap());
    let waiter = Waiter::start(target, &key);
    queue.wait_for_one(&key);
    let end = Instant::now() + QUEUE_ENTRY_TTL * 3;
    let mut looks = 0;
    while Instant::now() < end {
        assert_eq!(
            queue.live(&key),
            1,
            "{name}: the waiting line's entry lapsed after {looks} looks"
        );
        looks += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its entry refuses a plain acquire of the free lease; its line gets it.
    assert!(locks.release(&key).unwrap());
    assert!(!locks.new_owner().acquire(&key, secs(30.0)).unwrap());
    assert_eq!(waiter.verdict(), "acquired true", "{name}");
    println!("{name}: the line's entry stayed live over {looks} looks");
}

/// A waiting process at the head of the queue is frozen; the lease is
/// released: a waiter here gets it once the frozen line's entry lapses.
fn a_frozen_line_blocks_only_until_its_entry_lapses(name: &str, target: &str, queue: &Queue) {
    let locks = open_here(target);
    let key = unique("frozen");
    assert!(locks.acquire(&key, secs(30.0)).unwrap());
    let mut waiter = Waiter::start(target, &key);
    queue.wait_for_one(&key);
    let local = matches!(queue, Queue::Local(_));
    if local {
        // Gone (and its locks with it) before the release.
        waiter.signal(libc::SIGKILL);
        let _ = waiter.child.wait();
    } else {
        waiter.freeze();
    }
    let frozen = Instant::now();
    assert!(locks.release(&key).unwrap());
    // While its entry is live, the free lease is not for a plain acquire.
    let barged = locks.new_owner().acquire(&key, secs(30.0)).unwrap();
    let live_after = queue.live(&key);
    assert!(
        !barged || live_after == 0,
        "{name}: a plain acquire took the lease while a live line was queued"
    );
    if barged {
        println!("{name}: (the machine was slow: the entry had lapsed already)");
        return;
    }
    let other = locks.new_owner();
    assert!(other
        .acquire_with(&key, secs(30.0), &waiting(QUEUE_ENTRY_TTL * 4))
        .unwrap());
    let took = frozen.elapsed();
    println!("{name}: the frozen line held the free lease back {took:?}");
    let bound = QUEUE_ENTRY_TTL + QUEUE_REFRESH + SLACK;
    assert!(took <= bound, "{name}: {took:?}, beyond {bound:?}");
    if !local {
        waiter.signal(libc::SIGCONT);
    }
    drop(waiter);
}

#[test]
fn a_live_line_keeps_its_entry_redis() {
    let server = RedisServer::start();
    let queue = Queue::Redis(server.url());
    a_live_line_keeps_its_entry("redis", &server.url(), &queue);
}

#[test]
fn a_live_line_keeps_its_entry_local() {
    let path = temp_db("queue-refresh", "live");
    let queue = Queue::Local(path.clone());
    a_live_line_keeps_its_entry("local", path.to_str().unwrap(), &queue);
}

#[test]
fn a_live_line_keeps_its_entry_postgres() {
    let server = PgServer::start();
    let queue = Queue::Postgres(&server);
    a_live_line_keeps_its_entry("postgres", &server.url(), &queue);
}

#[test]
fn a_frozen_line_blocks_only_until_its_entry_lapses_redis() {
    let server = RedisServer::start();
    let queue = Queue::Redis(server.url());
    a_frozen_line_blocks_only_until_its_entry_lapses("redis", &server.url(), &queue);
}

#[test]
fn a_frozen_line_blocks_only_until_its_entry_lapses_local() {
    let path = temp_db("queue-refresh", "frozen");
    let queue = Queue::Local(path.clone());
    a_frozen_line_blocks_only_until_its_entry_lapses("local", path.to_str().unwrap(), &queue);
}

#[test]
fn a_frozen_line_blocks_only_until_its_entry_lapses_postgres() {
    let server = PgServer::start();
    let queue = Queue::Postgres(&server);
    a_frozen_line_blocks_only_until_its_entry_lapses("postgres", &server.url(), &queue);
}
