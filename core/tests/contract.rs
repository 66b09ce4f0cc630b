//! The contract suite: written once, run against every backend.
//!
//! Each test gets a fresh backend (a fresh Memory, or a fresh redis-server
//! on a free loopback port) and may make several independent "processes" on
//! it with `Fixture::owner()` (their own issued leases and heartbeat engine).

mod common;
use common::*;
use mistri_locks::{AbortSignal, HoldOptions, Locks, ReleaseOutcome};
use mistri_locks_testkit::RedisServer;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

pub struct Fixture {
    first: Locks,
    server: Option<RedisServer>,
    db: Option<TempDb>,
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
        }
    }

    fn local() -> Self {
        let db = TempDb::new();
        Fixture {
            first: Locks::local(Some(&db.0)).expect("local adapter"),
            server: None,
            db: Some(db),
        }
    }

    fn redis() -> Self {
        let server = RedisServer::start();
        let first = Locks::redis(&server.url(), "mistri:test").expect("redis adapter");
        Fixture {
            first,
            server: Some(server),
            db: None,
        }
    }

    /// The first owner.
    fn locks(&self) -> &Locks {
        &self.first
    }

    /// Another owner on the same backend, as another process would be.
    fn owner(&self) -> Locks {
        // A separate adapter object where the backend allows: its own
        // connections too.
        match (&self.server, &self.db) {
            (Some(server), _) => Locks::redis(&server.url(), "mistri:test").expect("redis adapter"),
            (None, Some(db)) => Locks::local(Some(&db.0)).expect("local adapter"),
            (None, None) => self.first.sharing_adapter(),
        }
    }

    /// Deletes the lease behind everyone's back.
    fn delete_lease(&self, key: &str) {
        match &self.server {
            Some(server) => {
                let reply = server.command(&format!("DEL mistri:test:lease:{{{key}}}"));
                assert_eq!(reply.trim(), ":1", "raw DEL of the lease");
            }
            None => assert!(self.owner().break_lease(key).unwrap()),
        }
    }
}

pub fn acquire_once_and_refuse_while_live(f: Fixture) {
    let a = f.locks();
    let b = f.owner();
    assert!(a.acquire("job", secs(5.0)).unwrap());
    assert!(
        !a.acquire("job", secs(5.0)).unwrap(),
        "same owner, live lease"
    );
    assert!(
        !b.acquire("job", secs(5.0)).unwrap(),
        "other owner, live lease"
    );
    assert!(a.held("job").unwrap());
    assert!(b.held("job").unwrap());
    assert!(!b.renew("job", secs(5.0)).unwrap(), "b never acquired it");
    assert!(!b.release("job").unwrap(), "b never acquired it");
    assert!(a.held("job").unwrap());
    assert!(a.renew("job", secs(5.0)).unwrap());
    assert!(a.release("job").unwrap());
    assert!(!a.held("job").unwrap());
    assert!(!a.release("job").unwrap(), "release is not repeated");
    assert!(b.acquire("job", secs(5.0)).unwrap());
}

pub fn fractional_ttl_expires_and_can_be_retaken(f: Fixture) {
    let a = f.locks();
    let b = f.owner();
    assert!(a.acquire("short", secs(0.01)).unwrap());
    assert!(!b.acquire("short", secs(0.01)).unwrap());
    std::thread::sleep(secs(0.05));
    assert!(
        !a.held("short").unwrap(),
        "a 0.01 s lease is gone after 0.05 s"
    );
    assert!(b.acquire("short", secs(5.0)).unwrap());
    assert!(a.held("short").unwrap());
}

pub fn flags_set_read_clear_and_expire(f: Fixture) {
    let a = f.locks();
    let b = f.owner();
    assert!(!a.flag("stop").unwrap());
    a.set_flag("stop", secs(5.0)).unwrap();
    assert!(b.flag("stop").unwrap(), "a flag needs no owner");
    b.clear_flag("stop").unwrap();
    assert!(!a.flag("stop").unwrap());
    b.clear_flag("stop").unwrap(); // lowering a lowered flag is fine
    a.set_flag("blink", secs(0.02)).unwrap();
    assert!(a.flag("blink").unwrap());
    std::thread::sleep(secs(0.06));
    assert!(!a.flag("blink").unwrap());
    // flags and leases live apart
    a.set_flag("both", secs(5.0)).unwrap();
    assert!(!a.held("both").unwrap());
    assert!(a.acquire("both", secs(5.0)).unwrap());
}

pub fn hold_outlives_its_ttl_by_renewing(f: Fixture) {
    let a = f.locks();
    let hold = a.hold("beating", opts(0.2, 0.05)).unwrap().expect("free");
    std::thread::sleep(secs(0.7));
    assert!(a.held("beating").unwrap(), "renewed past 3.5 ttls");
    assert!(!hold.is_lost());
    assert!(!hold.signal().is_aborted());
    assert_eq!(hold.release().unwrap(), ReleaseOutcome::Released);
}

