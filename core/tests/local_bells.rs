//! The Local backend's doorbells per key bucket (`core/src/local.rs`,
//! module header): a raise or a release wakes only the listeners that
//! watch that flag's bucket or whose waiting line is next for that key,
//! and a listener's inotify watches follow its interests.
//!
//! The tests count what a listener tells its watchers (a counting
//! [`FlagWatcher`] registered through the public `Adapter::watch_flags`)
//! and order their checks by the kernel's event order instead of sleeping:
//! rings of one inotify descriptor are delivered in the order they were
//! made, so once the ring of the last raise has arrived, any ring of an
//! earlier one would have arrived before it.

mod common;
use common::*;
use mistri_locks::internals::LINGER;
use mistri_locks::{AcquireOptions, FlagWatch, FlagWatcher, Locks};
use mistri_locks_testkit::unique;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A copy of the bell hash (64-bit FNV-1a), written out again on purpose:
/// it is wire protocol, so the test pins it independently.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

fn flag_bucket(key: &str) -> u64 {
    fnv1a(key.as_bytes()) % 4096
}

fn line_bucket(key: &str, line: &str) -> u64 {
    let mut bytes = key.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend_from_slice(line.as_bytes());
    fnv1a(&bytes) % 4096
}

/// Everything a listener told this watcher.
#[derive(Default)]
struct Counts {
    raised: HashMap<String, u32>,
    poll_flag: HashMap<String, u32>,
    poll_now: u32,
    released: HashMap<String, u32>,
    released_any: u32,
}

#[derive(Default)]
struct Counter(Mutex<Counts>);

impl FlagWatcher for Counter {
    fn raised(&self, key: &str) {
        *self.0.lock().raised.entry(key.into()).or_default() += 1;
    }
    fn poll_now(&self) {
        self.0.lock().poll_now += 1;
    }
    fn poll_flag(&self, key: &str) {
        *self.0.lock().poll_flag.entry(key.into()).or_default() += 1;
    }
    fn released(&self, key: &str, _fence: Option<u64>) {
        *self.0.lock().released.entry(key.into()).or_default() += 1;
    }
    fn released_any(&self) {
        self.0.lock().released_any += 1;
    }
}

impl Counter {
    fn polls_of(&self, key: &str) -> u32 {
        self.0.lock().poll_flag.get(key).copied().unwrap_or(0)
    }
    fn releases_of(&self, key: &str) -> u32 {
        self.0.lock().released.get(key).copied().unwrap_or(0)
    }
    /// Every call, summed (the `released_any` / `poll_now` of a listener's
    /// start included).
    fn total(&self) -> u32 {
        let c = self.0.lock();
        c.raised.values().sum::<u32>()
            + c.poll_flag.values().sum::<u32>()
            + c.released.values().sum::<u32>()
            + c.poll_now
            + c.released_any
    }
}

/// Waits (bounded) until `done` holds.
fn until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Registers `counter` with the listener of `locks`'s adapter, once that
/// listener is up (it tells every watcher to look at everything when it
/// starts): interests declared after this become live one by one.
fn watch(locks: &Locks, counter: &Arc<Counter>) -> FlagWatch {
    let as_watcher: Arc<dyn FlagWatcher> = counter.clone();
    let guard = locks
        .adapter()
        .watch_flags(Arc::downgrade(&as_watcher))
        .expect("Local listens on Linux");
    until("the listener up", secs(3.0), || {
        counter.0.lock().released_any > 0
    });
    guard
}

/// One flag watched through `watcher_side`'s listener, live: the counter,
/// the guard, the key and its bell file.
fn one_watched_flag(dir: &Dir, watcher_side: &Locks) -> (Arc<Counter>, FlagWatch, String, PathBuf) {
    let counter = Arc::new(Counter::default());
    let guard = watch(watcher_side, &counter);
    let a = unique("flag-a");
    guard.watch_flag(&a);
    // Live: the listener reads A once when its watch is in place.
    until("A's watch live", secs(3.0), || counter.polls_of(&a) == 1);
    let bell = dir
        .db()
        .with_extension("db-bells")
        .join(format!("raised-{:03x}", flag_bucket(&a)));
    (counter, guard, a, bell)
}

