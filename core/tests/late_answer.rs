//! An answer that arrives after the ttl promises nothing: `Locks::acquire`
//! and `Locks::renew` answer `false` when the backend's `true` came later
//! than `sent + ttl` (the backend applied the call somewhere between the
//! send and the answer, so the lease is only known to live until
//! `sent + ttl`; past it, another owner may already hold the key). Found
//! by the MariaDB long run: with a 5 s I/O timeout, one plain acquire was
//! answered 1.32 s after it was sent, for a shorter ttl, and the history
//! checker saw two holders.
//!
//! On a real redis-server behind the testkit's [`Proxy`], slowed so that a
//! round trip takes longer than the ttl:
//!
//! ```text
//! cargo test -p mistri_locks_core --test late_answer
//! ```

mod common;
use common::*;
use mistri_locks::{Locks, Redis};
use mistri_locks_testkit::{unique, Proxy, RedisServer};
use std::time::{Duration, Instant};

const NS: &str = "mistri:late-answer";

#[test]
fn an_acquire_answered_after_its_ttl_is_refused_and_one_within_it_is_held() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let slow = Locks::new(Redis::with_timeout(&proxy.url(), NS, secs(10.0)).unwrap());
    let witness = Locks::new(Redis::open(&server.url(), NS).unwrap());
    // Connect first, so the delay below slows only the calls under test.
    assert!(!slow.held(&unique("warm")).unwrap());
    // Each chunk waits 150 ms in each direction: a round trip takes at least
    // 300 ms, longer than a 200 ms ttl and well within a 5 s one.
    proxy.delay(Duration::from_millis(150));

    let key = unique("late");
    let sent = Instant::now();
    let got = slow.acquire(&key, secs(0.2)).unwrap();
    assert!(sent.elapsed() >= secs(0.2), "the proxy slowed the call");
    assert!(!got, "an acquire answered after its ttl must not say held");
    // What `true` would have promised is broken: the server applied the
    // acquire before it answered, so by the answer + ttl the key is free.
    std::thread::sleep(Duration::from_millis(220));
    assert!(
        witness.acquire(&key, secs(5.0)).unwrap(),
        "the lease lapsed"
    );
    assert!(witness.release(&key).unwrap());

    // The same slow path with a ttl longer than the round trip: held.
    let key = unique("in-time");
    assert!(slow.acquire(&key, secs(5.0)).unwrap());
    assert!(!witness.acquire(&key, secs(5.0)).unwrap());

    // A renewal answered after its ttl is refused too, and forgotten.
    assert!(
        !slow.renew(&key, secs(0.2)).unwrap(),
        "a late renewal must not say renewed"
    );
    std::thread::sleep(Duration::from_millis(220));
    assert!(
        witness.acquire(&key, secs(5.0)).unwrap(),
        "the lease lapsed"
    );
    assert!(
        !slow.release(&key).unwrap(),
        "the slow owner forgot the lease"
    );
}
