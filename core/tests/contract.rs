//! The contract suite. Its cases are data, `tests/contract/cases.txt`, run
//! here and by the C, Python and Ruby suites alike (the format is
//! `tests/contract/README.md`); each runs against eight fresh backends:
//! Memory, Local, Redis, Redis Cluster, Redis Sentinel, PostgreSQL,
//! PostgreSQL through PgBouncer in transaction pooling and MariaDB (each on its own
//! throwaway servers on free loopback ports). Below the runner
//! are the few cases only Rust can state: Drop, the trait's explicit
//! leases, and threads contending in one process.
//!
//! `MISTRI_CONTRACT_ONLY=name` runs only the cases whose name contains it.

mod common;
use common::*;
use mistri_locks::wait_timeout_from_secs;
use mistri_locks::{
    duration_from_secs, AbortSignal, Error, Hold, HoldOptions, Locks, OpenOptions, ReleaseOutcome,
    FLAG_TTL,
};
use mistri_locks_testkit::{
    MariaDbServer, PgBouncer, PgServer, RedisCluster, RedisSentinels, RedisServer,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, PoisonError};
use std::time::{Duration, Instant};

const CASES: &str = include_str!("../../tests/contract/cases.txt");

pub struct Fixture {
    first: Locks,
    server: Option<RedisServer>,
    db: Option<TempDb>,
    /// Cluster and Sentinel: the URL and namespace every owner opens.
    shared: Option<(String, String)>,
}

/// A database file in a fresh folder, removed afterwards.
pub struct TempDb(std::path::PathBuf);

impl TempDb {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(mistri_locks_testkit::unique("mistri-contract"));
        TempDb(dir.join("locks.db"))
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Fixture {
    fn memory() -> Self {
        Fixture {
            first: Locks::memory(),
            server: None,
            db: None,
            shared: None,
        }
    }

    fn local() -> Self {
        let db = TempDb::new();
        Fixture {
            first: Locks::local(Some(&db.0)).expect("local adapter"),
            server: None,
            db: Some(db),
            shared: None,
        }
    }

    fn redis() -> Self {
        let server = RedisServer::start();
        let first = Locks::redis(&server.url(), "mistri:test").expect("redis adapter");
        Fixture {
            first,
            server: Some(server),
            db: None,
            shared: None,
        }
    }

    /// A Redis Cluster (3 masters), one for the test process, each case
    /// under a namespace of its own.
    fn cluster() -> Self {
        Self::shared(RedisCluster::shared().url())
    }

    /// A master, a replica and three sentinels, one set for the process.
    fn sentinel() -> Self {
        Self::shared(RedisSentinels::shared().url())
    }

    /// PostgreSQL: one server for the test process, each case under a
    /// namespace of its own (`Locks::open_with` opens whatever the URL
    /// names, through the one scheme table).
    fn postgres() -> Self {
        Self::shared(shared_postgres().0.url())
    }

    /// PostgreSQL through PgBouncer in transaction mode, `listen=off`.
    fn postgres_bouncer() -> Self {
        Self::shared(format!("{}?listen=off", shared_postgres().1.url()))
    }

    /// MariaDB 10.11 (`mysql://`): one server for the test process, each
    /// case under a namespace of its own.
    fn mariadb() -> Self {
        Self::shared(shared_mariadb().url())
    }

    fn shared(url: String) -> Self {
        let ns = mistri_locks_testkit::unique("mistri:test");
        Fixture {
            first: warmed(
                Locks::open_with(&url, &OpenOptions::new().namespace(&ns)).expect("adapter"),
            ),
            server: None,
            db: None,
            shared: Some((url, ns)),
        }
    }

    /// The first owner.
    fn locks(&self) -> &Locks {
        &self.first
    }

    /// Another owner on the same backend, as another process would be: a
    /// separate adapter object (its own connections) where the backend allows.
    fn owner(&self) -> Locks {
        if let Some((url, ns)) = &self.shared {
            return warmed(
                Locks::open_with(url, &OpenOptions::new().namespace(ns)).expect("adapter"),
            );
        }
        match (&self.server, &self.db) {
            (Some(server), _) => Locks::redis(&server.url(), "mistri:test").expect("redis adapter"),
            (None, Some(db)) => Locks::local(Some(&db.0)).expect("local adapter"),
            (None, None) => self.first.new_owner(),
        }
    }
}

/// One PostgreSQL server and one PgBouncer (transaction pooling) in front
/// of it for the test process, started on a thread that lives as long as
/// the process (they die with the thread that started them).
fn shared_postgres() -> &'static (PgServer, PgBouncer) {
    static CELL: std::sync::OnceLock<(PgServer, PgBouncer)> = std::sync::OnceLock::new();
    CELL.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let server = PgServer::start();
            let bouncer = PgBouncer::start_with_pool(&server, 40);
            let _ = tx.send((server, bouncer));
            loop {
                std::thread::park();
            }
        });
        rx.recv().expect("postgres started")
    })
}

