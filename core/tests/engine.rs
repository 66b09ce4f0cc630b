//! The heartbeat engine batches: holds due in the same tick share one
//! `Adapter::beat` call (one pipelined round trip on Redis).

use mistri_locks::{
    AbortSignal, Adapter, Beat, Error, HoldOptions, Lease, Locks, Memory, ReleaseOutcome, Renewal,
    Renewed, Result,
};
use mistri_locks_testkit::RedisServer;

mod common;
use common::{BeatHook, Wrapped};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Counter {
    beats: AtomicUsize,
    renewals: AtomicUsize,
    checks: AtomicUsize,
    stall_ms: AtomicUsize,
    poisoned: std::sync::Mutex<Option<String>>,
}

/// Memory, counting the engine's batches; it can stall them or fail one key.
type Counting = Wrapped<Counter>;

impl BeatHook for Counter {
    fn beat(
        &self,
        inner: &Memory,
        renewals: &[Renewal<'_>],
        flags: &[&str],
        deadline: Instant,
    ) -> Result<Beat> {
        self.beats.fetch_add(1, Ordering::SeqCst);
        self.renewals.fetch_add(renewals.len(), Ordering::SeqCst);
        self.checks.fetch_add(flags.len(), Ordering::SeqCst);
        if self.stall_ms.load(Ordering::SeqCst) > 0 {
            // A backend that ignores every deadline: the engine must not care.
            std::thread::sleep(Duration::from_millis(
                self.stall_ms.load(Ordering::SeqCst) as u64
            ));
            return Err(Error::Connection("stalled".into()));
        }
        let mut beat = inner.beat(renewals, flags, deadline)?;
        let poisoned = self.poisoned.lock().unwrap().clone();
        for (i, r) in renewals.iter().enumerate() {
            if poisoned.as_deref() == Some(r.lease.key()) {
                beat.renewals[i] = Err(Error::Backend("WRONGTYPE for this key only".into()));
            }
        }
        Ok(beat)
    }
}

#[test]
fn holds_due_together_share_one_beat() {
    let adapter = Arc::new(Counting::default());
    let locks = Locks::from_arc(adapter.clone());
    let heartbeat = Duration::from_millis(100);
    let holds: Vec<_> = (0..200)
        .map(|i| {
            let opts = HoldOptions {
                ttl: Duration::from_millis(600),
                heartbeat,
                stop_key: Some(format!("stop-{i}")),
                ..HoldOptions::default()
            };
            locks.hold(&format!("k{i}"), opts).unwrap().unwrap()
        })
        .collect();
    // Holds taken at different moments fall into one batch within two
    // intervals and stay there (hold engine's header, "Timers"). So the
    // window starts two intervals (plus one for slack) after the last hold
    // was taken, and ends once each hold was renewed and had its flag read
    // about 7 times more (about a second; however long a busy machine
    // takes, within a bound). In that window: a few dozen beats rather than
    // thousands. The counts are waited for, not asserted after a fixed
    // sleep: how many renewals fit in a second is the machine's speed.
    std::thread::sleep(3 * heartbeat);
    let counts = || {
        (
            adapter.beats.load(Ordering::SeqCst),
            adapter.renewals.load(Ordering::SeqCst),
            adapter.checks.load(Ordering::SeqCst),
        )
    };
    let (beats0, renewals0, checks0) = counts();
    let started = std::time::Instant::now();
    let (beats, renewals, checks) = loop {
        let (b, r, c) = counts();
        let (beats, renewals, checks) = (b - beats0, r - renewals0, c - checks0);
        if renewals >= 200 * 7 && checks >= 200 * 7 {
            break (beats, renewals, checks);
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "renewals {renewals}, checks {checks} after a minute"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        beats * 20 <= renewals,
        "{beats} beats for {renewals} renewals ({checks} flag reads)"
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
    let r = |lease, min_left| Renewal {
        lease,
        ttl,
        min_left,
    };
    let zero = Duration::ZERO;
    let deadline = Instant::now() + Duration::from_secs(5);
    let beat = adapter
        .beat(
            &[
                r(&a, zero),
                r(&stale, zero),
                r(&b, zero),
                r(&gone, zero),
                // More life asked for than the lease has left: refused.
                r(&a, Duration::from_secs(60)),
            ],
            &["up", "down"],
            deadline,
        )
        .unwrap();
    let renewed: Vec<Renewed> = beat.renewals.into_iter().map(|r| r.unwrap()).collect();
    use Renewed::*;
    assert_eq!(renewed, vec![Yes, NotHeld, Yes, NotHeld, TooLate]);
    let flags: Vec<bool> = beat.flags.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(flags, vec![true, false]);
    let empty = adapter.beat(&[], &[], deadline).unwrap();
    assert!(empty.renewals.is_empty() && empty.flags.is_empty());
    // A key of the wrong type fails that item only.
    let odd = Lease::new("odd", "t", 1);
    server.command("HSET mistri:test:lease:{odd} f v");
    let beat = adapter
        .beat(&[r(&odd, zero), r(&a, zero)], &[], deadline)
        .unwrap();
    assert!(
        matches!(beat.renewals[0], Err(Error::Backend(_))),
        "{beat:?}"
    );
    assert_eq!(*beat.renewals[1].as_ref().unwrap(), Yes);
}

#[test]
fn release_racing_the_heartbeat_never_restamps_or_reports_a_loss() {
    // Heartbeats every millisecond, releases at every phase of a tick.
    let locks = Locks::memory();
    let others: Vec<_> = (0..20)
        .map(|i| {
            // ttls far above a tick: a loaded machine must not make these
            // holds lose their leases (that would be correct, and beside the
            // point here).
            let opts = HoldOptions {
                ttl: Duration::from_millis(400),
                heartbeat: Duration::from_millis(1),
                ..HoldOptions::default()
            };
            locks.hold(&format!("busy-{i}"), opts).unwrap().unwrap()
        })
        .collect();
    for i in 0..300u64 {
        let opts = HoldOptions {
            ttl: Duration::from_millis(400),
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

fn hold_opts(ttl_ms: u64, heartbeat_ms: u64) -> HoldOptions {
    HoldOptions {
        ttl: Duration::from_millis(ttl_ms),
        heartbeat: Duration::from_millis(heartbeat_ms),
        ..HoldOptions::default()
    }
}

#[test]
fn a_stalled_backend_is_noticed_by_the_timer_not_by_the_io() {
    let adapter = Arc::new(Counting::default());
    let locks = Locks::from_arc(adapter.clone());
    let opts = HoldOptions {
        safety_margin: Some(Duration::from_millis(250)),
        ..hold_opts(1000, 100)
    };
    let hold = locks.hold("job", opts.clone()).unwrap().unwrap();
    let other = locks.hold("other", opts).unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let stalled = Instant::now();
    // Every beat from now on blocks for 5 s, far past every deadline.
    adapter.stall_ms.store(5000, Ordering::SeqCst);
    assert!(
        hold.signal().wait(Some(Duration::from_secs(3))),
        "never told"
    );
    let told = stalled.elapsed();
    // Safe deadline: last confirmed renewal (< 100 ms before the stall)
    // + ttl (1 s) - margin (250 ms): told within ~0.65-0.75 s.
    assert!(told < Duration::from_millis(800), "told after {told:?}");
    assert!(told > Duration::from_millis(500), "told early: {told:?}");
    let reason = hold.signal().reason().unwrap();
    assert!(reason.starts_with("lease lost:"), "{reason}");
    assert!(hold.is_lost() && other.is_lost());
    // Release does not wait for the stuck batch.
    let started = Instant::now();
    assert_eq!(other.release().unwrap(), ReleaseOutcome::Lost);
    assert!(started.elapsed() < Duration::from_millis(50));
    adapter.stall_ms.store(0, Ordering::SeqCst);
}

#[test]
fn release_returns_at_once_while_a_batch_hangs() {
    let adapter = Arc::new(Counting::default());
    let locks = Locks::from_arc(adapter.clone());
    let hold = locks.hold("job", hold_opts(3000, 50)).unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    adapter.stall_ms.store(1000, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100)); // a beat is now stuck
    let started = Instant::now();
    assert_eq!(hold.release().unwrap(), ReleaseOutcome::Released);
    assert!(
        started.elapsed() < Duration::from_millis(50),
        "{:?}",
        started.elapsed()
    );
    adapter.stall_ms.store(0, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(1100));
    assert!(
        !locks.held("job").unwrap(),
        "an in-flight renewal re-stamped it"
    );
}

#[test]
fn one_failing_item_does_not_condemn_the_others() {
    let adapter = Arc::new(Counting::default());
    let locks = Locks::from_arc(adapter.clone());
    *adapter.poisoned.lock().unwrap() = Some("bad".into());
    let bad = locks.hold("bad", hold_opts(400, 40)).unwrap().unwrap();
    let good: Vec<_> = (0..5)
        .map(|i| {
            locks
                .hold(&format!("good{i}"), hold_opts(400, 40))
                .unwrap()
                .unwrap()
        })
        .collect();
    assert!(bad.signal().wait(Some(Duration::from_secs(2))));
    let reason = bad.signal().reason().unwrap();
    assert!(
        reason.contains("WRONGTYPE"),
        "the item's error is named: {reason}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(good.iter().all(|h| !h.is_lost()));
}

#[test]
fn callbacks_run_on_the_notifier_and_cannot_stall_renewals() {
    let locks = Locks::memory();
    let signal = AbortSignal::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let locks2 = locks.clone();
    signal.on_abort(move |_| {
        let name = std::thread::current().name().map(str::to_owned);
        // A slow callback that also uses the engine.
        let again = locks2.hold("from-callback", hold_opts(300, 30)).unwrap();
        std::thread::sleep(Duration::from_millis(800));
        drop(again);
        tx.send(name).unwrap();
    });
    let stopped = locks
        .hold(
            "stopped",
            HoldOptions {
                stop_key: Some("stop".into()),
                signal: Some(signal.clone()),
                ..hold_opts(300, 30)
            },
        )
        .unwrap()
        .unwrap();
    let busy = locks.hold("busy", hold_opts(300, 30)).unwrap().unwrap();
    locks.set_flag("stop", Duration::from_secs(5)).unwrap();
    assert!(signal.wait(Some(Duration::from_secs(1))), "latched at once");
    let name = rx.recv_timeout(Duration::from_secs(3)).unwrap();
    assert_eq!(name.as_deref(), Some("mistri-notifier"));
    // While the callback slept for 0.8 s (more than the 0.3 s ttl), renewals went on.
    assert!(!busy.is_lost(), "{:?}", busy.signal().reason());
    assert!(!stopped.is_lost());
}

#[test]
fn durations_below_the_engines_resolution() {
    let adapter = Arc::new(Counting::default());
    let locks = Locks::from_arc(adapter.clone());
    let tiny = HoldOptions {
        heartbeat: Duration::from_nanos(1),
        ..hold_opts(300, 0)
    };
    let hold = locks.hold("tiny", tiny).unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let beats = adapter.beats.load(Ordering::SeqCst);
    // A 1 ns heartbeat is a 1 ms heartbeat: a few hundred beats, not millions.
    assert!(beats <= 400, "{beats} beats in 0.3 s");
    assert!(!hold.is_lost());
    let err = locks.hold("short", hold_opts(5, 1)).unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument(_)) && err.to_string().contains("ttl"),
        "{err}"
    );
    let err = locks
        .hold(
            "margin",
            HoldOptions {
                safety_margin: Some(Duration::from_millis(500)),
                ..hold_opts(1000, 100)
            },
        )
        .unwrap_err();
    assert!(err.to_string().contains("safety_margin"), "{err}");
}

#[test]
fn the_protocol_document_carries_the_exact_renew_and_release_scripts() {
    let doc = include_str!("../../docs/PROTOCOL.md");
    assert!(
        doc.contains(mistri_locks::internals::RENEW_LUA),
        "RENEW_LUA"
    );
    assert!(
        doc.contains(mistri_locks::internals::RELEASE_LUA),
        "RELEASE_LUA"
    );
}
