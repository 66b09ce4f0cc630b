//! The heartbeat engine batches: holds due in the same tick share one
//! `Adapter::beat` call (one pipelined round trip on Redis).

use mistri_locks::{Adapter, Beat, HoldOptions, Lease, Locks, Memory, Result};
use mistri_locks_testkit::RedisServer;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Default)]
struct Counting {
    inner: Memory,
    beats: AtomicUsize,
    renewals: AtomicUsize,
    checks: AtomicUsize,
}

impl Adapter for Counting {
    fn name(&self) -> &'static str {
        "counting"
    }
    fn acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lease>> {
        self.inner.acquire(key, ttl)
    }
    fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool> {
        self.inner.renew(lease, ttl)
    }
    fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease)
    }
    fn held(&self, key: &str) -> Result<bool> {
        self.inner.held(key)
    }
    fn break_lease(&self, key: &str) -> Result<bool> {
        self.inner.break_lease(key)
    }
    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()> {
        self.inner.set_flag(key, ttl)
    }
    fn flag(&self, key: &str) -> Result<bool> {
        self.inner.flag(key)
    }
    fn clear_flag(&self, key: &str) -> Result<()> {
        self.inner.clear_flag(key)
    }
    fn beat(&self, renewals: &[(&Lease, Duration)], flags: &[&str]) -> Result<Beat> {
        self.beats.fetch_add(1, Ordering::SeqCst);
        self.renewals.fetch_add(renewals.len(), Ordering::SeqCst);
        self.checks.fetch_add(flags.len(), Ordering::SeqCst);
        self.inner.beat(renewals, flags)
    }
}

#[test]
fn holds_due_together_share_one_beat() {
    let adapter = Arc::new(Counting::default());
    let locks = Locks::from_arc(adapter.clone());
    let holds: Vec<_> = (0..200)
        .map(|i| {
            let opts = HoldOptions {
                ttl: Duration::from_millis(600),
                heartbeat: Duration::from_millis(100),
                stop_key: Some(format!("stop-{i}")),
                ..HoldOptions::default()
            };
            locks.hold(&format!("k{i}"), opts).unwrap().unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1000));
    let beats = adapter.beats.load(Ordering::SeqCst);
    let renewals = adapter.renewals.load(Ordering::SeqCst);
    let checks = adapter.checks.load(Ordering::SeqCst);
    // 200 holds renewing every 0.1 s for 1 s: ~2,000 renewals and ~2,000
    // flag reads, in a few dozen beats rather than thousands.
    assert!(renewals >= 200 * 7, "renewals {renewals}");
    assert!(checks >= 200 * 7, "checks {checks}");
    assert!(
        beats * 20 <= renewals,
        "{beats} beats for {renewals} renewals"
    );
    assert!(holds.iter().all(|h| !h.is_lost()));
}

#[test]
fn redis_beat_answers_each_item_in_order() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:test").unwrap();
    let adapter = locks.adapter();
    let ttl = Duration::from_secs(5);
    let a = adapter.acquire("a", ttl).unwrap().unwrap();
    let b = adapter.acquire("b", ttl).unwrap().unwrap();
    let stale = Lease::new("b", "not-the-token", b.fence());
    let gone = Lease::new("never", "x", 1);
    adapter.set_flag("up", ttl).unwrap();
    let beat = adapter
        .beat(
            &[(&a, ttl), (&stale, ttl), (&b, ttl), (&gone, ttl)],
            &["up", "down"],
        )
        .unwrap();
    assert_eq!(beat.renewed, vec![true, false, true, false]);
    assert_eq!(beat.flags, vec![true, false]);
    let empty = adapter.beat(&[], &[]).unwrap();
    assert!(empty.renewed.is_empty() && empty.flags.is_empty());
}

#[test]
fn release_racing_the_heartbeat_never_restamps_or_reports_a_loss() {
    // Heartbeats every millisecond, releases at every phase of a tick.
    let locks = Locks::memory();
    let others: Vec<_> = (0..20)
        .map(|i| {
            let opts = HoldOptions {
                ttl: Duration::from_millis(50),
                heartbeat: Duration::from_millis(1),
                ..HoldOptions::default()
            };
            locks.hold(&format!("busy-{i}"), opts).unwrap().unwrap()
        })
        .collect();
    for i in 0..300u64 {
        let opts = HoldOptions {
            ttl: Duration::from_millis(30),
            heartbeat: Duration::from_millis(1),
            ..HoldOptions::default()
        };
        let hold = locks.hold("racing", opts).unwrap().expect("free");
        std::thread::sleep(Duration::from_micros((i * 37) % 2000));
        assert_eq!(
            hold.release().unwrap(),
            mistri_locks::ReleaseOutcome::Released
        );
        assert!(
            !hold.signal().is_aborted(),
            "release reported as {:?}",
            hold.signal().reason()
        );
        assert!(!locks.held("racing").unwrap(), "re-stamped after release");
    }
    assert!(others.iter().all(|h| !h.is_lost()));
}
