//! Push delivery of stop flags (`core/src/push.rs`): a stop raised by
//! another process reaches a holder with a long heartbeat well within a
//! tick, on Redis (pub/sub) and on Local (the inotify doorbell); a flag
//! raised without an announcement is still seen within a tick; a restarted
//! server is re-subscribed; a forked child listens on a connection of its
//! own. The test binary re-executes itself as the raising process: `child`
//! does nothing unless `MISTRI_TEST_ROLE` is set.

mod common;
use common::*;
use mistri_locks::Locks;
use mistri_locks_testkit::{unique, RedisServer};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A stop must arrive within this, whatever the (5 s) heartbeat says.
const PUSHED: Duration = Duration::from_millis(500);

/// The raising process's entry point.
#[test]
fn child() {
    let Ok(role) = std::env::var("MISTRI_TEST_ROLE") else {
        return;
    };
    let target = std::env::var("MISTRI_TEST_TARGET").unwrap();
    let key = std::env::var("MISTRI_TEST_KEY").unwrap();
    let locks = match role.as_str() {
        "raise-redis" => Locks::redis(&target, "mistri:push").unwrap(),
        "raise-local" => Locks::local(Some(&PathBuf::from(target))).unwrap(),
        other => panic!("unknown role {other}"),
    };
    let at = mono_ns();
    locks.set_flag(&key, secs(60.0)).unwrap();
    eprintln!("raised-at {at}");
}

/// Raises `key` from another process; when it was raised (`mono_ns`).
fn raise_elsewhere(role: &str, target: &str, key: &str) -> i64 {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env("MISTRI_TEST_ROLE", role)
        .env("MISTRI_TEST_TARGET", target)
        .env("MISTRI_TEST_KEY", key)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "raising process failed: {text}");
    text.lines()
        .find_map(|l| l.strip_prefix("raised-at "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no raise time in {text}"))
}

/// Waits for the hold's signal and returns when it tripped (`mono_ns`).
fn told_at(hold: &mistri_locks::Hold, within: Duration) -> i64 {
    assert!(
        hold.signal().wait(Some(within)),
        "not stopped within {within:?}"
    );
    let at = mono_ns();
    let reason = hold.signal().reason().unwrap_or_default();
    assert!(reason.starts_with("stop flag"), "{reason}");
    at
}

fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// Connections subscribed to anything on `server` (listeners: one per
/// process and adapter). Since per-key subscriptions, never by pattern.
fn numpat(server: &RedisServer) -> i64 {
    let list = server.command("CLIENT LIST");
    let clients = || list.lines().filter(|l| l.contains(" sub="));
    assert!(
        clients().all(|l| l.contains(" psub=0 ")),
        "a pattern subscription: {list}"
    );
    clients().filter(|l| !l.contains(" sub=0 ")).count() as i64
}

/// Subscribers of `channel` on `server`.
fn numsub(server: &RedisServer, channel: &str) -> i64 {
    let out = server.command(&format!("PUBSUB NUMSUB {channel}"));
    // The raw reply: `*2`, the channel, then `:N`.
    out.lines()
        .filter_map(|l| l.trim().strip_prefix(':'))
        .next_back()
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1)
}