/// One throwaway MariaDB for the test process, on a thread that lives as
/// long as the process (it dies with the thread that started it).
fn shared_mariadb() -> &'static MariaDbServer {
    static CELL: std::sync::OnceLock<MariaDbServer> = std::sync::OnceLock::new();
    CELL.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(MariaDbServer::start());
            loop {
                std::thread::park();
            }
        });
        rx.recv().expect("mariadb started")
    })
}

// ------------------------------------------------------------ the runner

struct Step {
    line: usize,
    words: Vec<String>,
}

struct Case {
    name: String,
    steps: Vec<Step>,
}

/// Splits a line into words: spaces separate, `"..."` quotes, `#` comments.
fn words(line: &str) -> Vec<String> {
    let (mut out, mut chars) = (Vec::new(), line.chars().peekable());
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '#' {
            break;
        } else if c == '"' {
            chars.next();
            out.push(chars.by_ref().take_while(|&c| c != '"').collect());
        } else {
            let mut word = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                if c == '"' {
                    // key="value"
                    chars.next();
                    word.extend(chars.by_ref().take_while(|&c| c != '"'));
                } else {
                    word.push(c);
                    chars.next();
                }
            }
            out.push(word);
        }
    }
    out
}

fn parse(src: &str) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    for (i, line) in src.lines().enumerate() {
        let w = words(line);
        match w.first().map(String::as_str) {
            None => {}
            Some("case") => cases.push(Case {
                name: w[1].clone(),
                steps: Vec::new(),
            }),
            Some(_) => cases
                .last_mut()
                .expect("a step before the first case")
                .steps
                .push(Step {
                    line: i + 1,
                    words: w,
                }),
        }
    }
    cases
}

/// Why a step failed: the library said no, or a check did not hold.
#[derive(Debug)]
enum Failure {
    Lib(Error),
    Check(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Lib(e)
    }
}

type Outcome = Result<(), Failure>;

fn check(ok: bool, what: impl FnOnce() -> String) -> Outcome {
    if ok {
        Ok(())
    } else {
        Err(Failure::Check(what()))
    }
}

fn number(s: &str) -> f64 {
    s.parse().unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

/// One case's world: its owners, holds, signals and the fences it saw.
struct Run<'f> {
    f: &'f Fixture,
    owners: HashMap<String, Locks>,
    holds: HashMap<String, Hold>,
    signals: HashMap<String, AbortSignal>,
    fences: HashMap<String, u64>,
    mark: Instant,
}

impl<'f> Run<'f> {
    fn new(f: &'f Fixture) -> Self {
        Run {
            f,
            owners: HashMap::new(),
            holds: HashMap::new(),
            signals: HashMap::new(),
            fences: HashMap::new(),
            mark: Instant::now(),
        }
    }

    fn owner(&mut self, name: &str) -> Locks {
        let f = self.f;
        self.owners
            .entry(name.to_string())
            .or_insert_with(|| {
                if name == "A" {
                    f.locks().clone()
                } else {
                    f.owner()
                }
            })
            .clone()
    }

