//! MySQL / MariaDB only: fences across an emptied table and a restart,
//! and the settings refused at connect, on a throwaway MariaDB 10.11.
//!
//! ```text
//! cargo test -p mistri_locks_core --test mysql
//! ```

use mistri_locks::{Error, Locks, MySql};
use mistri_locks_testkit::MariaDbServer;
use std::time::Duration;

fn locks(server: &MariaDbServer, ns: &str) -> Locks {
    Locks::new(MySql::with_timeout(&server.url(), ns, Duration::from_secs(30)).unwrap())
}

fn fence(locks: &Locks, key: &str) -> u64 {
    assert!(locks.acquire(key, Duration::from_secs(30)).unwrap());
    let f = locks.fence(key).expect("fence");
    assert!(locks.release(key).unwrap());
    f
}

/// Fences rise per key across emptied tables (the clock floor) and a
/// server restart and crash (the counter row survives, and the floor).
#[test]
fn fences_rise_across_an_emptied_table_and_restarts() {
    let mut server = MariaDbServer::start();
    let a = locks(&server, "fences");
    let f1 = fence(&a, "k");
    let f2 = fence(&a, "k");
    assert!(f2 > f1, "{f1} -> {f2}");
    server.sql("DELETE FROM mistri.mistri_leases; DELETE FROM mistri.mistri_fences");
    let f3 = fence(&a, "k");
    assert!(f3 > f2, "after emptying the tables: {f2} -> {f3}");
    server.restart();
    let f4 = fence(&locks(&server, "fences"), "k");
    assert!(f4 > f3, "after a restart: {f3} -> {f4}");
    server.crash_restart();
    let b = locks(&server, "fences");
    let f5 = fence(&b, "k");
    assert!(f5 > f4, "after a crash-restart: {f4} -> {f5}");
    // The clock floor: at least the database clock in µs since the epoch.
    let now_us: u64 = server
        .sql("SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))")
        .trim()
        .parse()
        .unwrap();
    assert!(f5 <= now_us && f5 > now_us - 60_000_000, "{f5} vs {now_us}");
}

/// A read-only server and a non-InnoDB table are refused with a
/// configuration error naming the setting.
#[test]
fn settings_that_break_the_promise_are_refused_at_connect() {
    let server = MariaDbServer::start();
    let a = locks(&server, "settings");
    assert!(!a.held("k").unwrap());
    server.sql("SET GLOBAL read_only = ON");
    let err = locks(&server, "settings").held("k").unwrap_err();
    assert!(
        matches!(&err, Error::Config(m) if m.contains("read_only is ON")),
        "{err}"
    );
    server.sql("SET GLOBAL read_only = OFF");
    server.sql("ALTER TABLE mistri.mistri_meta ENGINE=MyISAM");
    let err = locks(&server, "settings").held("k").unwrap_err();
    assert!(
        matches!(&err, Error::Config(m) if m.contains("MyISAM")),
        "{err}"
    );
    server.sql("ALTER TABLE mistri.mistri_meta ENGINE=InnoDB");
    assert!(!locks(&server, "settings").held("k").unwrap());
    // An unknown option is refused before anything connects.
    let err = Locks::open(&format!("{}?ssl_mode=REQUIRED", server.url())).unwrap_err();
    assert!(err.to_string().contains("ssl-mode"), "{err}");
}

/// `wait_timeout` shorter than a hold's ttl is not refused: no lease lives
/// in a session, and a pooled connection the server closed while idle is
/// noticed before reuse and replaced. A hold whose ticks are further apart
/// than `wait_timeout` keeps renewing, and a stop flag still reaches it.
#[test]
fn a_wait_timeout_shorter_than_the_ttl_costs_a_reconnect_not_the_lease() {
    let server = MariaDbServer::start();
    server.sql("SET GLOBAL wait_timeout = 1");
    let a = locks(&server, "idle");
    let options = mistri_locks::HoldOptions {
        ttl: Duration::from_secs(6),
        heartbeat: Duration::from_secs(2),
        stop_key: Some("idle-stop".into()),
        ..mistri_locks::HoldOptions::default()
    };
    let hold = a.hold("idle-key", options).unwrap().expect("free");
    // Three ticks, each after the server closed the idle connections.
    std::thread::sleep(Duration::from_secs(7));
    assert!(!hold.is_lost(), "{:?}", hold.signal().reason());
    let b = locks(&server, "idle");
    assert!(!b.acquire("idle-key", Duration::from_secs(5)).unwrap());
    std::thread::sleep(Duration::from_millis(1500));
    b.set_flag("idle-stop", Duration::from_secs(30)).unwrap();
    assert!(hold.signal().wait(Some(Duration::from_secs(3))));
    let reason = hold.signal().reason().unwrap_or_default();
    assert!(reason.starts_with("stop flag"), "{reason}");
}

