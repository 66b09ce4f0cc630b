//! A waiting line that leaves the head of a key's queue without the lease
//! tells the next line. Found by the soak's history checker: a release had
//! announced itself to the line at the head, that line's last waiter then
//! ran out and left without trying, and the next line slept on its timers
//! (the 2 s safety poll) while the key was free.
//!
//! Each test queues lines A, B and C behind a holder and releases (the
//! release announces itself to A, the head). C leaves from behind the head:
//! nobody is told. A leaves: B, the new head, is told, and nobody else.
//! What is heard is read on the lines' own channels with a plain client.

use mistri_locks::{Adapter, Identity, Postgres, Redis};
use mistri_locks_testkit::{PgClient, PgServer, RedisServer};
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(5);

fn who() -> Identity {
    Identity {
        label: "leaver:1 rust".into(),
        heartbeat: Duration::from_millis(250),
        stop_key: None,
    }
}

/// Queues A, B, C behind a holder of `key`, releases, then C and A leave.
fn queue_release_and_leave(adapter: &dyn Adapter, key: &str) {
    let held = adapter.acquire(key, TTL).unwrap().expect("free");
    for line in ["A", "B", "C"] {
        assert!(
            adapter
                .acquire_queued(key, TTL, &who(), 1, line)
                .unwrap()
                .is_none(),
            "line {line} refused and queued while the key is held"
        );
    }
    assert!(adapter.release(&held).unwrap());
    adapter.leave_queue(key, "C").unwrap();
    adapter.leave_queue(key, "A").unwrap();
}

#[test]
fn on_redis_a_leaving_head_tells_the_next_line_only() {
    let server = RedisServer::start();
    let redis = Redis::open(&server.url(), "mistri:leave").unwrap();
    let key = "job";
    let prefix = redis.line_channel_prefix(key);
    let client = redis::Client::open(server.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let mut sub = con.as_pubsub();
    for line in ["A", "B", "C"] {
        sub.subscribe(format!("{prefix}{line}")).unwrap();
    }
    sub.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();

    queue_release_and_leave(&redis, key);

    let mut heard = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        match sub.get_message() {
            Ok(msg) => {
                let line = msg
                    .get_channel_name()
                    .trim_start_matches(&prefix)
                    .to_owned();
                let payload: String = msg.get_payload().unwrap();
                heard.push((line, payload));
            }
            Err(e) if e.is_timeout() => {
                if heard.len() >= 2 {
                    break;
                }
            }
            Err(e) => panic!("subscription: {e}"),
        }
    }
    assert_eq!(heard.len(), 2, "heard: {heard:?}");
    assert_eq!(heard[0].0, "A", "the release goes to the head: {heard:?}");
    assert_eq!(
        heard[1],
        ("B".to_owned(), "0".to_owned()),
        "the leaving head tells the next line, with no fence: {heard:?}"
    );
}

#[test]
fn on_postgres_a_leaving_head_tells_the_next_line_only() {
    let server = PgServer::start();
    let pg = Postgres::open(&server.url(), "mistri:leave").unwrap();
    let key = "job";
    // The schema exists once the adapter has run a statement.
    assert!(!pg.held(key).unwrap());
    let mut listener = PgClient::connect(server.port()).unwrap();
    let channels: Vec<(String, &str)> = ["A", "B", "C"]
        .iter()
        .map(|line| (pg.line_channel(key, line), *line))
        .collect();
    for (channel, _) in &channels {
        listener.simple(&format!("LISTEN \"{channel}\"")).unwrap();
    }

    queue_release_and_leave(&pg, key);

    let mut heard = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while heard.len() < 2 && Instant::now() < deadline {
        heard.extend(listener.notifications(Duration::from_millis(300)).unwrap());
    }
    // Anything more would arrive at once.
    heard.extend(listener.notifications(Duration::from_millis(300)).unwrap());
    let named: Vec<(&str, &str)> = heard
        .iter()
        .map(|n| {
            let line = channels
                .iter()
                .find(|(c, _)| *c == n.channel)
                .map(|(_, l)| *l)
                .unwrap_or("?");
            (line, n.payload.as_str())
        })
        .collect();
    assert_eq!(named.len(), 2, "heard: {named:?}");
    assert_eq!(named[0].0, "A", "the release goes to the head: {named:?}");
    assert_eq!(
        named[1],
        ("B", "0"),
        "the leaving head tells the next line, with no fence: {named:?}"
    );
}