pub fn heartbeat_at_the_ttl_still_never_lapses(f: Fixture) {
    // The seed's own tests pass ttl == heartbeat; the engine renews at ttl/3.
    let a = f.locks();
    let hold = a.hold("equal", opts(0.3, 0.3)).unwrap().expect("free");
    for _ in 0..10 {
        std::thread::sleep(secs(0.1));
        assert!(a.held("equal").unwrap(), "lapsed");
    }
    assert!(!hold.is_lost());
    hold.release().unwrap();
}

pub fn released_lease_is_gone_and_stays_gone(f: Fixture) {
    let a = f.locks();
    let hold = a.hold("done", opts(0.2, 0.01)).unwrap().expect("free");
    std::thread::sleep(secs(0.05));
    assert_eq!(hold.release().unwrap(), ReleaseOutcome::Released);
    assert!(!a.held("done").unwrap());
    std::thread::sleep(secs(0.1)); // many heartbeats
    assert!(
        !a.held("done").unwrap(),
        "a tick re-stamped a released lease"
    );
    assert_eq!(hold.release().unwrap(), ReleaseOutcome::AlreadyReleased);
    assert!(!hold.signal().is_aborted(), "release is not a loss");
    assert_eq!(a.active_holds(), 0);
}

pub fn dropping_a_hold_releases_it(f: Fixture) {
    let a = f.locks();
    {
        let _hold = a.hold("scoped", opts(5.0, 1.0)).unwrap().expect("free");
        assert!(a.held("scoped").unwrap());
    }
    assert!(!a.held("scoped").unwrap());
}

pub fn refused_hold_exists_nowhere_and_holder_keeps_its_lease(f: Fixture) {
    let a = f.locks();
    let b = f.owner();
    let hold = a.hold("one", opts(0.3, 0.05)).unwrap().expect("free");
    let fence = hold.fence();
    assert!(b.hold("one", opts(0.3, 0.05)).unwrap().is_none());
    assert_eq!(b.active_holds(), 0);
    assert!(!b.release("one").unwrap());
    std::thread::sleep(secs(0.5));
    assert!(a.held("one").unwrap());
    assert!(!hold.is_lost());
    assert_eq!(hold.fence(), fence);
    hold.release().unwrap();
    assert!(b.hold("one", opts(0.3, 0.05)).unwrap().is_some());
}

pub fn stale_owner_can_neither_renew_nor_release(f: Fixture) {
    let a = f.locks();
    let b = f.owner();
    assert!(a.acquire("stale", secs(0.03)).unwrap());
    std::thread::sleep(secs(0.08));
    assert!(b.acquire("stale", secs(5.0)).unwrap());
    assert!(!a.renew("stale", secs(5.0)).unwrap());
    assert!(!a.release("stale").unwrap());
    assert!(b.held("stale").unwrap());
    // the same at the trait level, with an explicit old lease
    let adapter = a.adapter();
    let old = adapter.acquire("stale2", secs(0.03)).unwrap().unwrap();
    std::thread::sleep(secs(0.08));
    let new = adapter.acquire("stale2", secs(5.0)).unwrap().unwrap();
    assert!(!adapter.renew(&old, secs(5.0)).unwrap());
    assert!(!adapter.release(&old).unwrap());
    assert!(adapter.held("stale2").unwrap());
    assert!(adapter.release(&new).unwrap());
}

pub fn fencing_numbers_strictly_increase(f: Fixture) {
    let owners = [f.locks().clone(), f.owner()];
    let mut last = 0;
    for i in 0..6 {
        let o = &owners[i % 2];
        let hold = o.hold("fenced", opts(5.0, 1.0)).unwrap().expect("free");
        assert!(hold.fence() > last, "{} after {last}", hold.fence());
        last = hold.fence();
        hold.release().unwrap();
        assert!(o.acquire("fenced", secs(0.01)).unwrap());
        let fence = o.fence("fenced").unwrap();
        assert!(fence > last);
        last = fence;
        std::thread::sleep(secs(0.02)); // let it expire instead of releasing
    }
}

