use crate::{AcquireOptions, HoldOptions, Locks};
use std::time::{Duration, Instant};

#[test]
fn a_waiting_acquire_gets_the_lease_when_it_is_released() {
    let locks = Locks::memory();
    let other = locks.new_owner();
    assert!(locks.acquire("k", Duration::from_secs(10)).unwrap());
    let t = std::thread::spawn(move || {
        let opts = AcquireOptions {
            wait: Some(Duration::from_secs(10)),
            ..AcquireOptions::default()
        };
        other
            .acquire_with("k", Duration::from_secs(10), &opts)
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(locks.release("k").unwrap());
    assert!(t.join().unwrap());
}

#[test]
fn an_owner_whose_own_lease_lapsed_takes_it_again_with_a_wait() {
    let locks = Locks::memory();
    let waiting = |limit| AcquireOptions {
        wait: Some(Duration::from_millis(300)),
        limit,
        ..AcquireOptions::default()
    };
    for limit in [1, 2] {
        let key = format!("k{limit}");
        let opts = waiting(limit);
        let short = AcquireOptions {
            wait: None,
            ..opts.clone()
        };
        assert!(locks
            .acquire_with(&key, Duration::from_millis(50), &short)
            .unwrap());
        let first = locks.fence(&key).unwrap();
        if limit > 1 {
            // Still live: one owner takes one slot, not two.
            assert!(!locks
                .acquire_with(&key, Duration::from_secs(5), &short)
                .unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
        assert!(locks
            .acquire_with(&key, Duration::from_secs(5), &opts)
            .unwrap());
        assert!(locks.fence(&key).unwrap() > first);
    }
}

#[test]
fn a_wait_that_runs_out_is_a_refusal() {
    let locks = Locks::memory();
    assert!(locks.acquire("k", Duration::from_secs(10)).unwrap());
    let opts = HoldOptions {
        wait: Some(Duration::from_millis(100)),
        ..HoldOptions::default()
    };
    let started = Instant::now();
    assert!(locks.new_owner().hold("k", opts).unwrap().is_none());
    assert!(started.elapsed() >= Duration::from_millis(100));
}

/// The rung tries the hook below heard: key, fence, time since the ring.
static HEARD: std::sync::Mutex<Vec<(String, Option<u64>, Duration)>> =
    std::sync::Mutex::new(Vec::new());

fn heard(key: &str, _line: &str, fence: Option<u64>, since_ring: Duration) {
    if key.starts_with("observed-") {
        HEARD
            .lock()
            .unwrap()
            .push((key.to_owned(), fence, since_ring));
    }
}

#[test]
fn a_try_a_ring_caused_is_reported_and_a_timers_is_not() {
    crate::internals::observe_rung_tries(heard);
    let locks = Locks::memory();
    let waiting = AcquireOptions {
        wait: Some(Duration::from_secs(10)),
        ..AcquireOptions::default()
    };
    // Released: the head is rung for the release's fence.
    assert!(locks
        .acquire("observed-release", Duration::from_secs(10))
        .unwrap());
    let fence = locks.fence("observed-release").unwrap();
    let other = locks.new_owner();
    let opts = waiting.clone();
    let t = std::thread::spawn(move || {
        other
            .acquire_with("observed-release", Duration::from_secs(10), &opts)
            .unwrap()
    });
    // Released once the waiter is in line (a release before it would
    // ring nobody).
    let deadline = Instant::now() + Duration::from_secs(10);
    let queued = || {
        let mut listing = locks.list("observed-release").unwrap();
        listing.sort();
        listing.waiting_for("observed-release").is_some()
    };
    while !queued() {
        assert!(Instant::now() < deadline, "the waiter never queued");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(locks.release("observed-release").unwrap());
    assert!(t.join().unwrap());
    // Lapsed (nobody released it): the head's timer tries, no ring.
    assert!(locks
        .acquire("observed-lapse", Duration::from_millis(100))
        .unwrap());
    assert!(locks
        .new_owner()
        .acquire_with("observed-lapse", Duration::from_secs(10), &waiting)
        .unwrap());
    let heard = HEARD.lock().unwrap().clone();
    assert!(
        heard
            .iter()
            .any(|(k, f, _)| k == "observed-release" && *f == Some(fence)),
        "{heard:?}"
    );
    assert!(
        !heard.iter().any(|(k, _, _)| k == "observed-lapse"),
        "{heard:?}"
    );
}

/// A line whose last waiter left without the lease after queueing is
/// forgotten by the backend (`leave_queue`) outside the registry's lock.
/// A line of the key that starts before that forget was answered gets a
/// new id: with the old one, its first try could queue it just before the
/// forget arrived and took the entry away (found by the soak: a wait ran
/// out on a free key, its line waiting to be told while it was not
/// queued). Once the forget is answered the id is taken again (its
/// subscription may still be live).
#[test]
fn a_lines_id_is_taken_again_only_once_the_backend_forgot_it() {
    use super::lines::{join, leave, Bell, Handoff};
    use std::sync::Arc;
    let adapter: Arc<dyn crate::Adapter> = Arc::new(crate::Memory::new());
    let key: Arc<str> = Arc::from("forgotten");
    let left_after_trying = || Handoff {
        ring: false,
        seen: None,
        lapse: None,
        refresh_at: None,
        acquired: false,
        tried: true,
    };
    let first = join(&adapter, &key, &Arc::new(Bell::default()));
    let forget = leave(&first, &key, left_after_trying()).expect("it queued: to be forgotten");
    // The forget is in flight: a new line of the key takes a new id.
    let meanwhile = join(&adapter, &key, &Arc::new(Bell::default()));
    assert_ne!(meanwhile.line, first.line);
    leave(&meanwhile, &key, left_after_trying())
        .expect("it queued too")
        .done();
    forget.done();
    // Both forgotten: the id forgotten last is taken again.
    let again = join(&adapter, &key, &Arc::new(Bell::default()));
    assert_eq!(again.line, first.line);
    let never_tried = Handoff {
        tried: false,
        ..left_after_trying()
    };
    assert!(leave(&again, &key, never_tried).is_none());
}
