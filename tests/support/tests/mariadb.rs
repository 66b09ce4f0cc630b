//! Self-tests of the MariaDB harness: a throwaway server starts and
//! answers over its socket and over TCP with the URL's password, keeps its
//! data across a restart and a crash, freezes and thaws, goes silent
//! behind a proxy, and leaves nothing behind.
//!
//! ```text
//! cargo test -p mistri_locks_testkit --test mariadb -- --nocapture
//! ```

use mistri_locks_testkit::{
    mariadb_program, FaultServer, MariaDbClient, MariaDbServer, MARIADB_DATABASE, MARIADB_PASSWORD,
    MARIADB_USER,
};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// The `mariadb` client over TCP to `port` as the URL's user, with
/// `password`, killed after `within`.
fn tcp_query(port: u16, password: &str, sql: &str, within: Duration) -> Result<String, String> {
    let mut child = Command::new(mariadb_program("mariadb"))
        .arg("--no-defaults")
        .args([
            "--protocol=TCP",
            "--host=127.0.0.1",
            "--batch",
            "--skip-column-names",
        ])
        .arg(format!("--port={port}"))
        .arg(format!("--user={MARIADB_USER}"))
        .arg(format!("--password={password}"))
        .arg(format!("--database={MARIADB_DATABASE}"))
        .args(["--connect-timeout=30", "--execute", sql])
        .env_remove("MYSQL_PWD")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + within;
    loop {
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            let out = child.wait_with_output().map_err(|e| e.to_string())?;
            return if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            };
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no answer within {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn starts_answers_and_cleans_up() {
    let began = Instant::now();
    let server = MariaDbServer::start();
    let (install, start) = server.startup();
    eprintln!(
        "mariadb start-up: mariadb-install-db {install:?}, mariadbd to greeting {start:?}, \
         whole start() {:?}",
        began.elapsed()
    );
    assert_eq!(
        server.url(),
        format!(
            "mysql://mistri:pw%3Amistri%2F41@127.0.0.1:{}/mistri",
            server.port()
        )
    );
    assert_eq!(server.sql("SELECT 1 + 1"), "2");
    assert!(server.sql("SELECT VERSION()").contains("MariaDB"));
    // The URL's user and password work over TCP; a wrong password does not.
    assert_eq!(
        tcp_query(
            server.port(),
            MARIADB_PASSWORD,
            "SELECT DATABASE(), CURRENT_USER()",
            Duration::from_secs(20)
        )
        .unwrap(),
        "mistri\tmistri@%"
    );
    let refused =
        tcp_query(server.port(), "wrong", "SELECT 1", Duration::from_secs(20)).unwrap_err();
    assert!(refused.contains("Access denied"), "{refused}");
    // The settings the module header promises.
    assert_eq!(server.sql("SELECT @@bind_address"), "127.0.0.1");
    assert_eq!(server.sql("SELECT @@innodb_flush_log_at_trx_commit"), "2");
    assert_eq!(server.sql("SELECT @@max_connections"), "1000");
    assert_eq!(server.sql("SELECT @@default_storage_engine"), "InnoDB");
    // No grants beyond its database: no PROCESS, no CONNECTION ADMIN.
    let grants = tcp_query(
        server.port(),
        MARIADB_PASSWORD,
        "SHOW GRANTS",
        Duration::from_secs(20),
    )
    .unwrap();
    assert!(
        grants.contains("GRANT ALL PRIVILEGES ON `mistri`.* TO `mistri`@`%`"),
        "{grants}"
    );
    assert!(
        grants.contains("GRANT USAGE ON *.* TO `mistri`@`%`"),
        "{grants}"
    );
    assert_eq!(grants.lines().count(), 2, "{grants}");
    // Errors come back as errors.
    let err = server
        .try_sql("SELECT * FROM no_such_table", Duration::from_secs(5))
        .unwrap_err();
    assert!(err.contains("no_such_table"), "{err}");
    let pid = server.pid();
    let dir = server.dir();
    let port = server.port();
    assert!(server.socket_path().exists());
    drop(server);
    assert!(!dir.exists(), "folder removed");
    assert!(!alive(pid), "no process left: {pid}");
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

/// The testkit's client (the one `examples/mariadb_poll.rs` and the core's
/// MySQL benchmarks use): its `id()` is the server's `CONNECTION_ID()`, so
/// another connection's `KILL QUERY` ends a parked statement, which comes
/// back as the coded error `1317: …`; rows are text, NULL is `None`.
#[test]
fn the_client_knows_its_connection_id_and_codes_errors() {
    let server = MariaDbServer::start();
    server.sql("CREATE USER 'bare'@'%'; GRANT ALL ON mistri.* TO 'bare'@'%'");
    let port = server.port();
    let mut parked = MariaDbClient::connect(port, "bare").unwrap();
    let mut other = MariaDbClient::connect(port, "bare").unwrap();
    let rows = parked.query("SELECT CONNECTION_ID(), NULL, 'a'").unwrap();
    assert_eq!(
        rows,
        vec![vec![
            Some(parked.id().to_string()),
            None,
            Some("a".to_owned())
        ]]
    );
    assert_ne!(parked.id(), other.id());
    let id = parked.id();
    let park = std::thread::spawn(move || {
        let r = parked.query("SELECT SLEEP(20)");
        (r, parked)
    });
    // KILL QUERY once the statement runs (a KILL before it would be lost).
    let running = format!(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id} AND INFO LIKE 'SELECT SLEEP%'"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.sql(&running) != "1" {
        assert!(Instant::now() < deadline, "the statement never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    other.query(&format!("KILL QUERY {id}")).unwrap();
    let (r, mut parked) = park.join().unwrap();
    // Interrupted: SLEEP returns 1, or the statement fails with 1317.
    match r {
        Ok(rows) => assert_eq!(rows, vec![vec![Some("1".to_owned())]]),
        Err(e) => assert!(e.starts_with("1317: "), "{e}"),
    }
    // The connection still answers; a syntax error is 1064 with its text.
    let e = parked.query("SELEC 1").unwrap_err();
    assert!(e.starts_with("1064: ") && e.contains("SQL syntax"), "{e}");
    assert_eq!(
        parked.query("SELECT 2").unwrap(),
        vec![vec![Some("2".to_owned())]]
    );
}

#[test]
fn restart_and_crash_restart_keep_committed_rows() {
    let mut server = MariaDbServer::start();
    server.sql("CREATE TABLE kept (v INT) ENGINE=InnoDB; INSERT INTO kept VALUES (41), (1)");
    let port = server.port();
    let before = server.pid();
    server.restart();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), before, "a new mariadbd");
    assert_eq!(server.sql("SELECT SUM(v) FROM kept"), "42");
    // A commit that returned survives a SIGKILL right after it.
    server.sql("INSERT INTO kept VALUES (100)");
    let before = server.pid();
    FaultServer::crash_restart(&mut server);
    assert_ne!(server.pid(), before);
    assert!(!alive(before));
    assert_eq!(server.sql("SELECT SUM(v) FROM kept"), "142");
    // With the port dead in between.
    let began = Instant::now();
    server.restart_after(Duration::from_millis(300));
    assert!(began.elapsed() >= Duration::from_millis(300));
    assert_eq!(server.sql("SELECT COUNT(*) FROM kept"), "3");
}

#[test]
fn freeze_silences_and_thaw_answers() {
    let mut server = MariaDbServer::start();
    assert_eq!(server.sql("SELECT 7"), "7");
    server.freeze();
    assert!(server.is_frozen());
    let silent = server.try_sql("SELECT 8", Duration::from_millis(500));
    assert!(
        silent.unwrap_err().contains("did not finish"),
        "a frozen server answered"
    );
    server.thaw();
    assert!(!server.is_frozen());
    assert_eq!(server.sql("SELECT 9"), "9");
    // The server's clock keeps running through a freeze.
    let before = db_now_us(&server);
    let (frozen, thawed) = server.frozen_for(Duration::from_millis(300));
    assert!(thawed.duration_since(frozen) >= Duration::from_millis(300));
    let after = db_now_us(&server);
    assert!(after - before >= 300_000, "{before} -> {after}");
    assert_eq!(server.sql("SELECT 10"), "10");
}

#[test]
fn the_proxy_forwards_and_goes_silent() {
    let server = MariaDbServer::start();
    let proxy = server.proxy();
    let url = server.url_via(&proxy);
    assert_eq!(
        url,
        format!(
            "mysql://mistri:pw%3Amistri%2F41@127.0.0.1:{}/mistri",
            proxy.port()
        )
    );
    let answer = tcp_query(
        proxy.port(),
        MARIADB_PASSWORD,
        "SELECT 'via'",
        Duration::from_secs(20),
    );
    assert_eq!(answer.unwrap(), "via");
    proxy.blackhole(true);
    let silent = tcp_query(
        proxy.port(),
        MARIADB_PASSWORD,
        "SELECT 'hole'",
        Duration::from_millis(700),
    );
    assert_eq!(silent.unwrap_err(), "no answer within 700ms");
    proxy.blackhole(false);
    let answer = tcp_query(
        proxy.port(),
        MARIADB_PASSWORD,
        "SELECT 'back'",
        Duration::from_secs(20),
    );
    assert_eq!(answer.unwrap(), "back");
}

#[test]
fn a_server_dies_with_the_thread_that_started_it() {
    // As when a test is killed: no Drop runs, the starting thread ends.
    let (pid, dir) = std::thread::spawn(|| {
        let server = MariaDbServer::start();
        let seen = (server.pid(), server.dir());
        std::mem::forget(server);
        seen
    })
    .join()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let gone = !alive(pid);
    // The folder is left (nobody ran Drop); this test removes it.
    let _ = std::fs::remove_dir_all(&dir);
    assert!(gone, "mariadbd {pid} outlived the thread that started it");
}

// ---- MariaDB's behaviour the shipped backend relies on ----
// (The shipped schema, core/src/backend/mysql/sql.rs, is tested where it
// lives: core/tests/mysql.rs and the contract suite. The testkit cannot
// depend on the core, which dev-depends on it.)

/// The database clock in microseconds, as the backend reads it.
fn db_now_us(server: &MariaDbServer) -> i64 {
    server
        .sql("SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))")
        .parse()
        .unwrap()
}

/// The throwaway server starts with MariaDB's defaults for the settings
/// the backend's connect checks (read_only, autocommit, the isolation) and
/// for wait_timeout and semi-sync: what core/tests/mysql.rs changes from.
#[test]
fn the_server_has_the_default_settings_a_connect_reads() {
    let server = MariaDbServer::start();
    // One portable statement per scope (information_schema.GLOBAL_VARIABLES
    // is gone in MySQL 8; SHOW ... WHERE is in both). A name the server
    // lacks is simply absent: MariaDB has no super_read_only and no
    // rpl_semi_sync_master_wait_for_slave_count.
    let global = server.sql(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('read_only', 'super_read_only', \
         'default_storage_engine', 'enforce_storage_engine', 'wait_timeout', \
         'rpl_semi_sync_master_enabled', 'rpl_semi_sync_master_wait_for_slave_count', \
         'rpl_semi_sync_master_wait_point', 'innodb_flush_log_at_trx_commit', 'sql_mode')",
    );
    let session = server.sql(
        "SHOW SESSION VARIABLES WHERE Variable_name IN ('autocommit', 'tx_isolation', \
         'transaction_isolation', 'wait_timeout', 'time_zone')",
    );
    let get = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}\t")).map(str::to_owned))
    };
    assert_eq!(get(&global, "read_only").as_deref(), Some("OFF"));
    assert_eq!(get(&global, "super_read_only"), None, "MariaDB has none");
    assert_eq!(
        get(&global, "default_storage_engine").as_deref(),
        Some("InnoDB")
    );
    assert_eq!(
        get(&global, "rpl_semi_sync_master_enabled").as_deref(),
        Some("OFF")
    );
    assert_eq!(
        get(&global, "rpl_semi_sync_master_wait_for_slave_count"),
        None,
        "MariaDB's semi-sync waits for one replica; only MySQL has the count"
    );
    assert_eq!(get(&session, "autocommit").as_deref(), Some("ON"));
    assert_eq!(
        get(&session, "tx_isolation").as_deref(),
        Some("REPEATABLE-READ")
    );
    let wait: u64 = get(&session, "wait_timeout").unwrap().parse().unwrap();
    assert_eq!(
        wait, 28800,
        "the default: 8 hours, longer than any lease ttl"
    );
}

/// Inside a procedure each statement reads the clock anew (the header of
/// core/src/backend/mysql/sql.rs relies on it), in UTC whatever the
/// session's zone.
#[test]
fn the_clock_is_read_per_statement_inside_a_procedure() {
    let server = MariaDbServer::start();
    server
        .try_sql_delimited(
            "CREATE PROCEDURE clk() BEGIN DECLARE a BIGINT; DECLARE b BIGINT; \
             SET a = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)); \
             DO SLEEP(0.3); \
             SET b = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)); \
             SELECT b - a; END$$",
            "$$",
            Duration::from_secs(20),
        )
        .unwrap();
    let gap: i64 = server.sql("CALL clk()").parse().unwrap();
    // The second read is after the sleep: the clock a procedure reads after
    // taking a lock is the time after the lock, not the CALL's start.
    assert!(gap >= 300_000, "{gap} µs");
    // UTC whatever the session's zone.
    let a: i64 = db_now_us(&server);
    let b: i64 = server
        .sql(
            "SET time_zone = '+05:00'; \
             SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))",
        )
        .parse()
        .unwrap();
    assert!((b - a).abs() < 60_000_000, "{a} vs {b}");
}
