//! Self-tests of the MariaDB harness: a throwaway server starts and
//! answers over its socket and over TCP with the URL's password, keeps its
//! data across a restart and a crash, freezes and thaws, goes silent
//! behind a proxy, and leaves nothing behind.
//!
//! ```text
//! cargo test -p mistri_locks_testkit --test mariadb -- --nocapture
//! ```

use mistri_locks_testkit::{
    mariadb_program, FaultServer, MariaDbServer, MARIADB_DATABASE, MARIADB_PASSWORD, MARIADB_USER,
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
    // The server's clock keeps running through the freeze.
    let (frozen, thawed) = {
        let at = Instant::now();
        std::thread::sleep(Duration::from_millis(200));
        server.thaw();
        (at, Instant::now())
    };
    assert!(!server.is_frozen());
    assert_eq!(server.sql("SELECT 9"), "9");
    assert!(thawed > frozen);
    // frozen_for freezes and thaws by itself.
    let (a, b) = server.frozen_for(Duration::from_millis(100));
    assert!(b.duration_since(a) >= Duration::from_millis(100));
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