/// TLS by `ssl-mode`: REQUIRED encrypts (a user that must use TLS logs in
/// with it and not without), VERIFY_CA and VERIFY_IDENTITY refuse a
/// certificate whose CA is not in the system store, naming TLS.
#[test]
fn ssl_modes_encrypt_and_verify() {
    let server = MariaDbServer::start_tls();
    server.sql(&format!(
        "ALTER USER {}@'%' REQUIRE SSL",
        mistri_locks_testkit::MARIADB_USER
    ));
    let with = |mode: &str| {
        Locks::new(
            MySql::with_timeout(
                &format!("{}?ssl-mode={mode}", server.url()),
                "tls",
                Duration::from_secs(30),
            )
            .unwrap(),
        )
    };
    for mode in ["REQUIRED", "PREFERRED"] {
        let locks = with(mode);
        assert!(
            locks.acquire("k", Duration::from_secs(5)).unwrap(),
            "{mode}"
        );
        assert!(locks.release("k").unwrap(), "{mode}");
    }
    let err = with("DISABLED").held("k").unwrap_err();
    assert!(matches!(err, Error::Config(_)), "no TLS, refused: {err}");
    for mode in ["VERIFY_CA", "VERIFY_IDENTITY"] {
        let err = with(mode).held("k").unwrap_err();
        assert!(
            matches!(&err, Error::Config(m) if m.contains("TLS")),
            "{mode}: {err}"
        );
    }
    // A server without TLS: REQUIRED is refused, PREFERRED goes plain.
    let plain = MariaDbServer::start();
    let url = format!("{}?ssl-mode=REQUIRED", plain.url());
    let err = Locks::open(&url).unwrap().held("k").unwrap_err();
    assert!(
        matches!(&err, Error::Config(m) if m.contains("does not offer TLS")),
        "{err}"
    );
}