fn wait_numsub(server: &RedisServer, channel: &str, n: i64) {
    let start = Instant::now();
    while numsub(server, channel) != n {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "never {n} subscribers of {channel}: {}",
            server.command("CLIENT LIST")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn wait_numpat(server: &RedisServer, n: i64) {
    let start = Instant::now();
    while numpat(server) != n {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "never {n} subscriptions: {}",
            server.command("CLIENT LIST")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn redis_stop_from_another_process_arrives_within_milliseconds() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:push").unwrap();
    let stop = unique("stop");
    let hold = locks
        .hold(&unique("job"), stop_opts(&stop))
        .unwrap()
        .unwrap();
    // A second hold on another stop key shares the one connection.
    let other = locks
        .hold(&unique("job"), stop_opts(&unique("stop")))
        .unwrap()
        .unwrap();
    wait_numpat(&server, 1);
    wait_numsub(&server, &format!("mistri:push:raised:{{{stop}}}"), 1);
    let raised = raise_elsewhere("raise-redis", &server.url(), &stop);
    let told = told_at(&hold, secs(3.0));
    println!("redis: stop -> signal {:.2} ms", ms(told - raised));
    assert!(told - raised < PUSHED.as_nanos() as i64);
    assert!(!other.signal().is_aborted(), "another key's hold tripped");
    assert_eq!(numpat(&server), 1, "one listening connection per adapter");
}

#[test]
fn redis_flag_set_without_publish_is_seen_within_a_tick() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:push").unwrap();
    let stop = unique("stop");
    // Heartbeat 5 s: the tick is 1 s.
    let hold = locks
        .hold(&unique("job"), stop_opts(&stop))
        .unwrap()
        .unwrap();
    wait_numpat(&server, 1);
    std::thread::sleep(Duration::from_millis(100)); // past its first read
    let start = Instant::now();
    // As redis-cli or an old client would: no PUBLISH.
    server.command(&format!("SET mistri:push:flag:{{{stop}}} 1 PX 60000"));
    assert!(
        hold.signal().wait(Some(secs(1.6))),
        "not seen within a tick"
    );
    println!("redis, raw SET: seen after {:?}", start.elapsed());
    assert!(hold.signal().reason().unwrap().starts_with("stop flag"));
}

/// A stop raised as the hold starts (within its first
/// `SUBSCRIBE_AFTER`, before its key is asked of the listener) is heard:
/// once the subscription is confirmed (its read covers the gap), at the
/// latest at the tick poll (1 s here). Then the key is subscribed like
/// any other: a later stop of a second hold arrives by push.
#[test]
fn redis_stop_raised_as_the_hold_starts_is_heard() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:push").unwrap();
    let stop = unique("stop");
    let hold = locks
        .hold(&unique("job"), stop_opts(&stop))
        .unwrap()
        .unwrap();
    let start = Instant::now();
    locks.set_flag(&stop, secs(60.0)).unwrap();
    // The protocol's floor is the tick (1 s): 1.6 s leaves the room the
    // tick test above leaves for a busy machine.
    assert!(
        hold.signal().wait(Some(secs(1.6))),
        "not heard within a tick"
    );
    println!(
        "redis, stop at the start: heard after {:?}",
        start.elapsed()
    );
    assert!(hold.signal().reason().unwrap().starts_with("stop flag"));
    // Its key is subscribed (the hold lived past SUBSCRIBE_AFTER).
    let later = unique("stop");
    let other = locks
        .hold(&unique("job"), stop_opts(&later))
        .unwrap()
        .unwrap();
    wait_numsub(&server, &format!("mistri:push:raised:{{{later}}}"), 1);
    let raised = raise_elsewhere("raise-redis", &server.url(), &later);
    let told = told_at(&other, secs(3.0));
    assert!(told - raised < PUSHED.as_nanos() as i64);
}

#[test]
fn redis_restart_resubscribes_and_later_stops_arrive() {
    let mut server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:push").unwrap();
    let stop = unique("stop");
    let hold = locks
        .hold(&unique("job"), stop_opts(&stop))
        .unwrap()
        .unwrap();
    wait_numpat(&server, 1);
    server.restart();
    let back = Instant::now();
    wait_numpat(&server, 1);
    wait_numsub(&server, &format!("mistri:push:raised:{{{stop}}}"), 1);
    println!("re-subscribed {:?} after the restart", back.elapsed());
    // The empty server lost the lease too; the next renewal (5 s) would
    // say so. The stop comes first.
    let raised = raise_elsewhere("raise-redis", &server.url(), &stop);
    let told = told_at(&hold, secs(3.0));
    println!("after restart: stop -> signal {:.2} ms", ms(told - raised));
    assert!(told - raised < PUSHED.as_nanos() as i64);
}

#[test]
fn redis_listener_closes_when_nobody_watches() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:push").unwrap();
    let hold = locks
        .hold(&unique("job"), stop_opts(&unique("stop")))
        .unwrap()
        .unwrap();
    wait_numpat(&server, 1);
    hold.release().unwrap();
    // The engine retires after IDLE_EXIT, the listener a second later.
    let start = Instant::now();
    while numpat(&server) != 0 {
        assert!(start.elapsed() < secs(6.0), "the subscription stayed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn local_stop_from_another_process_arrives_within_milliseconds() {
    let dir = std::env::temp_dir().join(unique("mistri-push"));
    let db = dir.join("locks.db");
    let locks = Locks::local(Some(&db)).unwrap();
    let stop = unique("stop");
    let hold = locks
        .hold(&unique("job"), stop_opts(&stop))
        .unwrap()
        .unwrap();
    let other = locks
        .hold(&unique("job"), stop_opts(&unique("stop")))
        .unwrap()
        .unwrap();
    let mut worst = 0;
    let raised = raise_elsewhere("raise-local", db.to_str().unwrap(), &stop);
    let told = told_at(&hold, secs(3.0));
    worst = worst.max(told - raised);
    println!("local: stop -> signal {:.2} ms", ms(told - raised));
    assert!(!other.signal().is_aborted(), "another key's hold tripped");
    // A flag written behind the doorbell's back (an old client): a tick.
    let stop2 = unique("stop");
    let quiet = locks
        .hold(&unique("job"), stop_opts(&stop2))
        .unwrap()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100)); // past its first read
    let start = Instant::now();
    raise_without_doorbell(&db, &stop2);
    assert!(
        quiet.signal().wait(Some(secs(1.6))),
        "not seen within a tick"
    );
    println!("local, no doorbell: seen after {:?}", start.elapsed());
    assert!(
        start.elapsed() > Duration::from_millis(300),
        "rung after all?"
    );
    assert!(worst < PUSHED.as_nanos() as i64);
    drop((hold, other, quiet));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Raises `key` on the database at `db` the way a client without the
/// doorbell would: a plain row (`docs/PROTOCOL.md`, Local), no ring.
fn raise_without_doorbell(db: &std::path::Path, key: &str) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    let expires = (ts.tv_sec + 60) * 1_000_000_000 + ts.tv_nsec;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let con = rusqlite::Connection::open(db).unwrap();
    con.busy_timeout(Duration::from_secs(5)).unwrap();
    con.execute(
        "INSERT OR REPLACE INTO flags (key, expires_ns, boot) VALUES (?1, ?2, ?3)",
        rusqlite::params![key, expires, boot.trim()],
    )
    .unwrap();
}

