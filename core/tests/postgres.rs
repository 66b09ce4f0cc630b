//! The Postgres backend against real servers (a throwaway PostgreSQL on a
//! free loopback port, and a PgBouncer in transaction mode): every
//! operation, the schema made at once by many clients, versioning, fencing
//! at the resource, takeovers, waiting lines taking turns, N-holder
//! leases, push by LISTEN/NOTIFY (and only to the listener that watches),
//! the pooler with `listen=off`, deadlines against a frozen server, and
//! password auth.

use mistri_locks::{
    AcquireOptions, Adapter, Error, HoldOptions, Identity, Lease, Locks, Postgres, Renewal, Renewed,
};
use mistri_locks_testkit::{unique, PgAuth, PgBouncer, PgConfig, PgServer};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// One server for the tests that only share it (namespaces apart), started
/// on a thread that lives as long as the process (the server dies with
/// the thread that started it).
fn shared() -> &'static PgServer {
    static CELL: OnceLock<PgServer> = OnceLock::new();
    CELL.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(PgServer::start());
            loop {
                std::thread::park();
            }
        });
        rx.recv().expect("server started")
    })
}

/// The push tests count the process's messages heard: one at a time.
static PUSH: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn adapter(url: &str) -> (Postgres, String) {
    let ns = unique("pgtest");
    (Postgres::open(url, &ns).expect("adapter"), ns)
}

fn who() -> Identity {
    Identity {
        label: "tester:1 rust".into(),
        heartbeat: ms(250),
        stop_key: None,
    }
}

#[test]
fn every_operation_on_a_real_server() {
    let (pg, ns) = adapter(&shared().url());
    assert_eq!(pg.name(), "postgres");
    let a = pg
        .acquire_as("job", secs(5), &who())
        .unwrap()
        .expect("free");
    assert!(pg.acquire("job", secs(5)).unwrap().is_none(), "held");
    assert!(pg.held("job").unwrap());
    assert!(!pg.held("other").unwrap());
    let left = pg.expires_in("job").unwrap().expect("live");
    assert!(left <= secs(5) && left > secs(3), "{left:?}");
    assert_eq!(pg.expires_in("other").unwrap(), None);
    // Description.
    let info = pg.info("job").unwrap().expect("live");
    let holder = info.holder.clone().expect("described");
    assert_eq!(holder.label, "tester:1 rust");
    assert_eq!(holder.fence, a.fence());
    assert_eq!(holder.ttl, secs(5));
    assert_eq!(holder.heartbeat, ms(250));
    assert_eq!(info.limit, 1);
    assert!(pg.info("other").unwrap().is_none());
    // Renew: by the owner only, and min_left.
    assert!(pg.renew(&a, secs(8)).unwrap());
    assert_eq!(
        pg.info("job").unwrap().unwrap().holder.unwrap().ttl,
        secs(8)
    );
    let stranger = Lease::new("job", "0".repeat(32), a.fence());
    assert!(!pg.renew(&stranger, secs(8)).unwrap());
    let late = Renewal {
        lease: &a,
        ttl: secs(8),
        min_left: secs(60),
    };
    assert_eq!(pg.renew_within(&late).unwrap(), Renewed::TooLate);
    // Beat: renewals (one stale) and flags in one statement.
    pg.set_flag("stop", secs(5)).unwrap();
    let r = [
        Renewal {
            lease: &a,
            ttl: secs(5),
            min_left: ms(100),
        },
        Renewal {
            lease: &stranger,
            ttl: secs(5),
            min_left: Duration::ZERO,
        },
        late,
    ];
    let beat = pg
        .beat(&r, &["stop", "nope"], Instant::now() + secs(5))
        .unwrap();
    let renewed: Vec<Renewed> = beat.renewals.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(renewed, [Renewed::Yes, Renewed::NotHeld, Renewed::TooLate]);
    let flags: Vec<bool> = beat.flags.into_iter().map(|f| f.unwrap()).collect();
    assert_eq!(flags, [true, false]);
    // Flags and listing.
    assert!(pg.flag("stop").unwrap());
    let listing = pg.list("").unwrap();
    assert_eq!(listing.leases.len(), 1);
    assert_eq!(listing.leases[0].key, "job");
    assert_eq!(listing.flags.len(), 1);
    assert!(pg.list("jo").unwrap().flags.is_empty());
    assert_eq!(pg.list("zz").unwrap().leases.len(), 0);
    pg.clear_flag("stop").unwrap();
    assert!(!pg.flag("stop").unwrap());
    pg.clear_flag("stop").unwrap();
    // A flag lapses by the database clock.
    pg.set_flag("brief", ms(100)).unwrap();
    std::thread::sleep(ms(250));
    assert!(!pg.flag("brief").unwrap());
    // Release by the owner only.
    assert!(!pg.release(&stranger).unwrap());
    assert!(pg.release(&a).unwrap());
    assert!(!pg.release(&a).unwrap(), "released once");
    assert!(!pg.held("job").unwrap());
    // Break.
    let b = pg.acquire("job", secs(5)).unwrap().unwrap();
    assert!(b.fence() > a.fence());
    assert!(pg.break_lease("job").unwrap());
    assert!(!pg.break_lease("job").unwrap());
    assert!(!pg.renew(&b, secs(5)).unwrap());
    // Keys with quotes, backslashes, spaces and non-ASCII go as data.
    let odd = "a'b\"c\\d e,{f}é";
    let c = pg.acquire(odd, secs(5)).unwrap().unwrap();
    let beat = pg
        .beat(
            &[Renewal {
                lease: &c,
                ttl: secs(5),
                min_left: Duration::ZERO,
            }],
            &[odd],
            Instant::now() + secs(5),
        )
        .unwrap();
    assert_eq!(*beat.renewals[0].as_ref().unwrap(), Renewed::Yes);
    assert_eq!(pg.list("a'b").unwrap().leases[0].key, odd);
    // Namespaces are apart.
    let other = Postgres::open(&shared().url(), &format!("{ns}-other")).unwrap();
    assert!(!other.held(odd).unwrap());
    assert!(pg.release(&c).unwrap());
}