    fn hold(&self, name: &str) -> &Hold {
        self.holds
            .get(name)
            .unwrap_or_else(|| panic!("no hold {name}"))
    }

    fn signal(&self, name: &str) -> AbortSignal {
        match self.signals.get(name) {
            Some(s) => s.clone(),
            None => self.hold(name).signal().clone(),
        }
    }

    fn expect_bool(got: bool, expect: Option<&[String]>) -> Outcome {
        match expect {
            None => Ok(()),
            Some([want]) => check(got.to_string() == *want, || format!("got {got}")),
            Some(other) => panic!("bad expectation {other:?}"),
        }
    }

    fn expect_fence(&mut self, key: &str, got: Option<u64>, expect: Option<&[String]>) -> Outcome {
        let last = self.fences.get(key).copied().unwrap_or(0);
        let ok = match (expect.map(|e| e[0].as_str()), got) {
            (None, _) => true,
            (Some("none"), got) => got.is_none(),
            (Some("same"), Some(got)) => got == last,
            (Some("greater"), Some(got)) => {
                self.fences.insert(key.to_string(), got);
                got > last
            }
            (Some(_), None) => false,
            (Some(want), _) => panic!("bad fence expectation {want}"),
        };
        check(ok, || format!("fence {got:?}, the last one {last}"))
    }

    fn hold_options(&self, words: &[String]) -> Result<HoldOptions, Failure> {
        let mut opts = HoldOptions::default();
        for word in words {
            let (name, value) = word.split_once('=').expect("an option is name=value");
            match name {
                "ttl" => opts.ttl = duration_from_secs("ttl", number(value))?,
                "heartbeat" => opts.heartbeat = duration_from_secs("heartbeat", number(value))?,
                "stop" => opts.stop_key = Some(value.to_string()),
                "signal" => opts.signal = Some(self.signal(value)),
                _ => panic!("unknown hold option {name}"),
            }
        }
        Ok(opts)
    }

    fn bind_hold(&mut self, got: Option<Hold>, expect: Option<&[String]>) -> Outcome {
        match (expect.map(|e| e[0].as_str()), got) {
            (None, _) => Ok(()),
            (Some("none"), got) => check(got.is_none(), || "got a hold, wanted none".into()),
            (Some(name), Some(hold)) => {
                self.holds.insert(name.to_string(), hold);
                Ok(())
            }
            (Some(_), None) => check(false, || "refused, wanted a hold".into()),
        }
    }

