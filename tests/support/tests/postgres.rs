//! Self-tests of the PostgreSQL harness: a throwaway server starts and
//! answers, keeps its data across a restart and a crash, freezes and thaws,
//! asks for a password when told to, leaves nothing behind, and a PgBouncer
//! in transaction mode forwards to it.
//!
//! ```text
//! cargo test -p mistri_locks_testkit --test postgres
//! ```

use mistri_locks_testkit::{PgAuth, PgBouncer, PgServer};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// psql over TCP with an explicit password (or none).
fn psql_tcp(port: u16, password: Option<&str>, sql: &str) -> Result<String, String> {
    let mut cmd = Command::new(mistri_locks_testkit::pg_bindir().join("psql"));
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .args(["-d", "postgres", "-X", "-A", "-t", "-q", "-w", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "5")
        .current_dir("/");
    match password {
        Some(p) => cmd.env("PGPASSWORD", p),
        None => cmd.env_remove("PGPASSWORD"),
    };
    let out = cmd.output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn starts_answers_and_cleans_up() {
    let mut server = PgServer::start();
    assert!(server.url().starts_with("postgres://postgres@127.0.0.1:"));
    assert_eq!(server.sql("SELECT 1 + 1"), "2");
    assert_eq!(
        psql_tcp(server.port(), None, "SELECT 'tcp'").unwrap(),
        "tcp"
    );
    assert!(server
        .socket_dir()
        .join(format!(".s.PGSQL.{}", server.port()))
        .exists());
    // Bound to loopback only.
    let listen = server.sql("SHOW listen_addresses");
    assert_eq!(listen, "127.0.0.1");
    assert_eq!(server.sql("SHOW fsync"), "off");
    // Errors come back as errors.
    assert!(server
        .try_sql("SELECT * FROM no_such_table", Duration::from_secs(5))
        .unwrap_err()
        .contains("no_such_table"));
    let pids = server.pids();
    assert!(pids.len() > 1, "postmaster and its helpers: {pids:?}");
    let dir = server.socket_dir();
    let port = server.port();
    server.stop();
    assert!(!dir.exists(), "folder removed");
    assert!(pids.iter().all(|p| !alive(*p)), "no process left: {pids:?}");
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn restart_keeps_data_and_port() {
    let mut server = PgServer::start();
    server.sql("CREATE TABLE kept (v int); INSERT INTO kept VALUES (41), (1)");
    let port = server.port();
    let before = server.pid();
    server.restart();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), before, "a new postmaster");
    assert_eq!(server.sql("SELECT sum(v) FROM kept"), "42");
    server.sql("INSERT INTO kept VALUES (100)");
    server.crash_restart();
    assert_eq!(server.sql("SELECT sum(v) FROM kept"), "142", "WAL recovery");
    server.restart_after(Duration::from_millis(200));
    assert_eq!(server.sql("SELECT count(*) FROM kept"), "3");
}

#[test]
fn freeze_silences_every_process_and_thaw_resumes() {
    let mut server = PgServer::start();
    // A backend that exists before the freeze must stop too: hold one
    // open with a sleeping psql.
    let mut open = Command::new(mistri_locks_testkit::pg_bindir().join("psql"))
        .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
        .args(["-U", "postgres", "-d", "postgres", "-X", "-q", "-c"])
        .arg("SELECT pg_sleep(3)")
        .current_dir("/")
        .spawn()
        .expect("psql");
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(3)%' AND pid <> pg_backend_pid()") != "1" {
        assert!(Instant::now() < deadline, "sleeping backend never showed");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.freeze();
    for pid in server.pids() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .next();
        assert_eq!(state, Some("T"), "process {pid} stopped: {stat}");
    }
    // Nothing answers, but the port still accepts (the kernel's backlog).
    assert!(TcpStream::connect(("127.0.0.1", server.port())).is_ok());
    let started = Instant::now();
    assert!(server
        .try_sql("SELECT 1", Duration::from_millis(500))
        .is_err());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the sql deadline holds"
    );
    server.thaw();
    assert_eq!(server.sql("SELECT 7"), "7");
    assert!(
        open.wait().expect("psql").success(),
        "the frozen backend finished its query"
    );
    // Dropping a frozen server does not hang.
    server.freeze();
    let started = Instant::now();
    drop(server);
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn password_auth_scram_and_md5() {
    for auth in [PgAuth::ScramSha256, PgAuth::Md5] {
        let server = PgServer::with_password_auth("s3cret:/@x", auth);
        assert!(
            server.url().contains(":s3cret%3A%2F%40x@127.0.0.1:"),
            "{}",
            server.url()
        );
        let wrong = psql_tcp(server.port(), Some("nope"), "SELECT 1").unwrap_err();
        assert!(wrong.contains("password authentication failed"), "{wrong}");
        assert!(psql_tcp(server.port(), None, "SELECT 1").is_err());
        assert_eq!(
            psql_tcp(server.port(), Some("s3cret:/@x"), "SELECT 1").unwrap(),
            "1"
        );
        let method =
            server.sql("SELECT auth_method FROM pg_hba_file_rules WHERE type = 'host' LIMIT 1");
        let expected = match auth {
            PgAuth::ScramSha256 => "scram-sha-256",
            PgAuth::Md5 => "md5",
        };
        assert_eq!(method, expected);
        let stored = server.sql("SELECT rolpassword FROM pg_authid WHERE rolname = 'postgres'");
        let prefix = match auth {
            PgAuth::ScramSha256 => "SCRAM-SHA-256$",
            PgAuth::Md5 => "md5",
        };
        assert!(stored.starts_with(prefix), "{stored}");
    }
}