#[test]
fn a_takeover_after_expiry_raises_the_fence_and_fence_check_refuses_the_stale_holder() {
    let server = shared();
    let (pg, _) = adapter(&server.url());
    let resource = unique("report");
    let first = pg.acquire("report", ms(300)).unwrap().unwrap();
    // The first holder writes, fenced.
    server.sql(&format!(
        "SELECT mistri_locks.fence_check('{resource}', {})",
        first.fence()
    ));
    std::thread::sleep(ms(500));
    let second = pg
        .acquire("report", secs(5))
        .unwrap()
        .expect("expired: free");
    assert!(second.fence() > first.fence());
    assert!(!pg.renew(&first, secs(5)).unwrap(), "the first lost it");
    assert!(!pg.release(&first).unwrap());
    // The second writes; then the first's late write is refused inside its
    // own transaction, with the documented SQLSTATE.
    server.sql(&format!(
        "SELECT mistri_locks.fence_check('{resource}', {})",
        second.fence()
    ));
    let err = server
        .try_sql(
            &format!(
                "BEGIN; SELECT mistri_locks.fence_check('{resource}', {}); COMMIT;",
                first.fence()
            ),
            secs(20),
        )
        .unwrap_err();
    assert!(err.contains("stale fence"), "{err}");
    // The same holder may write again; the seen fence stays the highest.
    server.sql(&format!(
        "SELECT mistri_locks.fence_check('{resource}', {})",
        second.fence()
    ));
    let seen = server.sql(&format!(
        "SELECT fence FROM mistri_locks.fence_seen WHERE resource = '{resource}'"
    ));
    assert_eq!(seen.trim(), second.fence().to_string());
    let code = server.sql(&format!(
        "DO $$ BEGIN PERFORM mistri_locks.fence_check('{resource}', {}); \
         EXCEPTION WHEN OTHERS THEN RAISE NOTICE '%', SQLSTATE; END $$; SELECT 'ok'",
        first.fence()
    ));
    assert!(code.contains("ok"), "{code}");
    // Fences are the database clock in µs (or the counter + 1).
    let now_us: u64 = server
        .sql("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")
        .trim()
        .parse()
        .unwrap();
    assert!(second.fence() <= now_us && second.fence() + 60_000_000 > now_us);
    pg.release(&second).unwrap();
}

