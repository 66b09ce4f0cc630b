//! Holder inspection (`info`, `list`) on Memory, Local and a real Redis:
//! the description is written with the acquire, stamped by renewals, gone
//! with release and break, never carries the token, and a lease taken by a
//! client that writes no description is shown without one.

mod common;

use common::{opts, secs};
use mistri_locks::{HoldOptions, Locks};
use mistri_locks_testkit::{unique, RedisServer};
use std::time::{Duration, SystemTime};

fn local() -> (Locks, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(unique("mistri-info"));
    (Locks::local(Some(&dir.join("locks.db"))).unwrap(), dir)
}

fn described_hold(locks: &Locks) {
    let key = unique("job");
    let hold = locks
        .hold(
            &key,
            HoldOptions {
                label: Some("reporter 7".into()),
                ..opts(0.6, 0.05)
            },
        )
        .unwrap()
        .unwrap();
    let first = locks.info(&key).unwrap().expect("held");
    let holder = first.holder.clone().expect("described");
    assert_eq!(first.key, key);
    assert_eq!(holder.label, "reporter 7");
    assert_eq!(holder.fence, hold.fence());
    assert_eq!(holder.ttl, secs(0.6));
    assert_eq!(holder.heartbeat, secs(0.05));
    let age = SystemTime::now()
        .duration_since(holder.acquired_at)
        .unwrap_or_default();
    assert!(age < Duration::from_secs(5), "acquired {age:?} ago");
    assert!(first.time_left.unwrap() <= secs(0.6));
    // Renewals (every 50 ms here) stamp the description.
    std::thread::sleep(Duration::from_millis(300));
    let later = locks.info(&key).unwrap().unwrap().holder.unwrap();
    assert!(
        later.renewed_at > holder.renewed_at,
        "{later:?} vs {holder:?}"
    );
    assert_eq!(later.acquired_at, holder.acquired_at);
    let text = format!("{later:?}");
    assert!(!text.contains("token"), "{text}");
    hold.release().unwrap();
    assert!(locks.info(&key).unwrap().is_none());
}

fn labels_and_listing(locks: &Locks) {
    let prefix = unique("list");
    let (a, b) = (format!("{prefix}:a"), format!("{prefix}:b"));
    // The default label: host:pid language.
    assert!(locks.acquire(&a, secs(5.0)).unwrap());
    let label = locks.info(&a).unwrap().unwrap().holder.unwrap().label;
    assert!(
        label.ends_with(&format!(":{} rust", std::process::id())),
        "{label}"
    );
    locks.set_label(Some("ops shell")).unwrap();
    assert!(locks.acquire(&b, secs(5.0)).unwrap());
    locks
        .set_flag(&format!("{prefix}:stop"), secs(5.0))
        .unwrap();
    locks.set_flag("elsewhere", secs(5.0)).unwrap();
    let listing = locks.list(&prefix).unwrap();
    let keys: Vec<_> = listing.leases.iter().map(|l| l.key.as_str()).collect();
    assert_eq!(keys, [a.as_str(), b.as_str()]);
    assert_eq!(
        listing.leases[1].holder.as_ref().unwrap().label,
        "ops shell"
    );
    assert_eq!(listing.flags.len(), 1);
    assert_eq!(listing.flags[0].key, format!("{prefix}:stop"));
    assert!(listing.flags[0].time_left.unwrap() <= secs(5.0));
    // Break removes the description with the lease.
    assert!(locks.break_lease(&b).unwrap());
    assert!(locks.info(&b).unwrap().is_none());
    assert!(locks.release(&a).unwrap());
    assert!(locks.list(&prefix).unwrap().leases.is_empty());
    locks.set_label(None).unwrap();
    assert!(locks.label().ends_with(" rust"));
}

#[test]
fn memory() {
    let locks = Locks::memory();
    described_hold(&locks);
    labels_and_listing(&locks);
}

