//! N-holder leases (semaphores) on Memory, Local, a real Redis and a Redis
//! Cluster: the limit, release and retake, expiry of a crashed holder's
//! slot, loss detection per slot, fences across slots and exclusive
//! leases, exclusion both ways, holds renewed by the engine, `info` and
//! `list` — and 8 processes contending for a limit-3 semaphore under an
//! independent witness, with a SIGKILLed holder's slot retaken at its ttl.
//!
//! The process tests re-execute this binary: `child` below does nothing
//! unless `MISTRI_SLOTS_ROLE` is set.

mod common;

use common::{opts, secs};
use mistri_locks::{
    Adapter, HoldOptions, Identity, Lease, Local, Locks, Memory, Redis, Renewal, Renewed,
};
use mistri_locks_testkit::{unique, RedisCluster, RedisServer};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn who(label: &str) -> Identity {
    Identity {
        label: label.into(),
        heartbeat: Duration::ZERO,
        stop_key: None,
    }
}

fn take(a: &dyn Adapter, key: &str, ttl: f64, limit: u32) -> Option<Lease> {
    a.acquire_limited(key, secs(ttl), &who("slots test"), limit)
        .unwrap()
}

fn renew(a: &dyn Adapter, lease: &Lease, ttl: f64, min_left: f64) -> Renewed {
    a.renew_within(&Renewal {
        lease,
        ttl: secs(ttl),
        min_left: secs(min_left),
    })
    .unwrap()
}

fn memory() -> Arc<dyn Adapter> {
    Arc::new(Memory::new())
}

fn local() -> Arc<dyn Adapter> {
    let dir = std::env::temp_dir().join(unique("mistri-slots"));
    Arc::new(Local::open(Some(&dir.join("locks.db"))).unwrap())
}

fn redis(server: &RedisServer) -> Arc<dyn Adapter> {
    Arc::new(Redis::open(&server.url(), "mistri:slots").unwrap())
}

fn cluster() -> Arc<dyn Adapter> {
    Locks::redis(&RedisCluster::shared().url(), "mistri:slots")
        .unwrap()
        .adapter()
        .clone()
}

/// The limit, release and retake, fences, info, break.
fn limit_release_retake(a: &dyn Adapter) {
    let key = unique("sem");
    let slots: Vec<Lease> = (0..3).map(|_| take(a, &key, 10.0, 3).unwrap()).collect();
    assert!(slots.iter().all(Lease::slotted));
    assert!(take(a, &key, 10.0, 3).is_none(), "a 4th holder of 3");
    // A larger limit lets one more in; the same limit again does not.
    let fourth = take(a, &key, 10.0, 4).expect("limit 4 takes a 4th");
    assert!(take(a, &key, 10.0, 4).is_none());
    let fences: Vec<u64> = slots.iter().chain([&fourth]).map(Lease::fence).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    let tokens: std::collections::HashSet<&str> = slots.iter().map(Lease::token).collect();
    assert_eq!(tokens.len(), 3, "each slot has its own token");
    assert!(a.held(&key).unwrap());

    let info = a.info(&key).unwrap().expect("slots are live");
    assert_eq!(info.key, key);
    assert!(info.holder.is_none());
    assert_eq!(info.limit, 4, "the newest holder's limit");
    let shown: Vec<u64> = info.holders.iter().map(|h| h.fence).collect();
    assert_eq!(shown, fences);
    assert!(info.holders.iter().all(|h| h.label == "slots test"));
    assert!(info.time_left.unwrap() <= secs(10.0));
    assert!(!format!("{info:?}").contains(slots[0].token()));
    let listed = a.list(&key).unwrap();
    assert_eq!(listed.leases.len(), 1, "{listed:?}");
    assert_eq!(listed.leases[0].holders.len(), 4);

    // Release: one slot, once; it is retaken with a higher fence.
    assert!(a.release(&slots[1]).unwrap());
    assert!(!a.release(&slots[1]).unwrap());
    assert_eq!(renew(a, &slots[1], 10.0, 0.0), Renewed::NotHeld);
    let again = take(a, &key, 10.0, 4).expect("the released slot is retaken");
    assert!(again.fence() > fourth.fence());
    assert_eq!(renew(a, &slots[0], 10.0, 0.0), Renewed::Yes);

    // Break: every slot goes; each holder finds out at its renewal.
    assert!(a.break_lease(&key).unwrap());
    assert!(!a.held(&key).unwrap());
    assert!(a.info(&key).unwrap().is_none());
    for lease in slots.iter().chain([&fourth, &again]) {
        assert_eq!(renew(a, lease, 10.0, 0.0), Renewed::NotHeld);
    }
    assert!(!a.break_lease(&key).unwrap());
}