#[test]
fn bouncer_forwards_in_transaction_mode() {
    let server = PgServer::start();
    server.sql("CREATE TABLE seen (v text)");
    let mut bouncer = PgBouncer::start(&server);
    assert_ne!(bouncer.port(), server.port());
    assert!(bouncer
        .url()
        .ends_with(&format!("127.0.0.1:{}/postgres", bouncer.port())));
    bouncer.sql("INSERT INTO seen VALUES ('through the bouncer')");
    assert_eq!(server.sql("SELECT v FROM seen"), "through the bouncer");
    // It pools in transaction mode (its admin console says so).
    let mut admin = Command::new(mistri_locks_testkit::pg_bindir().join("psql"));
    admin
        .args(["-h", "127.0.0.1", "-p", &bouncer.port().to_string()])
        .args([
            "-U",
            "postgres",
            "-d",
            "pgbouncer",
            "-X",
            "-A",
            "-t",
            "-c",
            "SHOW CONFIG",
        ])
        .current_dir("/");
    let out = admin.output().expect("psql");
    let config = String::from_utf8_lossy(&out.stdout);
    assert!(
        config
            .lines()
            .any(|l| l.starts_with("pool_mode|transaction")),
        "{config}"
    );
    let port = bouncer.port();
    bouncer.stop();
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn bouncer_with_password() {
    let server = PgServer::with_password_auth("pw", PgAuth::ScramSha256);
    let bouncer = PgBouncer::start(&server);
    assert_eq!(bouncer.sql("SELECT 'ok'"), "ok");
    assert!(psql_tcp(bouncer.port(), Some("bad"), "SELECT 1").is_err());
}

#[test]
fn pg_client_queries_errors_nulls_and_notifications() {
    use mistri_locks_testkit::PgClient;
    let server = PgServer::start();
    let mut c = PgClient::connect(server.port()).unwrap();
    assert!(c.backend_pid() > 0);
    assert_eq!(c.value("SELECT 40 + 2").unwrap().as_deref(), Some("42"));
    let rows = c
        .query("SELECT $1::int + 1, $2::text, NULL::text", &["41", "x y"])
        .unwrap();
    assert_eq!(
        rows,
        vec![vec![Some("42".into()), Some("x y".into()), None]]
    );
    let rows = c.query_opt("SELECT $1::text IS NULL", &[None]).unwrap();
    assert_eq!(rows[0][0].as_deref(), Some("t"));
    let e = c.query("SELECT * FROM nowhere", &[]).unwrap_err();
    assert!(e.starts_with("42P01:"), "{e}");
    // Still usable after an error; several rows; a statement without rows.
    c.simple("CREATE TABLE t (v int); INSERT INTO t SELECT generate_series(1, 3)")
        .unwrap();
    let rows = c.query("SELECT v FROM t ORDER BY v", &[]).unwrap();
    assert_eq!(rows.len(), 3);
    assert!(c.query("UPDATE t SET v = v + 1", &[]).unwrap().is_empty());
    assert_eq!(
        c.execute("UPDATE t SET v = v + 1 WHERE v > $1", &["2"])
            .unwrap(),
        2
    );
    assert_eq!(c.execute("INSERT INTO t VALUES (9)", &[]).unwrap(), 1);
    // Unix socket, LISTEN/NOTIFY.
    let mut listener =
        PgClient::connect_unix(&server.socket_dir(), server.port(), "postgres", "postgres")
            .unwrap();
    listener.simple("LISTEN chan").unwrap();
    c.query("SELECT pg_notify('chan', $1)", &["hello"]).unwrap();
    let heard = listener.notifications(Duration::from_secs(5)).unwrap();
    assert_eq!(heard.len(), 1);
    assert_eq!(
        (heard[0].channel.as_str(), heard[0].payload.as_str()),
        ("chan", "hello")
    );
    assert!(listener
        .notifications(Duration::from_millis(50))
        .unwrap()
        .is_empty());
}

#[test]
fn pg_client_md5_password_and_bouncer() {
    use mistri_locks_testkit::PgClient;
    let server = PgServer::with_password_auth("pw1", PgAuth::Md5);
    assert!(
        PgClient::connect(server.port()).is_err(),
        "password required"
    );
    assert!(PgClient::connect_tcp(
        "127.0.0.1",
        server.port(),
        "postgres",
        Some("bad"),
        "postgres"
    )
    .is_err());
    let mut c = PgClient::connect_tcp(
        "127.0.0.1",
        server.port(),
        "postgres",
        Some("pw1"),
        "postgres",
    )
    .unwrap();
    assert_eq!(c.value("SELECT 'in'").unwrap().as_deref(), Some("in"));
    let plain = PgServer::start();
    let bouncer = PgBouncer::start(&plain);
    let mut c = PgClient::connect(bouncer.port()).unwrap();
    for i in 0..20 {
        let rows = c.query("SELECT $1::int * 2", &[&i.to_string()]).unwrap();
        assert_eq!(rows[0][0], Some((i * 2).to_string()));
    }
}

#[test]
fn a_panicking_test_leaves_nothing_behind() {
    let (tx, rx) = std::sync::mpsc::channel();
    let joined = std::thread::spawn(move || {
        let server = PgServer::start();
        tx.send((server.socket_dir(), server.pids(), server.port()))
            .unwrap();
        panic!("the test fails while the server runs");
    })
    .join();
    assert!(joined.is_err(), "the thread panicked");
    let (dir, pids, port) = rx.recv().unwrap();
    assert!(!dir.exists(), "folder removed while unwinding");
    assert!(pids.iter().all(|p| !alive(*p)), "no process left: {pids:?}");
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}