#[test]
fn the_schema_is_made_once_by_many_clients_at_once_and_versioned() {
    let server = PgServer::start();
    let url = format!("{}?schema=racy", server.url());
    let n = 8;
    let barrier = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (url, barrier) = (url.clone(), barrier.clone());
            std::thread::spawn(move || {
                let pg = Postgres::open(&url, &format!("ns{i}")).unwrap();
                barrier.wait();
                pg.acquire("k", secs(5)).map(|l| l.is_some())
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), Ok(true));
    }
    assert_eq!(
        server.sql("SELECT version FROM racy.meta").trim(),
        "3",
        "one version row"
    );
    // A version-1 schema (whose release did not lock the key's fences
    // row) and a version-2 one (whose slot release told the first line
    // only) are upgraded in place by the first operation of this client.
    for old in ["1", "2"] {
        // As versions 1 and 2 had it: a 3-argument announce.
        server.sql(
            "CREATE OR REPLACE FUNCTION racy.announce(text, text, text) RETURNS void \
             LANGUAGE plpgsql AS 'BEGIN END'",
        );
        server.sql(&format!("UPDATE racy.meta SET version = {old}"));
        let pg = Postgres::open(&url, &format!("upgrade{old}")).unwrap();
        assert!(!pg.held("k").unwrap());
        assert_eq!(server.sql("SELECT version FROM racy.meta").trim(), "3");
    }
    // One announce function (the 3-argument one of versions 1 and 2 went).
    assert_eq!(
        server
            .sql("SELECT count(*) FROM pg_proc WHERE proname = 'announce' AND pronamespace = 'racy'::regnamespace")
            .trim(),
        "1"
    );
    // The DDL runs again without harm (the CLI's `schema` output, by psql).
    let ddl = Postgres::schema_sql("racy").unwrap();
    server.sql(&ddl);
    server.sql(&ddl);
    assert_eq!(server.sql("SELECT count(*) FROM racy.leases").trim(), "8");
    assert!(matches!(
        Postgres::schema_sql("Bad Name"),
        Err(Error::Config(_))
    ));
    // A newer schema is refused with a clear error, and left alone.
    server.sql("UPDATE racy.meta SET version = 99");
    let pg = Postgres::open(&url, "late").unwrap();
    let err = pg.held("k").unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
    assert!(err.to_string().contains("version 99"), "{err}");
    let err = server.try_sql(&ddl, secs(20)).unwrap_err();
    assert!(err.contains("newer"), "{err}");
    assert_eq!(server.sql("SELECT version FROM racy.meta").trim(), "99");
}

#[test]
fn waiting_lines_take_turns_and_a_plain_acquire_waits_behind_them() {
    let (pg, _) = adapter(&shared().url());
    let w = Identity::of_process();
    let a = pg.acquire("q", secs(5)).unwrap().unwrap();
    // Line B queues first, then line C.
    assert!(pg
        .acquire_queued("q", secs(5), &w, 1, "B")
        .unwrap()
        .is_none());
    assert!(pg
        .acquire_queued("q", secs(5), &w, 1, "C")
        .unwrap()
        .is_none());
    assert!(pg.release(&a).unwrap());
    // Free, but B heads the queue: C and a plain acquire are refused.
    assert!(pg.acquire("q", secs(5)).unwrap().is_none());
    assert!(pg
        .acquire_queued("q", secs(5), &w, 1, "C")
        .unwrap()
        .is_none());
    let b = pg
        .acquire_queued("q", secs(5), &w, 1, "B")
        .unwrap()
        .expect("B's turn");
    assert!(pg.release(&b).unwrap());
    let c = pg
        .acquire_queued("q", secs(5), &w, 1, "C")
        .unwrap()
        .expect("C's turn");
    assert!(pg.release(&c).unwrap());
    // Nobody queued: a plain acquire wins again.
    assert!(pg.acquire("q", secs(5)).unwrap().is_some());
    // A line that leaves gives its place up.
    let (pg2, _) = adapter(&shared().url());
    let d = pg2.acquire("q2", secs(5)).unwrap().unwrap();
    assert!(pg2
        .acquire_queued("q2", secs(5), &w, 1, "L")
        .unwrap()
        .is_none());
    pg2.leave_queue("q2", "L").unwrap();
    pg2.release(&d).unwrap();
    assert!(pg2.acquire("q2", secs(5)).unwrap().is_some());
}