/// A holder that never renews (crashed) loses its slot at its ttl, not
/// before; renewing an expired slot finds it not held; `min_left` as for
/// an exclusive lease.
fn expiry_and_loss(a: &dyn Adapter) {
    let key = unique("sem");
    let start = Instant::now();
    let crashed = take(a, &key, 1.5, 2).unwrap();
    let alive = take(a, &key, 30.0, 2).unwrap();
    assert!(take(a, &key, 30.0, 2).is_none());
    let left = a.expires_in(&key).unwrap().expect("a live slot");
    assert!(left <= secs(1.5), "the soonest slot: {left:?}");
    std::thread::sleep(secs(0.5));
    if start.elapsed() < secs(1.2) {
        assert!(take(a, &key, 30.0, 2).is_none(), "freed before its ttl");
    }
    std::thread::sleep(secs(1.5).saturating_sub(start.elapsed()) + secs(0.1));
    let retaken = take(a, &key, 30.0, 2).expect("the crashed holder's slot frees itself");
    assert_eq!(renew(a, &crashed, 30.0, 0.0), Renewed::NotHeld);
    assert!(!a.release(&crashed).unwrap());
    // TooLate: still held, but less than min_left of its life is left.
    assert_eq!(renew(a, &alive, 30.0, 60.0), Renewed::TooLate);
    assert_eq!(renew(a, &alive, 30.0, 1.0), Renewed::Yes);
    let info = a.info(&key).unwrap().unwrap();
    assert_eq!(info.holders.len(), 2);
    assert_eq!(info.holders[0].ttl, secs(30.0));
    a.release(&alive).unwrap();
    a.release(&retaken).unwrap();
    assert!(!a.held(&key).unwrap());
    assert!(a.expires_in(&key).unwrap().is_none());
}

/// An exclusive lease and slots on one key exclude each other; fences rise
/// across both.
fn mixing(a: &dyn Adapter) {
    let key = unique("mix");
    let excl = a.acquire_as(&key, secs(10.0), &who("x")).unwrap().unwrap();
    assert!(!excl.slotted());
    assert!(
        take(a, &key, 10.0, 3).is_none(),
        "a slot beside an exclusive lease"
    );
    assert!(a.expires_in(&key).unwrap().unwrap() <= secs(10.0));
    assert!(a.release(&excl).unwrap());
    let s1 = take(a, &key, 10.0, 3).unwrap();
    assert!(s1.fence() > excl.fence());
    assert!(a.acquire_as(&key, secs(10.0), &who("x")).unwrap().is_none());
    assert!(a.acquire(&key, secs(10.0)).unwrap().is_none());
    assert!(
        take(a, &key, 10.0, 1).is_none(),
        "limit 1 is the exclusive lease"
    );
    let s2 = take(a, &key, 10.0, 3).unwrap();
    assert!(s2.fence() > s1.fence());
    // An exclusive renew/release does not touch slots, nor the reverse.
    assert!(!a
        .release(&Lease::new(key.as_str(), s1.token(), s1.fence()))
        .unwrap());
    assert!(a.release(&s1).unwrap());
    assert!(a.acquire(&key, secs(10.0)).unwrap().is_none());
    assert!(a.release(&s2).unwrap());
    let excl2 = a
        .acquire(&key, secs(10.0))
        .unwrap()
        .expect("no slot is live");
    assert!(excl2.fence() > s2.fence());
    let info = a.info(&key).unwrap().unwrap();
    assert_eq!(info.limit, 1);
    assert!(info.holders.len() <= 1);
    assert!(a.release(&excl2).unwrap());
}