    fn step(&mut self, words: &[String]) -> Outcome {
        let (args, expect) = match words.iter().position(|w| w == "->") {
            Some(i) => (&words[..i], Some(&words[i + 1..])),
            None => (words, None),
        };
        let arg = |i: usize| args[i].as_str();
        let secs = |what: &str, i: usize| duration_from_secs(what, number(&args[i]));
        match arg(0) {
            "acquire" => {
                let got = self.owner(arg(1)).acquire(arg(2), secs("ttl", 3)?)?;
                Self::expect_bool(got, expect)
            }
            "renew" => {
                let got = self.owner(arg(1)).renew(arg(2), secs("ttl", 3)?)?;
                Self::expect_bool(got, expect)
            }
            "release" => Self::expect_bool(self.owner(arg(1)).release(arg(2))?, expect),
            "held" => Self::expect_bool(self.owner(arg(1)).held(arg(2))?, expect),
            "set_flag" => {
                let ttl = if args.len() > 3 {
                    secs("ttl", 3)?
                } else {
                    FLAG_TTL
                };
                Ok(self.owner(arg(1)).set_flag(arg(2), ttl)?)
            }
            "flag" => Self::expect_bool(self.owner(arg(1)).flag(arg(2))?, expect),
            "clear_flag" => Ok(self.owner(arg(1)).clear_flag(arg(2))?),
            "break_lease" => Self::expect_bool(self.owner(arg(1)).break_lease(arg(2))?, expect),
            "fence" => {
                let got = self.owner(arg(1)).fence(arg(2));
                self.expect_fence(arg(2), got, expect)
            }
            "hold" => {
                let opts = self.hold_options(&args[3..])?;
                let got = self.owner(arg(1)).hold(arg(2), opts)?;
                self.bind_hold(got, expect)
            }
            "hold_configured" => {
                let opts = self.hold_options(&args[2..])?;
                let got = mistri_locks::hold(arg(1), opts)?;
                self.bind_hold(got, expect)
            }
            "configure" => {
                let locks = (arg(1) != "none").then(|| self.owner(arg(1)));
                mistri_locks::configure(locks);
                Ok(())
            }
            "hold.release" => {
                let got = self.hold(arg(1)).release()?;
                let name = match got {
                    ReleaseOutcome::Released => "released",
                    ReleaseOutcome::AlreadyReleased => "already_released",
                    ReleaseOutcome::Lost => "lost",
                    ReleaseOutcome::NotHeld => "not_held",
                    ReleaseOutcome::OtherProcess => "other_process",
                    ReleaseOutcome::Expired => "expired",
                };
                check(expect.is_none_or(|e| e[0] == name), || {
                    format!("got {name}")
                })
            }
            "hold.lost" => Self::expect_bool(self.hold(arg(1)).is_lost(), expect),
            "hold.fence" => {
                let (key, got) = {
                    let hold = self.hold(arg(1));
                    (hold.key().to_string(), hold.fence())
                };
                self.expect_fence(&key, Some(got), expect)
            }
            "hold.key" => {
                let got = self.hold(arg(1)).key().to_string();
                check(expect.is_none_or(|e| e[0] == got), || format!("got {got}"))
            }
            "signal" => {
                self.signals.insert(arg(1).to_string(), AbortSignal::new());
                Ok(())
            }
            "abort" => {
                self.signal(arg(1)).abort(args.get(2).map(String::as_str));
                Ok(())
            }
            "aborted" => Self::expect_bool(self.signal(arg(1)).is_aborted(), expect),
            "wait" => {
                let timeout = wait_timeout_from_secs("timeout", number(arg(2)))?;
                Self::expect_bool(self.signal(arg(1)).wait(timeout), expect)
            }
            "reason" => {
                let reason = self.signal(arg(1)).reason();
                let want = arg(3);
                check(reason.as_deref().is_some_and(|r| r.contains(want)), || {
                    format!("reason {reason:?}")
                })
            }
            "same_signal" => {
                let same = self.hold(arg(1)).signal().same_as(&self.signal(arg(2)));
                Self::expect_bool(same, expect)
            }
            "sleep" => {
                std::thread::sleep(secs("sleep", 1)?);
                Ok(())
            }
            "mark" => {
                self.mark = Instant::now();
                Ok(())
            }
            "elapsed" => {
                let took = self.mark.elapsed().as_secs_f64();
                check(took <= number(arg(2)), || format!("{took:.3} s"))
            }
            "error" => {
                let (kind, text) = (expect.unwrap()[0].as_str(), expect.unwrap()[1].as_str());
                assert_eq!(kind, "InvalidArgument", "the only error kind cases use");
                match self.step(&args[1..]) {
                    Err(Failure::Lib(Error::InvalidArgument(msg))) => {
                        check(msg.contains(text), || format!("message {msg:?}"))
                    }
                    Err(Failure::Check(c)) => Err(Failure::Check(c)),
                    other => check(false, || format!("got {other:?}, wanted {kind}")),
                }
            }
            op => panic!("unknown step {op}"),
        }
    }
}

// Cases that configure the process-wide adapter run one at a time.
static CONFIGURED: Mutex<()> = Mutex::new(());

