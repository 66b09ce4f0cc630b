//! A push is a hint, not a verdict (issue 28 §5): a message on a flag's
//! channel makes the listener's holds read the flag, and only a raised flag
//! trips them. Anyone who can publish could forge the message: any Redis
//! client (`PUBLISH NS:raised:{KEY}`), any Postgres role that can log in
//! (`NOTIFY`, no grants needed). A real stop still arrives by push, well
//! within a tick.

mod common;
use common::*;
use mistri_locks::internals::messages_heard;
use mistri_locks::{HoldOptions, Locks, Postgres};
use mistri_locks_testkit::{command_on, PgClient, PgServer, RedisServer};
use std::time::{Duration, Instant};

/// The bound of every wait for a message: the adapters' I/O timeout.
const IO: Duration = Duration::from_secs(5);

/// Holds `key` with stop key `stop` (heartbeat 5 s: the tick is 1 s), lets
/// `forge` send a message on the stop key's channel, and checks that the
/// message was heard but did not trip the hold while the flag is down;
/// then raises the flag for real: tripped, by push, well within a tick.
fn forged_push_is_only_a_hint(locks: &Locks, forge: impl Fn()) {
    let hold = locks
        .hold(
            "job",
            HoldOptions {
                stop_key: Some("stop".into()),
                ..opts(30.0, 5.0)
            },
        )
        .unwrap()
        .expect("free");
    // Forge until the listener hears it (its subscription may not be
    // live yet when the hold starts).
    let before = messages_heard();
    let start = Instant::now();
    loop {
        forge();
        std::thread::sleep(Duration::from_millis(20));
        if messages_heard() > before {
            break;
        }
        assert!(start.elapsed() < IO, "the forged message was never heard");
    }
    // The read the hint caused has answered within an I/O round trip;
    // a whole tick more, and the flag is still down: not tripped.
    assert!(
        !hold.signal().wait(Some(Duration::from_millis(1200))),
        "a forged push tripped the hold: {:?}",
        hold.signal().reason()
    );
    assert!(!locks.flag("stop").unwrap());
    // A real stop: by push (the tick is 1 s away at most; this is faster).
    let raised = Instant::now();
    locks.set_flag("stop", secs(30.0)).unwrap();
    assert!(hold.signal().wait(Some(IO)), "the real stop was not heard");
    println!("stop -> signal after a forged push: {:?}", raised.elapsed());
    assert!(hold.signal().reason().unwrap().contains("stop"));
    hold.release().unwrap();
    locks.clear_flag("stop").unwrap();
}

#[test]
fn redis_a_forged_publish_does_not_trip_a_hold() {
    let server = RedisServer::start();
    let port = server.port();
    let locks = Locks::redis(&server.url(), "mistri:hint").unwrap();
    forged_push_is_only_a_hint(&locks, || {
        command_on(port, "PUBLISH mistri:hint:raised:{stop} 1");
    });
}

#[test]
fn postgres_a_notify_by_a_role_without_grants_does_not_trip_a_hold() {
    let server = PgServer::start();
    let locks = Locks::new(Postgres::open(&server.url(), "hint").unwrap());
    // The schema exists after the first operation.
    assert!(!locks.held("job").unwrap());
    server.sql("CREATE ROLE intruder LOGIN");
    let channel = Postgres::open(&server.url(), "hint")
        .unwrap()
        .flag_channel("stop");
    let intruder = std::sync::Mutex::new(
        PgClient::connect_tcp("127.0.0.1", server.port(), "intruder", None, "postgres").unwrap(),
    );
    forged_push_is_only_a_hint(&locks, || {
        intruder
            .lock()
            .unwrap()
            .simple(&format!("NOTIFY \"{channel}\""))
            .unwrap();
    });
}

#[test]
fn postgres_a_non_ascii_stop_key_is_pushed_on_a_latin1_database() {
    // Channel names are computed in Rust (UTF-8) and passed to the SQL.
    // When the SQL computed them, `length()` counted and `md5()` hashed in
    // the database encoding, so on LATIN1 the listener (UTF-8) listened on
    // another name and a non-ASCII key's push was lost (the tick was the
    // floor).
    let server = PgServer::start();
    server.sql(
        "CREATE DATABASE latin TEMPLATE template0 ENCODING 'LATIN1' \
         LC_COLLATE 'C' LC_CTYPE 'C'",
    );
    let url = format!("{}/latin", server.url().rsplit_once('/').unwrap().0);
    let locks = Locks::new(Postgres::open(&url, "hint").unwrap());
    let raiser = Locks::new(Postgres::open(&url, "hint").unwrap());
    let hold = locks
        .hold(
            "jöb",
            HoldOptions {
                stop_key: Some("stöp".into()),
                ..opts(30.0, 5.0)
            },
        )
        .unwrap()
        .expect("free");
    // The listener's LISTEN is live once it hears something: raise until
    // a message arrives (each raise is a push on the stop key's channel).
    let before = messages_heard();
    let start = Instant::now();
    while messages_heard() == before {
        raiser.set_flag("stöp", secs(30.0)).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            start.elapsed() < IO,
            "no push heard for a non-ASCII stop key"
        );
    }
    assert!(hold.signal().wait(Some(IO)));
    assert!(hold.signal().reason().unwrap().contains("stöp"));
    hold.release().unwrap();
}