/// One heartbeat tick renews exclusive leases and slots together.
fn beat(a: &dyn Adapter) {
    let (k1, k2) = (unique("beat"), unique("beat"));
    let excl = a.acquire(&k1, secs(10.0)).unwrap().unwrap();
    let s1 = take(a, &k2, 10.0, 2).unwrap();
    let s2 = take(a, &k2, 10.0, 2).unwrap();
    a.release(&s2).unwrap();
    let renewals: Vec<Renewal<'_>> = [&excl, &s1, &s2]
        .into_iter()
        .map(|lease| Renewal {
            lease,
            ttl: secs(20.0),
            min_left: secs(0.01),
        })
        .collect();
    let flag = unique("flag");
    a.set_flag(&flag, secs(10.0)).unwrap();
    let tick = a
        .beat(&renewals, &[flag.as_str()], Instant::now() + secs(5.0))
        .unwrap();
    let got: Vec<Renewed> = tick.renewals.into_iter().map(Result::unwrap).collect();
    assert_eq!(got, [Renewed::Yes, Renewed::Yes, Renewed::NotHeld]);
    assert!(tick.flags[0].as_ref().unwrap());
    let info = a.info(&k2).unwrap().unwrap();
    assert_eq!(info.holders[0].ttl, secs(20.0));
    a.release(&excl).unwrap();
    a.release(&s1).unwrap();
}

/// Holds with a limit, renewed by the engine, told when broken; the
/// issued-lease API of `Locks` with a limit.
fn holds(a: &Arc<dyn Adapter>) {
    let key = unique("held");
    let owners: Vec<Locks> = (0..4).map(|_| Locks::from_arc(a.clone())).collect();
    let limited = |label: &str| HoldOptions {
        limit: 3,
        label: Some(label.into()),
        ..opts(0.6, 0.05)
    };
    let held: Vec<_> = owners[..3]
        .iter()
        .enumerate()
        .map(|(i, l)| l.hold(&key, limited(&format!("h{i}"))).unwrap().unwrap())
        .collect();
    assert!(owners[3].hold(&key, limited("h3")).unwrap().is_none());
    // Renewed past several ttls.
    std::thread::sleep(secs(1.5));
    assert!(held.iter().all(|h| !h.is_lost()));
    assert!(owners[3].hold(&key, limited("h3")).unwrap().is_none());
    let info = owners[3].info(&key).unwrap().unwrap();
    let mut labels: Vec<&str> = info.holders.iter().map(|h| h.label.as_str()).collect();
    labels.sort_unstable();
    assert_eq!(labels, ["h0", "h1", "h2"]);
    assert!(info.holders.iter().all(|h| h.heartbeat == secs(0.05)));
    // One leaves; the fourth gets in.
    held[0].release().unwrap();
    let fourth = owners[3].hold(&key, limited("h3")).unwrap().unwrap();
    assert!(fourth.fence() > held[2].fence());
    // Broken by an operator: every holder is told within a few ticks.
    assert!(owners[0].break_lease(&key).unwrap());
    for h in [&held[1], &held[2], &fourth] {
        assert!(
            h.signal().wait(Some(secs(5.0))),
            "a broken slot's hold is told"
        );
        assert!(h.is_lost());
    }

    // Locks::acquire_with / renew / release with a limit.
    let key = unique("plain");
    let ao = mistri_locks::AcquireOptions {
        limit: 2,
        ..Default::default()
    };
    assert!(owners[0].acquire_with(&key, secs(5.0), &ao).unwrap());
    assert!(owners[1].acquire_with(&key, secs(5.0), &ao).unwrap());
    assert!(!owners[2].acquire_with(&key, secs(5.0), &ao).unwrap());
    assert!(!owners[2].acquire(&key, secs(5.0)).unwrap());
    assert!(owners[0].renew(&key, secs(5.0)).unwrap());
    assert!(owners[0].release(&key).unwrap());
    assert!(owners[2].acquire_with(&key, secs(5.0), &ao).unwrap());
    assert!(owners[1].fence(&key).unwrap() < owners[2].fence(&key).unwrap());
    owners[1].release(&key).unwrap();
    owners[2].release(&key).unwrap();
    assert!(!owners[0].held(&key).unwrap());
}

fn contract(a: &Arc<dyn Adapter>) {
    limit_release_retake(a.as_ref());
    mixing(a.as_ref());
    beat(a.as_ref());
    expiry_and_loss(a.as_ref());
    holds(a);
}

#[test]
fn memory_slots() {
    contract(&memory());
}

#[test]
fn local_slots() {
    contract(&local());
}

#[test]
fn redis_slots() {
    contract(&redis(&RedisServer::start()));
}