#[test]
fn a_forked_child_listens_on_its_own_connection() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:push").unwrap();
    let stop = unique("stop");
    let hold = locks
        .hold(&unique("job"), stop_opts(&stop))
        .unwrap()
        .unwrap();
    wait_numpat(&server, 1);

    let child_stop = unique("stop");
    let (mut ready_r, mut ready_w) = pipe();
    // SAFETY: the child only uses the library (fork-aware) and then _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: alarm and _exit take no pointers.
        unsafe { libc::alarm(10) };
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mine = locks
                .hold(&unique("child-job"), stop_opts(&child_stop))
                .unwrap()
                .unwrap();
            use std::io::Write;
            ready_w.write_all(b"r").unwrap();
            let start = Instant::now();
            if !mine.signal().wait(Some(secs(3.0))) {
                return 2;
            }
            if start.elapsed() > secs(2.0) {
                return 3;
            }
            0
        }))
        .unwrap_or(99);
        // SAFETY: as above.
        unsafe { libc::_exit(code) };
    }
    drop(ready_w);
    use std::io::Read;
    let mut byte = [0u8; 1];
    ready_r.read_exact(&mut byte).unwrap();
    // The child subscribed on a connection of its own.
    wait_numpat(&server, 2);
    wait_numsub(&server, &format!("mistri:push:raised:{{{child_stop}}}"), 1);
    let sent = Instant::now();
    locks.set_flag(&child_stop, secs(60.0)).unwrap();
    let mut status = 0;
    // SAFETY: valid out-pointer; our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "child died: {status}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "child not stopped in time");
    println!("child stopped {:?} after the raise", sent.elapsed());
    // The child's exit did not take the parent's subscription with it.
    wait_numpat(&server, 1);
    let sent = Instant::now();
    locks.set_flag(&stop, secs(60.0)).unwrap();
    assert!(hold.signal().wait(Some(PUSHED)), "parent no longer pushed");
    println!("parent stopped {:?} after the raise", sent.elapsed());
}

fn pipe() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just created and are owned here only.
    unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    }
}