pub fn stop_flag_raised_elsewhere_trips_the_signal_within_a_tick(f: Fixture) {
    let a = f.locks();
    let b = f.owner();
    let signal = AbortSignal::new();
    let hold = a
        .hold(
            "worker",
            HoldOptions {
                stop_key: Some("stop:worker".into()),
                signal: Some(signal.clone()),
                ..opts(2.0, 0.1)
            },
        )
        .unwrap()
        .expect("free");
    std::thread::sleep(secs(0.15));
    assert!(!signal.is_aborted());
    let raised = Instant::now();
    b.set_flag("stop:worker", secs(30.0)).unwrap();
    assert!(signal.wait(Some(secs(1.0))), "no trip");
    let took = raised.elapsed();
    // tick = 0.1 s; allow scheduling slack on a loaded 2-core machine
    assert!(took <= secs(0.1 + 0.15), "tripped after {took:?}");
    assert!(
        signal.reason().unwrap().contains("stop:worker"),
        "{:?}",
        signal.reason()
    );
    assert!(!hold.is_lost(), "a stop is not a loss");
    assert!(a.held("worker").unwrap(), "still renewing until released");
    hold.release().unwrap();
    assert!(!b.held("worker").unwrap());
}

pub fn stop_flag_already_up_trips_at_once(f: Fixture) {
    let a = f.locks();
    a.set_flag("stop:early", secs(30.0)).unwrap();
    let hold = a
        .hold(
            "early",
            HoldOptions {
                stop_key: Some("stop:early".into()),
                ..opts(2.0, 1.0)
            },
        )
        .unwrap()
        .expect("free");
    assert!(hold.signal().wait(Some(secs(0.5))));
}

pub fn deleting_the_lease_trips_the_signal_as_lost(f: Fixture) {
    let a = f.locks();
    let hold = a.hold("victim", opts(0.3, 0.05)).unwrap().expect("free");
    std::thread::sleep(secs(0.06));
    let deleted = Instant::now();
    f.delete_lease("victim");
    assert!(hold.signal().wait(Some(secs(1.0))), "no trip");
    let took = deleted.elapsed();
    // renewals every min(0.05, 0.1) = 0.05 s: the next one finds it gone
    assert!(took <= secs(0.05 + 0.15), "tripped after {took:?}");
    assert!(hold.is_lost());
    let reason = hold.signal().reason().unwrap();
    assert!(reason.contains("lease lost"), "{reason}");
    assert_eq!(hold.release().unwrap(), ReleaseOutcome::Lost);
    // a lost holder deletes nothing: the next holder is safe
    let b = f.owner();
    assert!(b.acquire("victim", secs(5.0)).unwrap());
    drop(hold);
    assert!(b.held("victim").unwrap());
}

pub fn lease_taken_by_another_is_lost_not_restamped(f: Fixture) {
    let a = f.locks();
    let b = f.owner();
    let hold = a.hold("taken", opts(0.3, 0.05)).unwrap().expect("free");
    f.delete_lease("taken");
    assert!(b.acquire("taken", secs(5.0)).unwrap());
    assert!(hold.signal().wait(Some(secs(1.0))));
    assert!(hold.is_lost());
    assert_eq!(hold.release().unwrap(), ReleaseOutcome::Lost);
    assert!(b.held("taken").unwrap());
    assert!(b.release("taken").unwrap(), "b's token still owns it");
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

pub fn bad_arguments_are_clear_errors(f: Fixture) {
    use mistri_locks::Error;
    let a = f.locks();
    let bad = |r: mistri_locks::Result<bool>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(bad(a.acquire("", secs(1.0))));
    assert!(bad(a.acquire("k", Duration::ZERO)));
    assert!(bad(a.renew("", secs(1.0))));
    assert!(bad(a.release("")));
    assert!(bad(a.held("")));
    assert!(bad(a.flag("")));
    assert!(matches!(
        a.set_flag("", secs(1.0)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        a.set_flag("k", Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(a.clear_flag(""), Err(Error::InvalidArgument(_))));
    for o in [
        opts(0.0, 1.0),
        opts(1.0, 0.0),
        HoldOptions {
            stop_key: Some(String::new()),
            ..opts(1.0, 1.0)
        },
    ] {
        let err = a.hold("k", o).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
    assert!(matches!(
        a.hold("", opts(1.0, 1.0)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(!a.held("k").unwrap(), "a refused call took nothing");
}

macro_rules! contract {
    ($backend:ident, $make:expr) => {
        mod $backend {
            use super::*;
            contract!(@tests $make;
                acquire_once_and_refuse_while_live,
                fractional_ttl_expires_and_can_be_retaken,
                flags_set_read_clear_and_expire,
                hold_outlives_its_ttl_by_renewing,
                heartbeat_at_the_ttl_still_never_lapses,
                released_lease_is_gone_and_stays_gone,
                dropping_a_hold_releases_it,
                refused_hold_exists_nowhere_and_holder_keeps_its_lease,
                stale_owner_can_neither_renew_nor_release,
                fencing_numbers_strictly_increase,
                stop_flag_raised_elsewhere_trips_the_signal_within_a_tick,
                stop_flag_already_up_trips_at_once,
                deleting_the_lease_trips_the_signal_as_lost,
                lease_taken_by_another_is_lost_not_restamped,
                contending_threads_never_both_hold,
                bad_arguments_are_clear_errors,
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