#[test]
fn cluster_slots() {
    contract(&cluster());
}

#[test]
fn local_schema_gains_the_slots_table() {
    // A database made before the slots table: opening it adds the table.
    let dir = std::env::temp_dir().join(unique("mistri-old-db"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("locks.db");
    {
        let a = Local::open(Some(&path)).unwrap();
        a.acquire("old", secs(30.0)).unwrap().unwrap();
    }
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("DROP TABLE slots;")
        .unwrap();
    let a = Local::open(Some(&path)).unwrap();
    assert!(a.held("old").unwrap());
    assert!(take(&a, "new", 5.0, 2).is_some());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn redis_slot_scripts_survive_script_flush() {
    let srv = RedisServer::start();
    let a = redis(&srv);
    let key = unique("flush");
    let s1 = take(a.as_ref(), &key, 10.0, 2).unwrap();
    let excl = a.acquire(&unique("x"), secs(10.0)).unwrap().unwrap();
    // A restart without scripts: each path loads them again.
    assert_eq!(srv.command("SCRIPT FLUSH"), "+OK\r\n");
    let renewals = [&s1, &excl].map(|lease| Renewal {
        lease,
        ttl: secs(10.0),
        min_left: Duration::ZERO,
    });
    let tick = a.beat(&renewals, &[], Instant::now() + secs(5.0)).unwrap();
    assert!(
        tick.renewals.iter().all(|r| matches!(r, Ok(Renewed::Yes))),
        "{:?}",
        tick.renewals
    );
    assert_eq!(srv.command("SCRIPT FLUSH"), "+OK\r\n");
    let s2 = take(a.as_ref(), &key, 10.0, 2).unwrap();
    assert_eq!(srv.command("SCRIPT FLUSH"), "+OK\r\n");
    assert_eq!(a.info(&key).unwrap().unwrap().holders.len(), 2);
    assert_eq!(srv.command("SCRIPT FLUSH"), "+OK\r\n");
    assert!(a.release(&s1).unwrap());
    assert_eq!(srv.command("SCRIPT FLUSH"), "+OK\r\n");
    assert_eq!(renew(a.as_ref(), &s2, 10.0, 0.0), Renewed::Yes);
}

#[test]
fn redis_keys_vanish_with_the_last_slot() {
    let srv = RedisServer::start();
    let a = redis(&srv);
    let key = unique("gone");
    let s = take(a.as_ref(), &key, 0.3, 2).unwrap();
    let slots = format!("mistri:slots:slots:{{{key}}}");
    let holders = format!("mistri:slots:holders:{{{key}}}");
    assert_eq!(srv.command(&format!("EXISTS {slots} {holders}")), ":2\r\n");
    let pttl = srv.command(&format!("PTTL {slots}"));
    let pttl: i64 = pttl.trim().trim_start_matches(':').parse().unwrap();
    assert!(pttl > 0 && pttl <= 300, "{pttl}");
    std::thread::sleep(secs(0.5));
    assert_eq!(srv.command(&format!("EXISTS {slots} {holders}")), ":0\r\n");
    assert_eq!(renew(a.as_ref(), &s, 1.0, 0.0), Renewed::NotHeld);
}

// ---------------------------------------------------------------------
// Processes under a witness.

const ROLE: &str = "MISTRI_SLOTS_ROLE";
const LIMIT: u32 = 3;
const CONTENDERS: usize = 8;
/// Entries each contender makes before it ends.
const ENTRIES: usize = 12;

/// Where the children take their slots and keep the witness.
#[derive(Clone)]
enum Backend {
    /// A Redis URL; the witness is a counter key on the same server,
    /// written with plain `INCR`/`DECR` (not through this library).
    Redis(String),
    /// A database file; the witness is a count in a file, changed under
    /// `flock`.
    Local(PathBuf),
}

impl Backend {
    fn encode(&self) -> String {
        match self {
            Backend::Redis(url) => format!("redis {url}"),
            Backend::Local(path) => format!("local {}", path.display()),
        }
    }

    fn decode(text: &str) -> Backend {
        match text.split_once(' ').expect("backend spec") {
            ("redis", url) => Backend::Redis(url.into()),
            ("local", path) => Backend::Local(path.into()),
            other => panic!("bad backend {other:?}"),
        }
    }

    fn locks(&self) -> Locks {
        match self {
            Backend::Redis(url) => Locks::redis(url, "mistri:witness").unwrap(),
            Backend::Local(path) => Locks::local(Some(path)).unwrap(),
        }
    }

    fn witness(&self, key: &str) -> Witness {
        match self {
            Backend::Redis(url) => Witness::Redis(
                ::redis::Client::open(url.as_str())
                    .unwrap()
                    .get_connection()
                    .unwrap(),
                format!("witness:{key}"),
            ),
            Backend::Local(path) => Witness::File(path.with_extension(format!("{key}.witness"))),
        }
    }
}

/// Counts who is inside, independently of the library under test.
enum Witness {
    Redis(::redis::Connection, String),
    File(PathBuf),
}

impl Witness {
    /// Adds `by` to the count; the count after.
    fn add(&mut self, by: i64) -> i64 {
        match self {
            Witness::Redis(con, key) => ::redis::cmd("INCRBY")
                .arg(&*key)
                .arg(by)
                .query(con)
                .unwrap(),
            Witness::File(path) => {
                use std::io::{Read, Seek, Write};
                use std::os::fd::AsRawFd;
                let mut file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&*path)
                    .unwrap();
                // SAFETY: a valid open descriptor; flock only locks it.
                assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }, 0);
                let mut text = String::new();
                file.read_to_string(&mut text).unwrap();
                let count = text.trim().parse::<i64>().unwrap_or(0) + by;
                file.set_len(0).unwrap();
                file.seek(std::io::SeekFrom::Start(0)).unwrap();
                write!(file, "{count}").unwrap();
                file.sync_data().unwrap();
                // Closing the file releases the flock.
                count
            }
        }
    }
}