/// `n` keys named after `stem` whose flag buckets differ from `avoid`'s
/// and from each other's.
fn keys_in_other_buckets(stem: &str, avoid: &[u64], n: usize) -> Vec<String> {
    let mut taken: Vec<u64> = avoid.to_vec();
    let mut keys = Vec::new();
    for i in 0.. {
        if keys.len() == n {
            break;
        }
        let key = format!("{stem}-{i}");
        let b = flag_bucket(&key);
        if !taken.contains(&b) {
            taken.push(b);
            keys.push(key);
        }
    }
    keys
}

#[test]
fn a_raise_rings_only_the_watchers_of_its_bucket() {
    let dir = Dir::new("mistri-bells-flags");
    let watcher_side = Locks::local(Some(&dir.db())).unwrap();
    let raiser = Locks::local(Some(&dir.db())).unwrap(); // another adapter object
    let (counter, guard, a, bell) = one_watched_flag(&dir, &watcher_side);
    assert!(bell.exists(), "{} was not made", bell.display());
    let before = counter.total();

    let others = keys_in_other_buckets(&unique("flag"), &[flag_bucket(&a)], 25);
    for key in &others {
        raiser.set_flag(key, secs(60.0)).unwrap();
    }
    raiser.set_flag(&a, secs(60.0)).unwrap();
    until("A's ring", secs(3.0), || counter.polls_of(&a) == 2);
    // Every ring of an earlier raise would have been read before A's.
    assert_eq!(
        counter.total(),
        before + 1,
        "the raises of 25 other buckets reached this watcher"
    );
    for key in &others {
        assert_eq!(counter.polls_of(key), 0, "{key}");
    }
    // Only the buckets of watched keys have files: the ringers made none.
    let files: Vec<String> = std::fs::read_dir(bell.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, vec![format!("raised-{:03x}", flag_bucket(&a))]);
    drop(guard);
}

#[test]
fn a_stop_from_another_adapter_trips_only_its_hold() {
    let dir = Dir::new("mistri-bells-holds");
    let locks = Locks::local(Some(&dir.db())).unwrap();
    let raiser = Locks::local(Some(&dir.db())).unwrap();
    let stops = keys_in_other_buckets(&unique("stop"), &[], 2);
    let hold = |stop: &str| {
        locks
            .hold(&unique("job"), stop_opts(stop))
            .unwrap()
            .unwrap()
    };
    let (mine, other) = (hold(&stops[0]), hold(&stops[1]));
    std::thread::sleep(Duration::from_millis(100)); // past the first reads
    let start = Instant::now();
    raiser.set_flag(&stops[0], secs(60.0)).unwrap();
    assert!(mine.signal().wait(Some(secs(3.0))), "never stopped");
    let took = start.elapsed();
    println!("stop -> signal {took:?}");
    assert!(took < Duration::from_millis(500), "by the tick, not a ring");
    assert!(!other.signal().is_aborted(), "another key's hold tripped");
}

/// The line id of `key`'s live queue entry, once there is one.
fn queued_line(db: &Path, key: &str) -> Option<String> {
    let con = rusqlite::Connection::open(db).ok()?;
    con.busy_timeout(Duration::from_secs(5)).ok()?;
    con.query_row(
        "SELECT line FROM queue WHERE key = ?1 ORDER BY since_ns LIMIT 1",
        rusqlite::params![key],
        |r| r.get(0),
    )
    .ok()
}

/// Starts a waiting acquire of `key` on `locks` in a thread; it answers
/// with whether it got the lease and when.
fn wait_in_thread(locks: &Locks, key: &str) -> std::thread::JoinHandle<(bool, Instant)> {
    let locks = locks.new_owner(); // same adapter object, so same lines
    let key = key.to_owned();
    std::thread::spawn(move || {
        let opts = AcquireOptions {
            wait: Some(secs(20.0)),
            ..AcquireOptions::default()
        };
        let got = locks.acquire_with(&key, secs(30.0), &opts).unwrap();
        let at = Instant::now();
        if got {
            locks.release(&key).unwrap();
        }
        (got, at)
    })
}