#[test]
fn n_holder_leases_share_the_fence_counter_with_exclusive_ones() {
    let (pg, _) = adapter(&shared().url());
    let w = who();
    let x = pg.acquire("sem", secs(5)).unwrap().unwrap();
    assert!(
        pg.acquire_limited("sem", secs(5), &w, 2).unwrap().is_none(),
        "exclusive there"
    );
    pg.release(&x).unwrap();
    let s1 = pg.acquire_limited("sem", secs(5), &w, 2).unwrap().unwrap();
    let s2 = pg.acquire_limited("sem", secs(5), &w, 2).unwrap().unwrap();
    assert!(s1.slotted() && s1.fence() > x.fence() && s2.fence() > s1.fence());
    assert!(
        pg.acquire_limited("sem", secs(5), &w, 2).unwrap().is_none(),
        "full"
    );
    assert!(pg.acquire("sem", secs(5)).unwrap().is_none(), "slots there");
    let info = pg.info("sem").unwrap().unwrap();
    assert_eq!((info.limit, info.holders.len()), (2, 2));
    assert!(info.holder.is_none());
    assert!(pg.renew(&s1, secs(5)).unwrap());
    assert!(pg.release(&s2).unwrap());
    let s3 = pg.acquire_limited("sem", secs(5), &w, 2).unwrap().unwrap();
    assert!(s3.fence() > s2.fence());
    pg.release(&s1).unwrap();
    pg.release(&s3).unwrap();
    assert!(!pg.held("sem").unwrap());
}