/// Contention with no fault is never an error: 8 adapters (as 8
/// processes) race for two exclusive keys and one of three slots, plain
/// and waiting; deadlocks and lock waits are tried again within the call.
/// Exclusion is checked with a counter per key.
#[test]
fn contention_without_faults_is_never_an_error() {
    use std::sync::atomic::{AtomicI64, Ordering};
    let server = MariaDbServer::start();
    locks(&server, "race").held("warm-up").unwrap();
    let inside: Vec<AtomicI64> = (0..3).map(|_| AtomicI64::new(0)).collect();
    let errors = AtomicI64::new(0);
    let taken = AtomicI64::new(0);
    std::thread::scope(|s| {
        for t in 0..8 {
            let (inside, errors, taken, server) = (&inside, &errors, &taken, &server);
            s.spawn(move || {
                let l = Locks::new(
                    MySql::with_timeout(&server.url(), "race", Duration::from_secs(5)).unwrap(),
                );
                for i in 0..60 {
                    let k = (t + i) % 3;
                    let (key, limit) = (format!("race-{k}"), if k == 2 { 3 } else { 1 });
                    let opts = mistri_locks::AcquireOptions {
                        wait: (i % 2 == 0).then(|| Duration::from_millis(300)),
                        limit,
                        ..mistri_locks::AcquireOptions::default()
                    };
                    match l.acquire_with(&key, Duration::from_secs(10), &opts) {
                        Ok(true) => {
                            let n = inside[k].fetch_add(1, Ordering::SeqCst) + 1;
                            assert!(n <= limit as i64, "{n} holders of {key}");
                            taken.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(2));
                            inside[k].fetch_sub(1, Ordering::SeqCst);
                            if let Err(e) = l.release(&key) {
                                eprintln!("release: {e}");
                                errors.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Ok(false) => {}
                        Err(e) => {
                            eprintln!("acquire: {e}");
                            errors.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            });
        }
    });
    assert_eq!(errors.load(Ordering::SeqCst), 0);
    assert!(taken.load(Ordering::SeqCst) > 60, "{taken:?}");
}

/// A beat bigger than the server's `max_allowed_packet` (16 MiB on
/// MariaDB): 3,000 leases on 1 KiB keys make about 20 MB of SQL, which the
/// adapter splits into statements under 8 MiB; every renewal and the flag
/// are answered.
#[test]
fn a_beat_larger_than_a_packet_is_split_and_answered() {
    use mistri_locks::{Adapter, Renewal, Renewed};
    let server = MariaDbServer::start();
    let a = MySql::with_timeout(&server.url(), "big", Duration::from_secs(60)).unwrap();
    let packet: u64 = server
        .sql("SELECT @@max_allowed_packet")
        .trim()
        .parse()
        .unwrap();
    let keys: Vec<String> = (0..3000)
        .map(|i| format!("{i:04}{}", "k".repeat(1020)))
        .collect();
    let leases: Vec<_> = keys
        .iter()
        .map(|k| {
            a.acquire(k, Duration::from_secs(60))
                .unwrap()
                .expect("free")
        })
        .collect();
    let sql_bytes: usize = leases
        .iter()
        .map(|l| 6 * ("big".len() + l.key().len() + l.token().len()))
        .sum();
    assert!(sql_bytes as u64 > packet, "{sql_bytes} vs {packet}");
    a.set_flag("big-flag", Duration::from_secs(60)).unwrap();
    let renewals: Vec<Renewal<'_>> = leases
        .iter()
        .map(|lease| Renewal {
            lease,
            ttl: Duration::from_secs(60),
            min_left: Duration::ZERO,
        })
        .collect();
    let beat = a
        .beat(
            &renewals,
            &["big-flag", "no-flag"],
            std::time::Instant::now() + Duration::from_secs(60),
        )
        .unwrap();
    assert!(beat.renewals.iter().all(|r| matches!(r, Ok(Renewed::Yes))));
    assert!(
        matches!(beat.flags[..], [Ok(true), Ok(false)]),
        "{:?}",
        beat.flags
    );
    assert!(beat.server_clock.is_some());
}

/// Many processes taking NEW keys at once (a fleet starting): 48 adapters
/// (as 48 processes), each taking 8 keys of its own, all released at one
/// barrier. Under REPEATABLE READ the inserts of neighbouring new keys
/// deadlocked on gap locks until the 5 s deadline (200 processes, issue 41
/// measurement); the procedures run READ COMMITTED.
#[test]
fn many_adapters_taking_new_keys_at_once_never_time_out() {
    let server = MariaDbServer::start();
    locks(&server, "fleet").held("warm-up").unwrap();
    let barrier = std::sync::Barrier::new(48);
    std::thread::scope(|s| {
        for t in 0..48 {
            let (server, barrier) = (&server, &barrier);
            s.spawn(move || {
                let l = Locks::new(
                    MySql::with_timeout(&server.url(), "fleet", Duration::from_secs(5)).unwrap(),
                );
                l.held("warm-up").unwrap();
                barrier.wait();
                for i in 0..8 {
                    let key = format!("fleet-{t}-{i}");
                    assert!(l.acquire(&key, Duration::from_secs(30)).unwrap(), "{key}");
                }
            });
        }
    });
}

/// The beats of many processes renew their own rows only: 20 adapters (as
/// 20 processes), a hold each (ttl 30 s, heartbeat 1 s, a stop key),
/// taken at one barrier so their ticks line up, for 4 s: no transaction of
/// the server was rolled back (a beat that locked a range, as a
/// one-element row `IN` in an UPDATE does, deadlocked with the others:
/// 56 rollbacks a second at 20 processes, measured by `my_latency`).
#[test]
fn beats_of_many_processes_never_deadlock() {
    let server = MariaDbServer::start();
    locks(&server, "beats").held("warm-up").unwrap();
    let rollbacks = || -> u64 {
        let line = server.sql("SHOW GLOBAL STATUS LIKE 'Com_rollback'");
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let adapters: Vec<Locks> = (0..20).map(|_| locks(&server, "beats")).collect();
    for l in &adapters {
        l.held("warm-up").unwrap();
    }
    let before = rollbacks();
    let barrier = std::sync::Barrier::new(adapters.len());
    let lost = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for (i, l) in adapters.iter().enumerate() {
            let (barrier, lost) = (&barrier, &lost);
            s.spawn(move || {
                let options = mistri_locks::HoldOptions {
                    ttl: Duration::from_secs(30),
                    heartbeat: Duration::from_secs(1),
                    stop_key: Some(format!("beat-stop-{i}")),
                    ..mistri_locks::HoldOptions::default()
                };
                barrier.wait();
                let hold = l
                    .hold(&format!("beat-{i}"), options)
                    .unwrap()
                    .expect("free");
                std::thread::sleep(Duration::from_secs(4));
                if hold.is_lost() {
                    lost.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
    });
    assert_eq!(lost.into_inner(), 0);
    assert_eq!(rollbacks() - before, 0, "beats were rolled back");
}