#[test]
fn a_release_rings_only_the_next_line_of_its_key() {
    let dir = Dir::new("mistri-bells-lines");
    let holder = Locks::local(Some(&dir.db())).unwrap();
    let waiter = Locks::local(Some(&dir.db())).unwrap();
    let bystander = Locks::local(Some(&dir.db())).unwrap();
    let counter = Arc::new(Counter::default());
    let _guard = watch(&waiter, &counter);
    let (k, j) = (unique("key-k"), unique("key-j"));
    assert!(holder.acquire(&k, secs(30.0)).unwrap());
    assert!(holder.acquire(&j, secs(30.0)).unwrap());

    // The bystander waits on J, the waiter on K: both lines queued, and
    // the waiter's line watched (the listener rings it once when live).
    let j_wait = wait_in_thread(&bystander, &j);
    let k_wait = wait_in_thread(&waiter, &k);
    until("both lines queued", secs(5.0), || {
        queued_line(&dir.db(), &k).is_some() && queued_line(&dir.db(), &j).is_some()
    });
    until("K's line live", secs(3.0), || counter.releases_of(&k) >= 1);
    let (k_line, j_line) = (
        queued_line(&dir.db(), &k).unwrap(),
        queued_line(&dir.db(), &j).unwrap(),
    );
    let shared_bucket = line_bucket(&k, &k_line) == line_bucket(&j, &j_line);
    if shared_bucket {
        println!("K's and J's lines share a bucket (1 in 4096): skipping the count");
    }
    let k_rings = counter.releases_of(&k);
    let before = counter.total();

    // An unrelated release: J's next line is rung, not K's.
    assert!(holder.release(&j).unwrap());
    let (got, _) = j_wait.join().unwrap();
    assert!(got, "the bystander never got J");

    // K's release: its waiter gets the lease at once (its own timers would
    // wait for the lease's 30 s expiry, or the 2 s safety poll).
    let released = Instant::now();
    assert!(holder.release(&k).unwrap());
    let (got, at) = k_wait.join().unwrap();
    assert!(got, "the waiter never got K");
    let took = at.duration_since(released);
    println!("release -> waiter acquired {took:?}");
    assert!(took < Duration::from_millis(300), "not rung: {took:?}");
    until("K's ring counted", secs(3.0), || {
        counter.releases_of(&k) > k_rings
    });
    if !shared_bucket {
        // Read in order: J's ring, had it come here, would precede K's.
        assert_eq!(counter.releases_of(&j), 0, "J's release reached K's waiter");
        assert_eq!(counter.total(), before + 1, "more than K's one ring");
    }
}

/// The waiting process's entry point (does nothing unless
/// `MISTRI_TEST_ROLE` is set): waits for `MISTRI_TEST_KEY` and prints when
/// it got it (`mono_ns`).
#[test]
fn child() {
    let Ok(role) = std::env::var("MISTRI_TEST_ROLE") else {
        return;
    };
    assert_eq!(role, "wait");
    let db = PathBuf::from(std::env::var("MISTRI_TEST_DB").unwrap());
    let key = std::env::var("MISTRI_TEST_KEY").unwrap();
    let locks = Locks::local(Some(&db)).unwrap();
    let opts = AcquireOptions {
        wait: Some(secs(20.0)),
        ..AcquireOptions::default()
    };
    let got = locks.acquire_with(&key, secs(30.0), &opts).unwrap();
    let at = mono_ns();
    assert!(got, "never got {key}");
    eprintln!("acquired-at {at}");
    locks.release(&key).unwrap();
}

#[test]
fn a_release_reaches_a_waiting_process_at_once() {
    let dir = Dir::new("mistri-bells-process");
    let holder = Locks::local(Some(&dir.db())).unwrap();
    let k = unique("key-k");
    assert!(holder.acquire(&k, secs(30.0)).unwrap());
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env("MISTRI_TEST_ROLE", "wait")
        .env("MISTRI_TEST_DB", dir.db())
        .env("MISTRI_TEST_KEY", &k)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    until("the child's line queued", secs(10.0), || {
        queued_line(&dir.db(), &k).is_some()
    });
    let line = queued_line(&dir.db(), &k).unwrap();
    let bell = dir
        .db()
        .with_extension("db-bells")
        .join(format!("next-{:03x}", line_bucket(&k, &line)));
    // The child's listener makes the file right before it watches it.
    until("the child's bell made", secs(5.0), || bell.exists());
    std::thread::sleep(Duration::from_millis(50));
    let released = mono_ns();
    assert!(holder.release(&k).unwrap());
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "waiting process failed: {text}");
    let at: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("acquired-at "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no time in {text}"));
    println!(
        "release -> other process acquired {:.2} ms",
        ms(at - released)
    );
    assert!(at - released < 300_000_000, "not rung");
}

fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// The inode numbers watched by this process's inotify descriptors
/// (`/proc/self/fdinfo`: one `inotify wd:… ino:<hex> …` line per watch).
fn watched_inodes() -> Vec<u64> {
    let mut inodes = Vec::new();
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return inodes;
    };
    for fd in fds.flatten() {
        let is_inotify =
            std::fs::read_link(fd.path()).is_ok_and(|t| t.to_string_lossy().contains("inotify"));
        if !is_inotify {
            continue;
        }
        let info = Path::new("/proc/self/fdinfo").join(fd.file_name());
        let Ok(text) = std::fs::read_to_string(info) else {
            continue;
        };
        for line in text.lines().filter(|l| l.starts_with("inotify wd:")) {
            let ino = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("ino:"))
                .and_then(|h| u64::from_str_radix(h, 16).ok());
            inodes.extend(ino);
        }
    }
    inodes
}

fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

#[test]
fn a_bell_is_unwatched_a_linger_after_its_last_hold() {
    let dir = Dir::new("mistri-bells-linger");
    let locks = Locks::local(Some(&dir.db())).unwrap();
    let stops = keys_in_other_buckets(&unique("stop"), &[], 2);
    let bells = dir.db().with_extension("db-bells");
    let bell = |key: &str| bells.join(format!("raised-{:03x}", flag_bucket(key)));
    let hold = |stop: &str| {
        locks
            .hold(&unique("job"), stop_opts(stop))
            .unwrap()
            .unwrap()
    };
    let (going, staying) = (hold(&stops[0]), hold(&stops[1]));
    until("both bells watched", secs(3.0), || {
        let watched = watched_inodes();
        [bell(&stops[0]), bell(&stops[1])]
            .iter()
            .all(|b| b.exists() && watched.contains(&inode(b)))
    });
    let (gone_ino, kept_ino) = (inode(&bell(&stops[0])), inode(&bell(&stops[1])));
    going.release().unwrap();
    let released = Instant::now();
    // Within the linger it stays: a hold coming back finds it live.
    assert!(watched_inodes().contains(&gone_ino), "dropped at once");
    until("the bell unwatched", LINGER + secs(3.0), || {
        !watched_inodes().contains(&gone_ino)
    });
    let after = released.elapsed();
    println!("unwatched {after:?} after the release (linger {LINGER:?})");
    assert!(after >= LINGER - Duration::from_millis(100), "{after:?}");
    assert!(
        watched_inodes().contains(&kept_ino),
        "the other hold's bell went too"
    );
    drop(staying);
}

#[test]
fn a_removed_bell_is_made_and_watched_again() {
    let dir = Dir::new("mistri-bells-removed");
    let watcher_side = Locks::local(Some(&dir.db())).unwrap();
    let raiser = Locks::local(Some(&dir.db())).unwrap();
    let (counter, guard, a, bell) = one_watched_flag(&dir, &watcher_side);
    let old = inode(&bell);
    let restarts = counter.0.lock().poll_now;
    std::fs::remove_file(&bell).unwrap();
    // The listener starts over after a pause: the bell re-made and watched,
    // and every watched flag looked at once (a ring may have been lost).
    until("A re-watched", secs(3.0), || {
        counter.0.lock().poll_now > restarts
            && bell.exists()
            && watched_inodes().contains(&inode(&bell))
    });
    assert!(!watched_inodes().contains(&old) || inode(&bell) == old);
    let polls = counter.polls_of(&a);
    raiser.set_flag(&a, secs(60.0)).unwrap();
    until("A's ring", secs(3.0), || counter.polls_of(&a) == polls + 1);
    drop(guard);
}

#[test]
fn a_bell_folder_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new("mistri-bells-open");
    let bells = dir.db().with_extension("db-bells");
    std::fs::create_dir(&bells).unwrap();
    std::fs::set_permissions(&bells, std::fs::Permissions::from_mode(0o777)).unwrap();
    let watcher_side = Locks::local(Some(&dir.db())).unwrap();
    let counter = Arc::new(Counter::default());
    let as_watcher: Arc<dyn FlagWatcher> = counter.clone();
    let guard = watcher_side
        .adapter()
        .watch_flags(Arc::downgrade(&as_watcher))
        .expect("the thread starts; the folder is checked there");
    let a = unique("flag-a");
    guard.watch_flag(&a);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(counter.total(), 0, "a listener used the open folder");
    assert_eq!(std::fs::read_dir(&bells).unwrap().count(), 0);
    drop(guard);
}