fn command(role: &str, backend: &Backend, key: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env("MISTRI_SLOTS_BACKEND", backend.encode())
        .env("MISTRI_SLOTS_KEY", key)
        .stdout(Stdio::piped());
    cmd
}

fn spawn(role: &str, backend: &Backend, key: &str) -> Child {
    command(role, backend, key).spawn().unwrap()
}

/// The child processes' entry; a no-op in a normal test run.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let backend = Backend::decode(&std::env::var("MISTRI_SLOTS_BACKEND").unwrap());
    let key = std::env::var("MISTRI_SLOTS_KEY").unwrap();
    let locks = backend.locks();
    let hold_opts = || HoldOptions {
        limit: LIMIT,
        ..opts(2.0, 0.2)
    };
    match role.as_str() {
        // Enter ENTRIES times (bounded by a deadline), each time checking
        // with the witness that at most LIMIT are inside.
        "contend" => {
            let mut witness = backend.witness(&key);
            // Start together: say ready, wait for the go (bounded).
            let gate = PathBuf::from(std::env::var("MISTRI_SLOTS_GATE").unwrap());
            std::fs::write(gate.join(format!("ready-{}", std::process::id())), "").unwrap();
            let waited = Instant::now();
            while !gate.join("go").exists() && waited.elapsed() < secs(60.0) {
                std::thread::sleep(secs(0.005));
            }
            let (mut entries, mut most) = (0, 0);
            let deadline = Instant::now() + secs(60.0);
            while entries < ENTRIES && Instant::now() < deadline {
                let Some(hold) = locks.hold(&key, hold_opts()).unwrap() else {
                    std::thread::sleep(secs(0.002));
                    continue;
                };
                let inside = witness.add(1);
                most = most.max(inside);
                assert!(
                    inside <= i64::from(LIMIT),
                    "{inside} inside a limit-{LIMIT} semaphore"
                );
                std::thread::sleep(secs(0.03));
                witness.add(-1);
                assert!(!hold.is_lost());
                hold.release().unwrap();
                entries += 1;
                // Let the others in before trying again.
                std::thread::sleep(secs(0.005));
            }
            println!("WITNESS entries={entries} most={most}");
        }
        // Take a slot, say so, and keep it (renewed) until killed.
        "hang" => {
            let hold = locks.hold(&key, hold_opts()).unwrap().expect("a free slot");
            println!("HELD {}", hold.fence());
            std::thread::sleep(secs(60.0));
        }
        other => panic!("unknown role {other}"),
    }
}