fn run_cases(backend: &str, make: fn() -> Fixture) {
    let only = std::env::var("MISTRI_CONTRACT_ONLY").unwrap_or_default();
    let cases = parse(CASES);
    assert!(cases.len() >= 10, "read {} cases", cases.len());
    let mut failures = Vec::new();
    for case in cases.iter().filter(|c| c.name.contains(&only)) {
        let configures = case.steps.iter().any(|s| s.words[0].contains("configure"));
        let _serial = configures.then(|| CONFIGURED.lock().unwrap_or_else(PoisonError::into_inner));
        let fixture = make();
        let started = Instant::now();
        let mut run = Run::new(&fixture);
        let failed = case.steps.iter().find_map(|step| {
            let outcome = run.step(&step.words);
            outcome.err().map(|why| {
                format!(
                    "{} [{backend}] line {}: `{}`: {why:?}",
                    case.name,
                    step.line,
                    step.words.join(" ")
                )
            })
        });
        if configures {
            mistri_locks::configure(None);
        }
        drop(run); // releases its holds while the backend is still up
        eprintln!(
            "{} {} [{backend}] ({:.2}s)",
            if failed.is_some() { "FAIL" } else { "ok  " },
            case.name,
            started.elapsed().as_secs_f64()
        );
        failures.extend(failed);
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

// ------------------------------------------------ what only Rust can say

pub fn dropping_a_hold_releases_it(f: Fixture) {
    let a = f.locks();
    {
        let _hold = a.hold("scoped", opts(5.0, 1.0)).unwrap().expect("free");
        assert!(a.held("scoped").unwrap());
        assert_eq!(a.active_holds(), 1);
    }
    assert!(!a.held("scoped").unwrap());
    assert_eq!(a.active_holds(), 0);
    // a lost hold dropped deletes nothing: the next holder is safe
    let hold = a.hold("victim", opts(0.3, 0.05)).unwrap().expect("free");
    assert!(f.owner().break_lease("victim").unwrap());
    assert!(hold.signal().wait(Some(secs(1.0))));
    let b = f.owner();
    assert!(b.acquire("victim", secs(5.0)).unwrap());
    drop(hold);
    assert!(b.held("victim").unwrap());
}

pub fn stale_lease_values_can_neither_renew_nor_release(f: Fixture) {
    // The trait level, with explicit leases: an old lease value is stale.
    let adapter = f.locks().adapter();
    let old = adapter.acquire("stale", secs(0.1)).unwrap().unwrap();
    std::thread::sleep(secs(0.3));
    let new = adapter.acquire("stale", secs(5.0)).unwrap().unwrap();
    assert!(new.fence() > old.fence());
    assert!(!adapter.renew(&old, secs(5.0)).unwrap());
    assert!(!adapter.release(&old).unwrap());
    assert!(adapter.held("stale").unwrap());
    assert!(adapter.release(&new).unwrap());
}

pub fn contending_threads_never_both_hold(f: Fixture) {
    const THREADS: usize = 8;
    const WINS_EACH: usize = 3;
    let inside = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let deadline = Instant::now() + secs(20.0);
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let locks = f.owner();
            let (inside, barrier) = (inside.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let (mut wins, mut refusals) = (0, 0);
                while wins < WINS_EACH && Instant::now() < deadline {
                    match locks.hold("contended", opts(5.0, 1.0)).unwrap() {
                        Some(hold) => {
                            assert_eq!(
                                inside.fetch_add(1, Ordering::SeqCst),
                                0,
                                "two holders at once"
                            );
                            std::thread::sleep(Duration::from_millis(3));
                            inside.fetch_sub(1, Ordering::SeqCst);
                            assert_eq!(hold.release().unwrap(), ReleaseOutcome::Released);
                            wins += 1;
                        }
                        None => refusals += 1,
                    }
                }
                (wins, refusals)
            })
        })
        .collect();
    let results: Vec<(usize, usize)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(results.iter().all(|(w, _)| *w == WINS_EACH), "{results:?}");
    assert!(
        results.iter().map(|(_, r)| r).sum::<usize>() > 0,
        "no contention: {results:?}"
    );
}

