//! Unit tests of [`super::Locks`].

use super::*;
use std::thread::sleep;

const LONG: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(20);
const PAST_SHORT: Duration = Duration::from_millis(80);

#[test]
fn memory_plain_leases_answer_for_their_owner_only() {
    let a = Locks::memory();
    let b = a.new_owner();
    assert!(a.acquire("k", LONG).unwrap());
    assert!(!b.release("k").unwrap());
    assert!(!b.renew("k", LONG).unwrap());
    assert_eq!(b.fence("k"), None);
    let first = a.fence("k").unwrap();
    assert!(a.renew("k", LONG).unwrap());
    assert_eq!(a.fence("k"), Some(first));
    assert!(a.release("k").unwrap());
    assert!(!a.release("k").unwrap());
    assert!(!a.renew("k", LONG).unwrap());
    assert_eq!(a.fence("k"), None);

    // Expired and taken over: the old owner can neither release nor
    // renew, and no longer has a fence there.
    assert!(a.acquire("k", SHORT).unwrap());
    sleep(PAST_SHORT);
    assert!(b.acquire("k", LONG).unwrap());
    assert!(!a.release("k").unwrap());
    assert!(!a.renew("k", LONG).unwrap());
    assert_eq!(a.fence("k"), None);
    assert!(b.fence("k").unwrap() > first);
    assert!(b.held("k").unwrap());

    // Expired, nobody took it: the fence stays until a release or
    // renewal finds it gone (as with the issued-lease map).
    assert!(a.acquire("x", SHORT).unwrap());
    sleep(PAST_SHORT);
    assert!(a.fence("x").is_some());
    assert!(!a.release("x").unwrap());
    assert_eq!(a.fence("x"), None);
    assert!(a.acquire("y", SHORT).unwrap());
    sleep(PAST_SHORT);
    assert!(!a.renew("y", LONG).unwrap());
    assert_eq!(a.fence("y"), None);
}

#[test]
fn memory_plain_and_token_leases_of_one_owner_do_not_mix() {
    let a = Locks::memory();
    // A hold's lease (a token lease the engine renews) is not a plain
    // lease of its Locks.
    let opts = HoldOptions {
        ttl: LONG,
        heartbeat: Duration::from_secs(1),
        ..HoldOptions::default()
    };
    let hold = a.hold("h", opts).unwrap().expect("free");
    assert!(!a.release("h").unwrap());
    assert!(!a.renew("h", LONG).unwrap());
    assert!(a.held("h").unwrap());
    drop(hold);

    // A waiting acquire keeps its lease in the issued map; a plain
    // acquire after it expired replaces it.
    let waiting = AcquireOptions {
        wait: Some(Duration::from_millis(10)),
        ..AcquireOptions::default()
    };
    assert!(a.acquire_with("w", SHORT, &waiting).unwrap());
    let first = a.fence("w").unwrap();
    sleep(PAST_SHORT);
    assert!(a.acquire("w", LONG).unwrap());
    assert!(a.fence("w").unwrap() > first);
    assert!(a.release("w").unwrap());
    assert_eq!(a.fence("w"), None);
    assert!(!a.release("w").unwrap());

    // And the other way round.
    assert!(a.acquire("v", SHORT).unwrap());
    let first = a.fence("v").unwrap();
    sleep(PAST_SHORT);
    assert!(a.acquire_with("v", LONG, &waiting).unwrap());
    assert!(a.fence("v").unwrap() > first);
    assert!(a.renew("v", LONG).unwrap());
    assert!(a.release("v").unwrap());
    assert_eq!(a.fence("v"), None);
    assert!(!a.held("v").unwrap());
}

fn label_of(locks: &Locks, key: &str) -> String {
    let info = locks.info(key).unwrap().expect("held");
    info.holder.expect("described").label
}

#[test]
fn memory_plain_leases_carry_the_current_label() {
    let a = Locks::memory();
    let b = a.new_owner();
    a.set_label(Some("first")).unwrap();
    assert!(a.acquire("k", LONG).unwrap());
    assert_eq!(label_of(&a, "k"), "first");
    assert!(a.release("k").unwrap());
    a.set_label(Some("second")).unwrap();
    assert!(a.acquire("k", LONG).unwrap()); // the entry is reused
    assert_eq!(label_of(&a, "k"), "second");
    assert!(a.release("k").unwrap());
    b.set_label(Some("other")).unwrap();
    assert!(b.acquire("k", LONG).unwrap());
    assert_eq!(label_of(&a, "k"), "other");
    assert!(b.release("k").unwrap());
    assert!(a.acquire("k", LONG).unwrap());
    assert_eq!(label_of(&a, "k"), "second");
    assert!(a.release("k").unwrap());
    a.set_label(None).unwrap();
    assert!(a.acquire("k", LONG).unwrap());
    assert_eq!(label_of(&a, "k"), default_label());
    // A held entry's label is what it was acquired with.
    a.set_label(Some("later")).unwrap();
    assert_eq!(label_of(&a, "k"), default_label());
}

/// A family added to the table opens through `open_as` with no other
/// change: `probe://` exists only in this test build.
#[test]
fn a_new_family_opens_through_the_one_path() {
    let (family, locks) =
        crate::Locks::open_as("probe://", &crate::backend::OpenOptions::new()).unwrap();
    assert_eq!(family, crate::backend::Family::Probe);
    assert_eq!(family.name(), "probe");
    assert!(locks.acquire("k", Duration::from_secs(5)).unwrap());
    assert!(locks.held("k").unwrap());
    // Its options are checked by the same table as every other row.
    let err =
        crate::Locks::open_as("probe://?x=1", &crate::backend::OpenOptions::new()).unwrap_err();
    assert!(
        matches!(err, crate::error::Error::InvalidArgument(_)),
        "{err}"
    );
    let err = crate::Locks::open_as("probe://", &crate::backend::OpenOptions::new().schema("s"))
        .unwrap_err();
    assert!(err.to_string().contains("opens Probe"), "{err}");
}