#[test]
fn local_file() {
    let (locks, dir) = local();
    described_hold(&locks);
    labels_and_listing(&locks);
    // Another process's view (another connection) sees the same rows.
    let other = Locks::local(Some(&dir.join("locks.db"))).unwrap();
    assert!(locks.acquire("shared", secs(5.0)).unwrap());
    let seen = other.info("shared").unwrap().unwrap().holder.unwrap();
    assert_eq!(Some(seen.fence), locks.fence("shared"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn local_file_of_an_older_version_gains_the_columns() {
    let dir = std::env::temp_dir().join(unique("mistri-info-old"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("locks.db");
    {
        // The schema before holder descriptions, with a live lease written
        // by an older client.
        let con = rusqlite::Connection::open(&path).unwrap();
        con.execute_batch(
            "CREATE TABLE leases (key TEXT PRIMARY KEY, token TEXT NOT NULL,
               expires_ns INTEGER NOT NULL, boot TEXT NOT NULL) WITHOUT ROWID;
             CREATE TABLE flags (key TEXT PRIMARY KEY, expires_ns INTEGER NOT NULL,
               boot TEXT NOT NULL) WITHOUT ROWID;
             CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
             INSERT INTO meta VALUES ('fence', 5);",
        )
        .unwrap();
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        con.execute(
            "INSERT INTO leases VALUES ('old', 't', ?1, ?2)",
            rusqlite::params![i64::MAX, boot.trim()],
        )
        .unwrap();
    }
    let locks = Locks::local(Some(&path)).unwrap();
    let old = locks.info("old").unwrap().expect("the old client's lease");
    assert!(old.holder.is_none(), "{old:?}");
    assert!(locks.acquire("k", secs(5.0)).unwrap());
    assert!(locks.info("k").unwrap().unwrap().holder.is_some());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn redis() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), "mistri:info").unwrap();
    described_hold(&locks);
    labels_and_listing(&locks);

    // The description rides in the lease's value after the token: one
    // key, expiring with the lease; info never shows the token.
    let client = redis::Client::open(server.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    assert!(locks.acquire("slot", secs(5.0)).unwrap());
    let value: String = redis::cmd("GET")
        .arg("mistri:info:lease:{slot}")
        .query(&mut con)
        .unwrap();
    let fields: Vec<&str> = value.splitn(6, ' ').collect();
    assert_eq!(fields.len(), 6, "{value}");
    assert_eq!(fields[0].len(), 32, "{value}");
    assert_eq!(fields[1], "5000", "{value}");
    assert_eq!(Some(fields[2].parse().unwrap()), locks.fence("slot"));
    assert!(fields[5].ends_with(" rust"), "{value}");
    let ms: i64 = redis::cmd("PTTL")
        .arg("mistri:info:lease:{slot}")
        .query(&mut con)
        .unwrap();
    assert!(ms > 0 && ms <= 5000, "{ms}");
    let shown = format!("{:?}", locks.info("slot").unwrap().unwrap());
    assert!(!shown.contains(fields[0]), "{shown}");
    // A renewal with another ttl records it; one with the same ttl only
    // moves the expiry, and the last renewal is derived from it.
    assert!(locks.renew("slot", secs(8.0)).unwrap());
    let renewed = locks.info("slot").unwrap().unwrap();
    let holder = renewed.holder.unwrap();
    assert_eq!(holder.ttl, secs(8.0));
    assert!(holder.renewed_at >= holder.acquired_at);
    std::thread::sleep(Duration::from_millis(50));
    assert!(locks.renew("slot", secs(8.0)).unwrap());
    let again = locks.info("slot").unwrap().unwrap().holder.unwrap();
    assert!(
        again.renewed_at > holder.renewed_at,
        "{again:?} vs {holder:?}"
    );
    assert_eq!(again.acquired_at, holder.acquired_at);
    assert_eq!(again.fence, holder.fence);

    // A lease taken by a client that writes no description (two arguments
    // to the acquire script, as older clients) shows none.
    assert!(locks.release("slot").unwrap());
    assert!(locks.acquire("old", secs(0.2)).unwrap());
    std::thread::sleep(Duration::from_millis(300));
    let fence: u64 = redis::Script::new(mistri_locks::internals::ACQUIRE_LUA)
        .key("mistri:info:lease:{old}")
        .key("mistri:info:fence:{old}")
        .arg("sometoken")
        .arg(5000)
        .invoke(&mut con)
        .unwrap();
    assert!(fence > 0);
    let info = locks.info("old").unwrap().expect("held by the old client");
    assert!(info.holder.is_none(), "{info:?}");
    assert!(info.time_left.unwrap() <= secs(5.0));
    // Renew and release take a bare token too, and a token that is only a
    // prefix of the owner's owns nothing.
    let release = redis::Script::new(mistri_locks::internals::RELEASE_LUA);
    let renew = redis::Script::new(mistri_locks::internals::RENEW_LUA);
    let run = |script: &redis::Script, token: &str, con: &mut redis::Connection| -> i64 {
        script
            .key("mistri:info:lease:{old}")
            .arg(token)
            .arg(5000)
            .invoke(con)
            .unwrap()
    };
    assert_eq!(run(&renew, "some", &mut con), 0);
    assert_eq!(run(&renew, "sometoken", &mut con), 1);
    assert_eq!(run(&release, "some", &mut con), 0);
    assert_eq!(run(&release, "sometoken", &mut con), 1);
    assert!(locks.info("old").unwrap().is_none());
    // ...and a described lease's token likewise: "slot" again, by prefix.
    assert!(locks.acquire("slot", secs(5.0)).unwrap());
    let value: String = redis::cmd("GET")
        .arg("mistri:info:lease:{slot}")
        .query(&mut con)
        .unwrap();
    let token = value.split(' ').next().unwrap();
    let on_slot = |script: &redis::Script, token: &str, con: &mut redis::Connection| -> i64 {
        script
            .key("mistri:info:lease:{slot}")
            .arg(token)
            .arg(5000)
            .invoke(con)
            .unwrap()
    };
    assert_eq!(on_slot(&release, &token[..31], &mut con), 0);
    assert_eq!(on_slot(&release, token, &mut con), 1);
    assert!(!locks.release("slot").unwrap());
}