pub fn zero_durations_from_rust_are_invalid_arguments(f: Fixture) {
    // Rust passes Durations, not seconds: zero is the one bad value the
    // type lets through (the data's NaN and negatives go through
    // duration_from_secs, as the faces' seconds do).
    let a = f.locks();
    let bad = |r: mistri_locks::Result<()>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(bad(a.acquire("k", Duration::ZERO).map(drop)));
    assert!(bad(a.renew("k", Duration::ZERO).map(drop)));
    assert!(bad(a.set_flag("k", Duration::ZERO)));
    assert!(bad(a.hold("k", opts(0.0, 1.0)).map(drop)));
    assert!(bad(a.hold("k", opts(1.0, 0.0)).map(drop)));
    assert!(!a.held("k").unwrap());
}
pub fn a_holds_stop_key_is_in_its_description(f: Fixture) {
    // Written atomically with the lease, read back by info and list; a
    // plain acquire and a hold without one show none; the label is the
    // label alone.
    let a = f.locks();
    let stop = "stop:job 7:ü";
    let with_stop = |limit: u32| HoldOptions {
        stop_key: Some(stop.to_owned()),
        label: Some("worker 1".to_owned()),
        limit,
        ..opts(5.0, 1.0)
    };
    let hold = a.hold("described", with_stop(1)).unwrap().expect("free");
    let info = a.info("described").unwrap().expect("held");
    let holder = info.holder.expect("a description");
    assert_eq!(holder.stop_key.as_deref(), Some(stop));
    assert_eq!(holder.label, "worker 1");
    let listed = a.list("describ").unwrap();
    assert_eq!(listed.leases.len(), 1);
    let holder = listed.leases[0].holder.as_ref().expect("a description");
    assert_eq!(holder.stop_key.as_deref(), Some(stop));
    hold.release().unwrap();

    let slot = a.hold("described-2", with_stop(2)).unwrap().expect("free");
    let info = a.info("described-2").unwrap().expect("held");
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].stop_key.as_deref(), Some(stop));
    assert_eq!(info.holders[0].label, "worker 1");
    slot.release().unwrap();

    let plain = a.hold("described", opts(5.0, 1.0)).unwrap().expect("free");
    let holder = a.info("described").unwrap().unwrap().holder.unwrap();
    assert_eq!(holder.stop_key, None);
    plain.release().unwrap();
    assert!(a.acquire("described", secs(5.0)).unwrap());
    let holder = a.info("described").unwrap().unwrap().holder.unwrap();
    assert_eq!(holder.stop_key, None);
    assert!(a.release("described").unwrap());

    // The separator byte is no label's.
    let bad = HoldOptions {
        label: Some("a\u{1f}b".to_owned()),
        ..opts(5.0, 1.0)
    };
    assert!(matches!(
        a.hold("described", bad).map(drop),
        Err(Error::InvalidArgument(_))
    ));
}

/// `locks` after one acquire and release of a key no case uses: a fresh
/// adapter's first call pays for its connection (on PostgreSQL also a new
/// server process and the first compile of the schema's functions, 30-65 ms
/// under load), which a case with a 0.2 s lease must not spend from its ttl.
fn warmed(locks: Locks) -> Locks {
    let key = "contract-fixture-warm-up";
    if locks.acquire(key, Duration::from_secs(5)).unwrap_or(false) {
        let _ = locks.release(key);
    }
    locks
}

macro_rules! contract {
    ($backend:ident, $make:expr) => {
        mod $backend {
            use super::*;

            #[test]
            fn cases_from_the_data() {
                run_cases(stringify!($backend), || $make);
            }

            contract!(@tests $make;
                dropping_a_hold_releases_it,
                stale_lease_values_can_neither_renew_nor_release,
                contending_threads_never_both_hold,
                zero_durations_from_rust_are_invalid_arguments,
                a_holds_stop_key_is_in_its_description,
            );
        }
    };
    (@tests $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                super::$name($make);
            }
        )*
    };
}

contract!(memory, Fixture::memory());
contract!(redis, Fixture::redis());
contract!(local, Fixture::local());
contract!(cluster, Fixture::cluster());
contract!(sentinel, Fixture::sentinel());
contract!(postgres, Fixture::postgres());
contract!(postgres_bouncer, Fixture::postgres_bouncer());
contract!(mariadb, Fixture::mariadb());