/// After a quiet spell (no new interest for `HOT_FOR`, so the listener
/// sits in a `COLD_SLICE` read that redis-rs cannot cut short), a hold on
/// a new stop key that lives past `SUBSCRIBE_AFTER` rings the listener's
/// own channel: its key is subscribed at once, and a stop raised right
/// after the subscription was asked is heard within a few round trips,
/// not at the end of the slice (before the bell: about 400 ms here).
fn a_new_key_reaches_a_cold_listener_at_once(
    locks: &Locks,
    ns: &str,
    master: &dyn Fn(&str) -> String,
) {
    use mistri_locks::internals::{COLD_SLICE, HOT_FOR, SUBSCRIBE_AFTER};
    // A long hold keeps the listener running.
    let keeper = unique("stop");
    let _keep = locks
        .hold(&unique("job"), stop_opts(&keeper))
        .unwrap()
        .unwrap();
    let channel = format!("{ns}:raised:{{{keeper}}}");
    let waited = Instant::now();
    while !master(&format!("PUBSUB NUMSUB {channel}")).contains(":1") {
        assert!(waited.elapsed() < secs(5.0), "the keeper never subscribed");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The quiet spell: past HOT_FOR, and a fifth into the cold read.
    std::thread::sleep(HOT_FOR + COLD_SLICE / 5);
    let stop = unique("stop");
    let hold = locks
        .hold(&unique("job"), stop_opts(&stop))
        .unwrap()
        .unwrap();
    // The engine asks for the subscription once the hold is
    // SUBSCRIBE_AFTER old (its scheduler keeps that pace: up to two).
    std::thread::sleep(SUBSCRIBE_AFTER * 2);
    let raised = Instant::now();
    locks.set_flag(&stop, secs(60.0)).unwrap();
    assert!(hold.signal().wait(Some(secs(3.0))), "not heard");
    let heard = raised.elapsed();
    println!("a new key after a quiet spell, stop heard after {heard:?}");
    assert!(hold.signal().reason().unwrap().starts_with("stop flag"));
    assert!(
        heard < COLD_SLICE / 2,
        "heard after {heard:?}: the listener was not woken (COLD_SLICE {COLD_SLICE:?})"
    );
}

#[test]
fn redis_new_key_reaches_a_cold_listener_at_once() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:push").unwrap();
    a_new_key_reaches_a_cold_listener_at_once(&locks, "mistri:push", &|line| server.command(line));
    // One subscribed connection still (the bell's ringer subscribes none).
    assert_eq!(numpat(&server), 1);
}

#[test]
fn sentinel_new_key_reaches_a_cold_listener_at_once() {
    let set = mistri_locks_testkit::RedisSentinels::start_with(1);
    let locks = Locks::redis(&set.url(), "mistri:push").unwrap();
    a_new_key_reaches_a_cold_listener_at_once(&locks, "mistri:push", &|line| {
        set.command(set.master_port(), line)
    });
}

/// The bell's own connection killed (as a server that closes idle
/// clients would): the listener's next `PING` (every `PING_EVERY`) finds
/// it gone and opens another, and a new key after a quiet spell again
/// reaches the listener at once.
#[test]
fn redis_bell_comes_back_after_its_connection_is_killed() {
    use mistri_locks::internals::{LISTENER_IDLE, PING_EVERY};
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:push").unwrap();
    let first = unique("stop");
    let _first = locks
        .hold(&unique("job"), stop_opts(&first))
        .unwrap()
        .unwrap();
    wait_numsub(&server, &format!("mistri:push:raised:{{{first}}}"), 1);
    let list = server.command("CLIENT LIST");
    let id = list
        .lines()
        .find(|l| l.contains(" name=mistri-bell "))
        .and_then(|l| l.split_whitespace().find_map(|f| f.strip_prefix("id=")))
        .unwrap_or_else(|| panic!("no mistri-bell connection: {list}"))
        .to_owned();
    assert!(server
        .command(&format!("CLIENT KILL ID {id}"))
        .contains(":1"));
    // The listener pings within PING_EVERY of its start, plus one idle check.
    std::thread::sleep(PING_EVERY + LISTENER_IDLE * 3 / 2);
    a_new_key_reaches_a_cold_listener_at_once(&locks, "mistri:push", &|line| server.command(line));
}

/// A user whose ACL names the key channels only cannot subscribe the
/// listener's bell: the listener runs without it (a new key after a
/// quiet spell then waits for the slice, as before), and stops still
/// arrive by push.
#[test]
fn redis_listener_without_its_bell_channel_still_listens() {
    let server = RedisServer::start();
    let ok =
        server.command("ACL SETUSER limited on >pw ~* resetchannels &mistri:push:raised:* +@all");
    assert!(ok.contains("OK"), "{ok}");
    let url = server.url().replace("redis://", "redis://limited:pw@");
    let locks = Locks::redis(&url, "mistri:push").unwrap();
    let stop = unique("stop");
    let hold = locks
        .hold(&unique("job"), stop_opts(&stop))
        .unwrap()
        .unwrap();
    wait_numsub(&server, &format!("mistri:push:raised:{{{stop}}}"), 1);
    let raised = raise_elsewhere("raise-redis", &server.url(), &stop);
    let told = told_at(&hold, secs(3.0));
    assert!(told - raised < PUSHED.as_nanos() as i64);
}
