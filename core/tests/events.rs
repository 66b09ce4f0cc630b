//! Counters and hold events (`mistri_locks::stats`): each moves when it
//! should, hooks run on the notifier thread (never a heartbeat thread), and
//! a removed hook hears nothing more.

use mistri_locks::{Adapter, Beat, Error, HoldOptions, Locks, Memory, Renewal, Result};
use mistri_locks::{Event, EventKind, LostCause};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{BeatHook, Wrapped};

/// Memory whose beats fail while `failing` is set.
#[derive(Default)]
struct Unplug {
    failing: AtomicBool,
}

type Flaky = Wrapped<Unplug>;

impl BeatHook for Unplug {
    fn beat(
        &self,
        inner: &Memory,
        renewals: &[Renewal<'_>],
        flags: &[&str],
        deadline: Instant,
    ) -> Result<Beat> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(Error::Connection("unplugged".into()));
        }
        inner.beat(renewals, flags, deadline)
    }
}

/// Records every event with the name of the thread it ran on.
fn record(
    locks: &Locks,
) -> (
    mpsc::Receiver<(Event, String)>,
    mistri_locks::EventHookHandle,
) {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let handle = locks.on_event(move |e| {
        let name = std::thread::current().name().unwrap_or("").to_owned();
        let _ = tx.lock().unwrap().send((e.clone(), name));
    });
    (rx, handle)
}

fn next(rx: &mpsc::Receiver<(Event, String)>, kind: EventKind) -> Event {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let (event, thread) = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no {kind:?} event"));
        assert_eq!(thread, "mistri-notifier", "{event:?} ran on {thread:?}");
        if event.kind == kind {
            return event;
        }
    }
}

fn fast() -> HoldOptions {
    HoldOptions {
        ttl: Duration::from_millis(300),
        heartbeat: Duration::from_millis(20),
        ..HoldOptions::default()
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn renewals_and_beats_are_counted_with_round_trip_times() {
    let locks = Locks::memory();
    let before = locks.stats();
    assert_eq!(before.renewals_sent, 0);
    assert_eq!(before.beat_rtt_p50, None);
    let hold = locks.hold("renewing", fast()).unwrap().unwrap();
    assert_eq!(locks.stats().holds_active, 1);
    wait_until("renewals", || locks.stats().renewals_confirmed >= 3);
    let s = locks.stats();
    assert!(s.renewals_sent >= s.renewals_confirmed);
    assert!(s.beats >= 3);
    let (p50, p99) = (s.beat_rtt_p50.unwrap(), s.beat_rtt_p99.unwrap());
    assert!(
        p50 <= p99 && p99 < Duration::from_secs(1),
        "{p50:?} {p99:?}"
    );
    hold.release().unwrap();
    let s = locks.stats();
    assert_eq!(
        (s.holds_active, s.holds_acquired, s.holds_released),
        (0, 1, 1)
    );
    // the names every face uses
    let names: Vec<_> = s.entries().into_iter().map(|(n, _)| n).collect();
    for name in [
        "renewals_sent",
        "renewals_failed",
        "beats",
        "beat_rtt_p50",
        "beat_rtt_p99",
        "lost_not_held",
        "lost_too_late",
        "lost_deadline",
        "stop_flags_seen",
        "holds_active",
    ] {
        assert!(names.contains(&name), "{name}");
    }
}

#[test]
fn acquired_refused_released_and_a_removed_hook_hears_nothing() {
    let locks = Locks::memory();
    let other = locks.new_owner();
    let (rx, handle) = record(&locks);
    let (other_rx, _) = record(&other);
    let hold = locks.hold("k", fast()).unwrap().unwrap();
    let e = next(&rx, EventKind::Acquired);
    assert_eq!((e.key.as_str(), e.fence), ("k", hold.fence()));
    assert!(other.hold("k", fast()).unwrap().is_none());
    let e = next(&other_rx, EventKind::Refused);
    assert_eq!((e.key.as_str(), e.fence), ("k", 0));
    assert_eq!(other.stats().holds_refused, 1);
    hold.release().unwrap();
    next(&rx, EventKind::Released);

    assert!(locks.remove_event_hook(handle));
    assert!(!locks.remove_event_hook(handle));
    locks.hold("k", fast()).unwrap().unwrap().release().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(rx.try_recv().is_err(), "a removed hook got an event");
    assert_eq!(locks.stats().holds_acquired, 2);
}

#[test]
fn a_broken_lease_is_lost_not_held() {
    let locks = Locks::memory();
    let (rx, _) = record(&locks);
    let hold = locks.hold("victim", fast()).unwrap().unwrap();
    assert!(locks.new_owner().break_lease("victim").unwrap());
    let e = next(&rx, EventKind::Lost);
    assert_eq!(e.cause, Some(LostCause::NotHeld));
    assert_eq!(e.key, "victim");
    assert!(e.reason.unwrap().starts_with("lease lost:"));
    let s = locks.stats();
    assert_eq!(
        (s.lost_not_held, s.lost_too_late, s.lost_deadline),
        (1, 0, 0)
    );
    assert_eq!(s.holds_active, 0);
    assert!(hold.is_lost());
}

#[test]
fn a_stop_flag_is_seen_and_stops() {
    let locks = Locks::memory();
    let (rx, _) = record(&locks);
    let opts = HoldOptions {
        stop_key: Some("stop:w".into()),
        ..fast()
    };
    let hold = locks.hold("w", opts).unwrap().unwrap();
    locks.set_flag("stop:w", Duration::from_secs(5)).unwrap();
    let e = next(&rx, EventKind::Stopped);
    assert_eq!(e.key, "w");
    assert!(e.reason.unwrap().contains("stop:w"));
    assert_eq!(locks.stats().stop_flags_seen, 1);
    assert!(hold.signal().is_aborted());
    hold.release().unwrap();
}

#[test]
fn failures_put_a_hold_at_risk_then_late_then_lost_by_deadline() {
    let adapter = Arc::new(Flaky::default());
    let locks = Locks::from_arc(adapter.clone());
    let (rx, _) = record(&locks);
    let opts = HoldOptions {
        ttl: Duration::from_millis(600),
        heartbeat: Duration::from_millis(30),
        ..HoldOptions::default()
    };
    let hold = locks.hold("shaky", opts).unwrap().unwrap();
    adapter.failing.store(true, Ordering::SeqCst);
    let e = next(&rx, EventKind::AtRisk);
    assert!(e.reason.unwrap().contains("unplugged"));
    wait_until("two failures", || locks.stats().renewals_failed >= 2);
    adapter.failing.store(false, Ordering::SeqCst);
    next(&rx, EventKind::RenewedLate);
    assert!(locks.stats().renewals_late >= 1);
    assert!(!hold.is_lost());

    adapter.failing.store(true, Ordering::SeqCst);
    next(&rx, EventKind::AtRisk);
    let e = next(&rx, EventKind::Lost);
    assert_eq!(e.cause, Some(LostCause::Deadline));
    let s = locks.stats();
    assert_eq!(s.lost_deadline, 1);
    assert!(s.beats_failed >= 2);
}

#[test]
fn a_panicking_hook_does_not_stop_the_others() {
    let locks = Locks::memory();
    locks.on_event(|_| panic!("hook panics"));
    let (rx, _) = record(&locks);
    locks.hold("p", fast()).unwrap().unwrap().release().unwrap();
    next(&rx, EventKind::Acquired);
    next(&rx, EventKind::Released);
}
