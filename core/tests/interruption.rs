//! `Hold::interruption`: why a hold's work should stop, typed, so no face
//! reads the signal's reason text (issue 40). On Memory: the engine's
//! paths are the same on every backend.

use mistri_locks::{AbortSignal, HoldOptions, Interruption, Locks, LostCause};
use std::time::Duration;

fn opts(stop_key: Option<&str>, signal: Option<AbortSignal>) -> HoldOptions {
    HoldOptions {
        ttl: Duration::from_secs(3),
        heartbeat: Duration::from_millis(20),
        stop_key: stop_key.map(str::to_owned),
        signal,
        ..HoldOptions::default()
    }
}

/// The protocol's bound for a hold to hear of a flag or a loss: a tick
/// (20 ms here) plus the renewal interval, with room for a busy machine.
const TOLD: Duration = Duration::from_secs(10);

#[test]
fn none_while_the_signal_is_not_tripped() {
    let locks = Locks::memory();
    let hold = locks
        .hold("i:none", opts(Some("i:none:stop"), None))
        .unwrap()
        .unwrap();
    assert_eq!(hold.interruption(), None);
    hold.release().unwrap();
}

#[test]
fn a_raised_stop_flag_is_stopped_with_its_key() {
    let locks = Locks::memory();
    let hold = locks
        .hold("i:stop", opts(Some("job:7:stop"), None))
        .unwrap()
        .unwrap();
    locks
        .set_flag("job:7:stop", Duration::from_secs(60))
        .unwrap();
    assert!(hold.signal().wait(Some(TOLD)));
    let i = hold.interruption().expect("tripped");
    assert_eq!(
        i,
        Interruption::Stopped {
            flag: Some("job:7:stop".into())
        }
    );
    assert_eq!((i.name(), i.is_lost()), ("stopped", false));
    hold.release().unwrap();
}

#[test]
fn the_callers_own_abort_is_stopped_without_a_flag() {
    let locks = Locks::memory();
    let signal = AbortSignal::new();
    let hold = locks
        .hold("i:abort", opts(Some("i:abort:stop"), Some(signal.clone())))
        .unwrap()
        .unwrap();
    signal.abort(Some("shutting down"));
    assert_eq!(
        hold.interruption(),
        Some(Interruption::Stopped { flag: None })
    );
    hold.release().unwrap();
}

#[test]
fn a_broken_lease_is_lost_with_its_cause() {
    let locks = Locks::memory();
    let hold = locks
        .hold("i:lost", opts(Some("i:lost:stop"), None))
        .unwrap()
        .unwrap();
    assert!(locks.break_lease("i:lost").unwrap());
    assert!(hold.signal().wait(Some(TOLD)));
    let i = hold.interruption().expect("tripped");
    assert_eq!(
        i,
        Interruption::Lost {
            cause: Some(LostCause::NotHeld)
        }
    );
    assert_eq!((i.name(), i.is_lost()), ("lost", true));
    // A flag raised after the loss does not turn it into a stop.
    locks
        .set_flag("i:lost:stop", Duration::from_secs(60))
        .unwrap();
    assert!(hold.interruption().unwrap().is_lost());
    let _ = hold.release();
}

#[test]
fn stop_holders_raises_each_holders_stop_key_once() {
    use mistri_locks::StopOutcome;
    let locks = Locks::memory();
    let minute = Duration::from_secs(60);
    assert_eq!(
        locks.stop_holders("s:none", minute).unwrap(),
        StopOutcome::NotHeld
    );
    let plain = locks.hold("s:plain", opts(None, None)).unwrap().unwrap();
    assert_eq!(
        locks.stop_holders("s:plain", minute).unwrap(),
        StopOutcome::NoStopKey
    );
    let a = locks
        .hold("s:job", opts(Some("billing:stop"), None))
        .unwrap()
        .unwrap();
    assert_eq!(
        locks.stop_holders_within("s:job", "s:", minute).unwrap(),
        StopOutcome::Outside {
            stop_key: "billing:stop".into()
        }
    );
    assert!(
        !locks.flag("billing:stop").unwrap(),
        "nothing raised outside the prefix"
    );
    assert_eq!(
        locks.stop_holders("s:job", minute).unwrap(),
        StopOutcome::Raised(vec!["billing:stop".into()])
    );
    assert!(a.signal().wait(Some(TOLD)));
    assert_eq!(locks.stop_job("42", minute).unwrap(), "job:42:stop");
    assert!(locks.flag("job:42:stop").unwrap());
    plain.release().unwrap();
    a.release().unwrap();
}