#[test]
fn a_release_reaches_a_waiting_line_by_notify_well_before_its_timers() {
    let _one = PUSH
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let url = shared().url();
    let (pg, ns) = adapter(&url);
    let holder = Locks::new(pg);
    let key = unique("turn");
    assert!(holder.acquire(&key, secs(30)).unwrap());
    // Another adapter object, as another process: no in-process hand-over.
    let waiter = Locks::new(Postgres::open(&url, &ns).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let k = key.clone();
    let t = std::thread::spawn(move || {
        let opts = AcquireOptions {
            wait: Some(secs(20)),
            ..AcquireOptions::default()
        };
        let got = waiter.acquire_with(&k, secs(30), &opts).unwrap();
        tx.send(Instant::now()).unwrap();
        (got, waiter)
    });
    // Let the waiter queue and its subscription go live.
    std::thread::sleep(ms(1500));
    let released = Instant::now();
    assert!(holder.release(&key).unwrap());
    let got_at = rx.recv_timeout(secs(10)).expect("the waiter got it");
    let (got, _waiter) = t.join().unwrap();
    assert!(got);
    let lag = got_at - released;
    // The line's safety poll is 2 s: NOTIFY must beat it by far.
    eprintln!("release -> waiter by NOTIFY: {lag:?}");
    assert!(lag < ms(700), "took {lag:?}");
}

#[test]
fn a_stop_reaches_a_hold_by_notify_and_only_the_hold_that_watches_it() {
    let _one = PUSH
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let url = shared().url();
    let (pg, ns) = adapter(&url);
    let locks = Locks::new(pg);
    let opts = |stop: &str| HoldOptions {
        ttl: secs(30),
        heartbeat: secs(10),
        stop_key: Some(stop.into()),
        ..HoldOptions::default()
    };
    let a = locks.hold("ha", opts("stop-a")).unwrap().unwrap();
    let b = locks.hold("hb", opts("stop-b")).unwrap().unwrap();
    std::thread::sleep(ms(1500));
    // Raised from another adapter object (as another process would).
    let raiser = Postgres::open(&url, &ns).unwrap();
    let before = mistri_locks::internals::messages_heard();
    let raised = Instant::now();
    raiser.set_flag("stop-a", secs(60)).unwrap();
    assert!(a.signal().wait(Some(secs(5))), "a stopped");
    let lag = raised.elapsed();
    eprintln!("stop -> signal by NOTIFY: {lag:?}");
    assert!(lag < ms(700), "stop took {lag:?} with a 10 s heartbeat");
    std::thread::sleep(ms(300));
    assert!(!b.signal().is_aborted(), "b watches another key");
    assert_eq!(
        mistri_locks::internals::messages_heard() - before,
        1,
        "one message, to the one channel"
    );
    // A flag nobody watches is heard by nobody.
    raiser.set_flag("stop-nobody", secs(60)).unwrap();
    std::thread::sleep(ms(300));
    assert_eq!(mistri_locks::internals::messages_heard() - before, 1);
    drop(b);
    drop(a);
}

#[test]
fn through_pgbouncer_in_transaction_mode_with_listen_off() {
    let server = PgServer::start();
    let bouncer = PgBouncer::start(&server);
    let url = format!("{}?listen=off", bouncer.url());
    let (pg, ns) = adapter(&url);
    let locks = Locks::new(pg);
    assert!(locks.acquire("j", secs(5)).unwrap());
    assert!(locks.renew("j", secs(5)).unwrap());
    assert!(locks.release("j").unwrap());
    // A hold with a stop key: no listener, the tick is the floor.
    let hold = locks
        .hold(
            "h",
            HoldOptions {
                ttl: secs(3),
                heartbeat: ms(300),
                stop_key: Some("stop".into()),
                ..HoldOptions::default()
            },
        )
        .unwrap()
        .unwrap();
    let other = Locks::new(Postgres::open(&url, &ns).unwrap());
    assert!(!other.acquire("h", secs(5)).unwrap());
    other.set_flag("stop", secs(60)).unwrap();
    assert!(hold.signal().wait(Some(secs(5))), "seen at a tick");
    drop(hold);
    // Many threads through the pooler at once.
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let url = url.clone();
            let ns = ns.clone();
            std::thread::spawn(move || {
                let pg = Postgres::open(&url, &ns).unwrap();
                for n in 0..25 {
                    let key = format!("t{i}-{n}");
                    let l = pg.acquire(&key, secs(5)).unwrap().unwrap();
                    assert!(pg.release(&l).unwrap());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_frozen_server_costs_one_timeout_not_more() {
    let mut server = PgServer::start();
    let pg = Postgres::with_timeout(&server.url(), "frozen", ms(500)).unwrap();
    let lease = pg.acquire("k", secs(10)).unwrap().unwrap();
    server.freeze();
    let started = Instant::now();
    let err = pg.held("k").unwrap_err();
    assert!(matches!(err, Error::Connection(_)), "{err}");
    let beat = pg.beat(
        &[Renewal {
            lease: &lease,
            ttl: secs(10),
            min_left: Duration::ZERO,
        }],
        &[],
        Instant::now() + ms(200),
    );
    assert!(beat.is_err());
    let deadline = Instant::now() + ms(300);
    assert!(pg.release_by(&lease, deadline).is_err());
    let took = started.elapsed();
    assert!(took < secs(3), "{took:?}");
    server.thaw();
    // Fresh connections afterwards; the lease is still there.
    assert!(pg.held("k").unwrap());
    assert!(pg.release(&lease).unwrap());
}

#[test]
fn unreachable_servers_are_connection_errors_and_bad_urls_config_errors() {
    let pg = Postgres::open("postgres://u:secret@127.0.0.1:1/d", "ns").unwrap();
    let err = pg.held("k").unwrap_err();
    assert!(matches!(err, Error::Connection(_)), "{err}");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    assert!(!err.to_string().contains("secret"));
    for url in [
        "postgres://h:0/d",
        "postgres://u:secret@h/d?sslmode=verify-full",
    ] {
        let err = mistri_locks::open(url, "ns").err().expect("refused");
        assert!(matches!(err, Error::Config(_)), "{err}");
        assert!(!err.to_string().contains("secret"));
    }
    assert!(matches!(
        Postgres::open("postgres://u@h/d", ""),
        Err(Error::InvalidArgument(_))
    ));
    // The one dispatcher knows both schemes.
    let url = shared().url();
    let via = mistri_locks::open(&url.replace("postgres://", "postgresql://"), "d").unwrap();
    assert_eq!(via.name(), "postgres");
}

#[test]
fn passwords_by_scram_and_md5_and_the_unix_socket() {
    for auth in [PgAuth::ScramSha256, PgAuth::Md5] {
        let server = PgServer::start_with(PgConfig {
            password: Some("s3cr:t@/?".into()),
            auth,
            settings: Vec::new(),
        });
        let pg = Postgres::open(&server.url(), "auth").unwrap();
        assert!(pg.acquire("k", secs(5)).unwrap().is_some(), "{auth:?}");
        let wrong = server.url().replace("s3cr", "nope");
        let err = Postgres::open(&wrong, "auth")
            .unwrap()
            .held("k")
            .unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{auth:?}: {err}");
        let none = format!("postgres://postgres@127.0.0.1:{}/postgres", server.port());
        let err = Postgres::open(&none, "auth")
            .unwrap()
            .held("k")
            .unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{auth:?}: {err}");
        // The unix socket is trust in the harness.
        let sock = format!(
            "postgres://postgres@/postgres?host={}&port={}",
            server.socket_dir().display(),
            server.port()
        );
        assert!(Postgres::open(&sock, "auth").unwrap().held("k").unwrap());
    }
}

#[test]
fn a_restart_keeps_leases_and_fences_rising() {
    let mut server = PgServer::start();
    let pg = Postgres::open(&server.url(), "restart").unwrap();
    let a = pg.acquire("k", ms(200)).unwrap().unwrap();
    server.restart();
    // The pooled connection was ended by the restart: the next operation
    // finds that out before its statement ran and goes again on a fresh one.
    assert!(pg.held("k").is_ok());
    std::thread::sleep(ms(300));
    let b = pg.acquire("k", secs(5)).unwrap().expect("expired");
    assert!(b.fence() > a.fence());
}

/// A self-signed certificate and key in a fresh folder the server's user
/// can read (the key 0600, owned by it, as PostgreSQL demands).
fn self_signed() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique("mistri-pg-tls"));
    std::fs::create_dir_all(&dir).unwrap();
    let status = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=127.0.0.1", "-keyout"])
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl runs");
    assert!(status.success());
    std::process::Command::new("chmod")
        .arg("600")
        .arg(dir.join("key.pem"))
        .status()
        .unwrap();
    // SAFETY: geteuid takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        std::process::Command::new("chown")
            .arg("-R")
            .arg("postgres")
            .arg(&dir)
            .status()
            .unwrap();
    }
    dir
}

#[test]
fn sslmode_require_encrypts_and_refuses_a_server_without_tls() {
    let dir = self_signed();
    let setting = |name: &str, file: &str| (name.to_owned(), dir.join(file).display().to_string());
    let server = PgServer::start_with(PgConfig {
        password: None,
        auth: PgAuth::default(),
        settings: vec![
            ("ssl".into(), "on".into()),
            setting("ssl_cert_file", "cert.pem"),
            setting("ssl_key_file", "key.pem"),
        ],
    });
    let url = format!(
        "{}?sslmode=require&application_name=mistri-tls",
        server.url()
    );
    let pg = Postgres::open(&url, "tls").unwrap();
    let lease = pg.acquire("k", secs(5)).unwrap().expect("free");
    let encrypted = server.sql(
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE s.ssl AND a.application_name = 'mistri-tls'",
    );
    assert_eq!(encrypted.trim(), "1", "our pooled connection is TLS");
    assert!(pg.release(&lease).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    // Without TLS on the server: require refuses, prefer falls back.
    let plain = shared().url();
    let err = Postgres::open(&format!("{plain}?sslmode=require"), "tls")
        .unwrap()
        .held("k")
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
    assert!(Postgres::open(&format!("{plain}?sslmode=prefer"), "tls")
        .unwrap()
        .held("k")
        .is_ok());
}

#[test]
fn a_forked_child_uses_connections_of_its_own() {
    let (pg, _) = adapter(&shared().url());
    let lease = pg.acquire("forked", secs(10)).unwrap().unwrap();
    // SAFETY: the child only uses the adapter (which rebuilds its pool for
    // the new generation), then calls _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = pg.held("forked") == Ok(true) && pg.acquire("forked", secs(10)) == Ok(None);
        // SAFETY: _exit takes no pointers and never returns.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: valid out-pointer; our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    // The parent's pooled connection was not disturbed.
    assert!(pg.renew(&lease, secs(10)).unwrap());
    assert!(pg.release(&lease).unwrap());
}

#[test]
fn the_listener_listens_again_after_a_server_restart() {
    let _one = PUSH
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut server = PgServer::start();
    let url = server.url();
    let locks = Locks::new(Postgres::open(&url, "relisten").unwrap());
    let hold = locks
        .hold(
            "h",
            HoldOptions {
                ttl: secs(60),
                heartbeat: secs(20),
                stop_key: Some("stop".into()),
                ..HoldOptions::default()
            },
        )
        .unwrap()
        .unwrap();
    std::thread::sleep(ms(1000));
    server.restart();
    // Reconnected within its backoff, and listening again.
    std::thread::sleep(ms(2500));
    let raiser = Postgres::open(&url, "relisten").unwrap();
    let raised = Instant::now();
    raiser.set_flag("stop", secs(60)).unwrap();
    assert!(hold.signal().wait(Some(secs(5))));
    let lag = raised.elapsed();
    assert!(lag < ms(1000), "{lag:?} with a 20 s heartbeat");
}
