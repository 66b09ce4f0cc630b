//! One key grammar (issue 28 §7): keys, stop keys, namespaces and labels
//! get the same answer on every backend (`args.rs`: a byte limit, no NUL,
//! no `}` first for the Redis Cluster hash tag), a bad stop key is refused
//! when the hold starts, and one hold's input never costs another hold its
//! lease (a NUL stop key used to break a Postgres process's batched beat).

mod common;
use common::*;
use mistri_locks::{Error, HoldOptions, Locks, Postgres, Redis, MAX_NAME_BYTES};
use mistri_locks_testkit::{PgServer, RedisServer};
use std::time::Duration;

fn refused<T: std::fmt::Debug>(r: mistri_locks::Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument(_)))
}

fn same_answers(locks: &Locks) {
    let long = "k".repeat(MAX_NAME_BYTES + 1);
    for bad in ["", "a\0b", "}x", long.as_str()] {
        assert!(refused(locks.acquire(bad, secs(5.0))), "acquire {bad:?}");
        assert!(refused(locks.held(bad)), "held {bad:?}");
        assert!(refused(locks.set_flag(bad, secs(5.0))), "set_flag {bad:?}");
        assert!(refused(locks.hold(bad, opts(5.0, 1.0))), "hold {bad:?}");
        let stop = HoldOptions {
            stop_key: Some(bad.to_owned()),
            ..opts(5.0, 1.0)
        };
        assert!(refused(locks.hold("k", stop)), "stop key {bad:?}");
    }
    for bad in ["a\0b", "a\u{1f}b", long.as_str()] {
        let label = HoldOptions {
            label: Some(bad.to_owned()),
            ..opts(5.0, 1.0)
        };
        assert!(refused(locks.hold("k", label)), "label {bad:?}");
    }
    assert!(!locks.held("k").unwrap(), "nothing was taken");
    // The longest key, and keys with braces, spaces and non-ASCII, work.
    let longest = "k".repeat(MAX_NAME_BYTES);
    for good in [longest.as_str(), "x}", "{a}b", "job 7: ü ✓"] {
        assert!(locks.acquire(good, secs(5.0)).unwrap(), "{good:?}");
        assert!(locks.held(good).unwrap(), "{good:?}");
        assert!(locks.release(good).unwrap(), "{good:?}");
        let stop = HoldOptions {
            stop_key: Some(good.to_owned()),
            ..opts(5.0, 1.0)
        };
        let hold = locks.hold("k", stop).unwrap().expect("free");
        locks.set_flag(good, secs(5.0)).unwrap();
        assert!(hold.signal().wait(Some(secs(3.0))), "stop {good:?} heard");
        hold.release().unwrap();
        locks.clear_flag(good).unwrap();
    }
}

#[test]
fn every_backend_gives_the_same_answers() {
    same_answers(&Locks::memory());
    let dir = std::env::temp_dir().join(mistri_locks_testkit::unique("mistri-grammar"));
    same_answers(&Locks::local(Some(&dir.join("locks.db"))).unwrap());
    let _ = std::fs::remove_dir_all(dir);
    let redis = RedisServer::start();
    same_answers(&Locks::redis(&redis.url(), "mistri:grammar").unwrap());
    let pg = PgServer::start();
    same_answers(&Locks::new(Postgres::open(&pg.url(), "grammar").unwrap()));
    for bad in ["", "a\0b", "a{b", "a}b"] {
        assert!(refused(Redis::open(&redis.url(), bad).map(drop)), "{bad:?}");
        assert!(refused(Postgres::open(&pg.url(), bad).map(drop)), "{bad:?}");
    }
}

#[test]
fn a_bad_stop_key_costs_no_other_hold_its_lease() {
    // Postgres renews every hold of a process in one batched statement: a
    // NUL in one hold's stop key failed the whole batch, and every hold
    // was told lost. Now the bad stop key is refused at the start.
    let pg = PgServer::start();
    let locks = Locks::new(Postgres::open(&pg.url(), "grammar").unwrap());
    let good = locks.hold("good", opts(0.8, 0.05)).unwrap().expect("free");
    let bad = HoldOptions {
        stop_key: Some("stop\0me".into()),
        ..opts(0.8, 0.05)
    };
    let started = locks.hold("bad", bad);
    // Two ttls: a failing batch would have lost it long before.
    std::thread::sleep(Duration::from_millis(1600));
    assert!(!good.is_lost(), "{:?}", good.signal().reason());
    assert!(
        refused(started.map(drop)),
        "a NUL stop key is refused at the start"
    );
    assert!(locks.held("good").unwrap());
    good.release().unwrap();
}