/// The first line of `child`'s stdout with `prefix`, from `prefix` on (the rest
/// is drained on a thread, so the child never writes to a closed pipe).
fn line_of(child: &mut Child, prefix: &str) -> String {
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines
        .by_ref()
        .map_while(std::result::Result::ok)
        // libtest may have written `test child ... ` before it.
        .find_map(|l| l.find(prefix).map(|at| l[at..].to_owned()))
        .unwrap_or_default();
    std::thread::spawn(move || lines.for_each(drop));
    line
}

fn contend(backend: &Backend) {
    let key = unique("witnessed");
    let gate = std::env::temp_dir().join(unique("mistri-slots-gate"));
    std::fs::create_dir_all(&gate).unwrap();
    let children: Vec<Child> = (0..CONTENDERS)
        .map(|_| {
            let mut cmd = command("contend", backend, &key);
            cmd.env("MISTRI_SLOTS_GATE", &gate);
            cmd.spawn().unwrap()
        })
        .collect();
    // Every contender is up (connected, witness open) before any starts.
    let waited = Instant::now();
    while std::fs::read_dir(&gate).unwrap().count() < CONTENDERS {
        assert!(waited.elapsed() < secs(60.0), "contenders never got ready");
        std::thread::sleep(secs(0.01));
    }
    std::fs::write(gate.join("go"), "").unwrap();
    let mut most = 0;
    for mut child in children {
        let line = line_of(&mut child, "WITNESS ");
        let status = child.wait().unwrap();
        assert!(status.success(), "a contender failed: {line}");
        let field = |name: &str| -> usize {
            line.split(' ')
                .find_map(|f| f.strip_prefix(name))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {line:?}"))
        };
        assert_eq!(field("entries="), ENTRIES, "{line}");
        most = most.max(field("most="));
    }
    // The limit was reached (3 at once), never passed (each child checks).
    assert_eq!(most, LIMIT as usize);
    std::fs::remove_dir_all(&gate).ok();
}

fn sigkilled(backend: &Backend) {
    let key = unique("killed");
    let mut holders: Vec<Child> = (0..LIMIT)
        .map(|_| {
            let mut child = spawn("hang", backend, &key);
            let line = line_of(&mut child, "HELD ");
            assert!(!line.is_empty(), "a holder never held");
            child
        })
        .collect();
    let locks = backend.locks();
    let ao = mistri_locks::AcquireOptions {
        limit: LIMIT,
        ..Default::default()
    };
    assert!(!locks.acquire_with(&key, secs(2.0), &ao).unwrap(), "full");
    // SAFETY: kill sends a signal to our own child's pid.
    assert_eq!(
        unsafe { libc::kill(holders[0].id() as i32, libc::SIGKILL) },
        0
    );
    let killed = Instant::now();
    holders[0].wait().unwrap();
    // The killed holder renewed every 0.2 s with a ttl of 2 s: its slot
    // lapses between 1.8 and 2 s after the kill. Until well before that it
    // stays taken; after, it is retaken.
    let got = loop {
        let got = locks.acquire_with(&key, secs(5.0), &ao).unwrap();
        if got || killed.elapsed() > secs(10.0) {
            break killed.elapsed();
        }
        std::thread::sleep(secs(0.02));
    };
    assert!(
        got >= secs(1.0),
        "retaken {got:?} after the kill: before its ttl"
    );
    assert!(got < secs(10.0), "never retaken");
    assert!(locks.held(&key).unwrap());
    let info = locks.info(&key).unwrap().unwrap();
    assert_eq!(info.holders.len(), LIMIT as usize);
    for child in &mut holders[1..] {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    locks.release(&key).unwrap();
}

#[test]
fn processes_redis() {
    let server = RedisServer::start();
    let backend = Backend::Redis(server.url());
    contend(&backend);
    sigkilled(&backend);
}

#[test]
fn processes_local() {
    let dir = std::env::temp_dir().join(unique("mistri-slots-proc"));
    std::fs::create_dir_all(&dir).unwrap();
    let backend = Backend::Local(dir.join("locks.db"));
    // The file and its schema are made here, once: eight children creating
    // one schema at the same moment each wait on SQLite's write lock, and a
    // machine whose disk is busy (fsyncs of seconds) can make one of them
    // wait past the store's 5 s busy bound before the test begins. What
    // this test is about starts after that: contending for the slots.
    drop(backend.locks());
    contend(&backend);
    sigkilled(&backend);
    std::fs::remove_dir_all(&dir).ok();
}
