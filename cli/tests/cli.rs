//! Drives the built `mistri-locks` binary against a Local database file, a
//! real throwaway redis-server, a real throwaway PostgreSQL and a real
//! throwaway MariaDB (127.0.0.1, free ports).

use mistri_locks::{HoldOptions, Locks, OpenOptions};
use mistri_locks_testkit::{unique, MariaDbServer, PgServer, RedisServer};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_mistri-locks");
const STOPPED: i32 = 76;
const LOST: i32 = 77;
const REFUSED: i32 = 75;

/// A backend for one test: a fresh Local file, or a namespace on a Redis.
struct Backend {
    url: String,
    namespace: String,
    dir: Option<std::path::PathBuf>,
}

impl Backend {
    fn local() -> Self {
        let dir = std::env::temp_dir().join(unique("mistri-cli"));
        Backend {
            url: dir.join("locks.db").display().to_string(),
            namespace: "mistri:locks".into(),
            dir: Some(dir),
        }
    }

    fn redis(server: &RedisServer) -> Self {
        Backend {
            url: server.url(),
            namespace: unique("mistri:cli"),
            dir: None,
        }
    }

    fn mysql(server: &MariaDbServer) -> Self {
        Backend {
            url: server.url(),
            namespace: unique("mistri:cli"),
            dir: None,
        }
    }

    fn postgres(server: &PgServer) -> Self {
        Backend {
            url: server.url(),
            namespace: unique("mistri:cli"),
            dir: None,
        }
    }

    fn locks(&self) -> Locks {
        if self.dir.is_some() {
            Locks::local(Some(std::path::Path::new(&self.url))).unwrap()
        } else {
            Locks::open_with(&self.url, &OpenOptions::new().namespace(&self.namespace)).unwrap()
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.env_remove("MISTRI_LOCKS_URL")
            .arg("--url")
            .arg(&self.url)
            .arg("--namespace")
            .arg(&self.namespace)
            .args(args);
        c
    }

    fn output(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.cmd(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Reads the child's stdout until a line starting with `prefix`.
fn read_until(child: &mut Child, prefix: &str) -> String {
    let out = child.stdout.as_mut().unwrap();
    let mut reader = BufReader::new(out);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("no line starting with {prefix:?}");
        }
        if line.starts_with(prefix) {
            return line.trim().to_owned();
        }
    }
}

fn wait_exit(child: &mut Child, limit: Duration) -> (i32, Duration) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status.code().unwrap_or(-1), start.elapsed());
        }
        assert!(start.elapsed() < limit, "still running after {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn exits_with_the_child_status_and_exports_the_fence(b: &Backend) {
    let key = unique("job");
    let out = b.output(&["run", &key, "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));

    let mut run = b.spawn(&[
        "run",
        &key,
        "--",
        "sh",
        "-c",
        "echo fence=$MISTRI_LOCK_FENCE key=$MISTRI_LOCK_KEY; sleep 1",
    ]);
    let line = read_until(&mut run, "fence=");
    let fence: u64 = line
        .split_whitespace()
        .next()
        .unwrap()
        .trim_start_matches("fence=")
        .parse()
        .unwrap();
    assert!(line.ends_with(&format!("key={key}")), "{line}");
    // status --json carries the same holder and fence.
    let out = b.output(&["status", "--json", &key]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    let lease = &doc["leases"][0];
    assert_eq!(lease["key"], key.as_str());
    assert_eq!(lease["held"], true);
    assert_eq!(lease["fence"].as_u64(), Some(fence));
    assert!(
        lease["holder"]
            .as_str()
            .unwrap()
            .contains("mistri-locks run sh"),
        "{lease}"
    );
    for field in [
        "time_left_s",
        "ttl_s",
        "heartbeat_s",
        "renewed_ago_s",
        "held_for_s",
    ] {
        assert!(lease[field].is_number(), "{field}: {lease}");
    }
    // A second run is refused while the first holds the lease.
    let out = b.output(&["run", &key, "--", "true"]);
    assert_eq!(out.status.code(), Some(REFUSED), "{}", stderr(&out));
    assert!(stderr(&out).contains("held by"), "{}", stderr(&out));
    assert_eq!(wait_exit(&mut run, Duration::from_secs(10)).0, 0);
    // Released on the way out.
    let out = b.output(&["status", "--json", &key]);
    assert_eq!(out.status.code(), Some(3));
    let doc = json(&out);
    assert_eq!(doc["leases"][0]["held"], false);
    // The operator's document for named keys: no prefix, a free key's
    // waiting lines too.
    assert_eq!(doc["leases"][0]["waiting"], 0);
    assert!(doc["now_ms"].is_u64() && doc["prefix"].is_null(), "{doc}");
}

fn stop_ends_a_run_whose_child_ignores_sigterm(b: &Backend) {
    let key = unique("stubborn");
    let stop = format!("{key}:stop");
    let mut run = b.spawn(&[
        "run",
        &key,
        "--heartbeat",
        "0.1",
        "--stop-key",
        &stop,
        "--grace",
        "0.5",
        "--",
        "sh",
        "-c",
        "trap '' TERM; echo ready; while :; do sleep 0.05; done",
    ]);
    read_until(&mut run, "ready");
    let out = b.output(&["stop", &stop]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (code, took) = wait_exit(&mut run, Duration::from_secs(10));
    assert_eq!(code, STOPPED);
    // A tick (0.1 s) + the grace (0.5 s) + slack for a loaded machine.
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(!b.locks().held(&key).unwrap(), "not released");
    // The flag stays up, so the next run does not start.
    let out = b.output(&["run", &key, "--stop-key", &stop, "--", "true"]);
    assert_eq!(out.status.code(), Some(STOPPED), "{}", stderr(&out));
    let out = b.output(&["clear", &stop]);
    assert_eq!(out.status.code(), Some(0));
    let out = b.output(&["run", &key, "--stop-key", &stop, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

fn sigterm_is_forwarded_and_the_lease_released(b: &Backend) {
    let key = unique("term");
    let mut run = b.spawn(&[
        "run",
        &key,
        "--",
        "sh",
        "-c",
        "trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 0.05; done",
    ]);
    read_until(&mut run, "ready");
    // SAFETY: kill with the pid of our own child.
    unsafe {
        libc::kill(run.id() as i32, libc::SIGTERM);
    }
    let line = read_until(&mut run, "got-term");
    assert_eq!(line, "got-term");
    let (code, _) = wait_exit(&mut run, Duration::from_secs(10));
    assert_eq!(code, 3);
    assert!(!b.locks().held(&key).unwrap(), "not released");
}

fn a_broken_lease_is_lost(b: &Backend) {
    let key = unique("lost");
    let mut run = b.spawn(&[
        "run",
        &key,
        "--ttl",
        "2",
        "--heartbeat",
        "0.1",
        "--grace",
        "1",
        "--",
        "sh",
        "-c",
        "echo ready; exec sleep 30",
    ]);
    read_until(&mut run, "ready");
    let out = b.output(&["break", &key]);
    assert_eq!(out.status.code(), Some(2), "no --yes without a terminal");
    assert_eq!(stderr(&out).lines().count(), 1);
    let out = b.output(&["break", "--yes", &key]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (code, _) = wait_exit(&mut run, Duration::from_secs(10));
    assert_eq!(code, LOST);
}

fn waits_for_a_busy_lease(b: &Backend) {
    let key = unique("busy");
    let locks = b.locks();
    let hold = locks
        .hold(
            &key,
            HoldOptions {
                ttl: Duration::from_secs(5),
                heartbeat: Duration::from_millis(200),
                label: Some("test holder".into()),
                ..HoldOptions::default()
            },
        )
        .unwrap()
        .unwrap();
    let out = b.output(&["status", &key]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("test holder"));
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        hold.release().unwrap();
    });
    let out = b.output(&["run", "--wait", "10", &key, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    releaser.join().unwrap();
    let out = b.output(&["run", "--wait", "0.3", &key, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "free now: {}", stderr(&out));
}

/// A waiting run is woken by the release, not by its deadline, and SIGTERM
/// ends the wait at once.
fn a_waiting_run_starts_at_the_release_and_sigterm_ends_its_wait(b: &Backend) {
    let key = unique("woken");
    let locks = b.locks();
    assert!(locks.acquire(&key, Duration::from_secs(30)).unwrap());
    let mut run = b.spawn(&[
        "run",
        "--wait",
        "60",
        &key,
        "--",
        "sh",
        "-c",
        "echo started",
    ]);
    std::thread::sleep(Duration::from_millis(500));
    let released = Instant::now();
    assert!(locks.release(&key).unwrap());
    read_until(&mut run, "started");
    let (code, _) = wait_exit(&mut run, Duration::from_secs(20));
    assert_eq!(code, 0);
    assert!(released.elapsed() < Duration::from_secs(10));

    assert!(locks.acquire(&key, Duration::from_secs(30)).unwrap());
    let mut run = b.spawn(&["run", "--wait", "forever", &key, "--", "true"]);
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill with a child's pid and a signal number.
    unsafe {
        libc::kill(run.id() as i32, libc::SIGTERM);
    }
    let (code, took) = wait_exit(&mut run, Duration::from_secs(10));
    assert_eq!(code, 128 + libc::SIGTERM);
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(locks.release(&key).unwrap(), "the waiter left the line");
}

/// `--max-hold`: a command that outlives it is ended as a lost lease.
fn max_hold_ends_a_long_command(b: &Backend) {
    let key = unique("capped");
    let mut run = b.spawn(&[
        "run",
        "--ttl",
        "1",
        "--heartbeat",
        "0.1",
        "--grace",
        "1",
        "--max-hold",
        "1.5",
        &key,
        "--",
        "sh",
        "-c",
        "echo ready; sleep 60",
    ]);
    read_until(&mut run, "ready");
    let (code, took) = wait_exit(&mut run, Duration::from_secs(20));
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(code, LOST, "{err}");
    assert!(err.contains("max_hold"), "{err}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// `--progress-timeout`: output is copied through and counts as progress;
/// silence for the timeout ends the command as a lost lease.
fn progress_timeout_watches_the_output(b: &Backend) {
    let key = unique("progress");
    let out = b.output(&[
        "run",
        "--ttl",
        "5",
        "--heartbeat",
        "0.1",
        "--progress-timeout",
        "0.5",
        &key,
        "--",
        "sh",
        "-c",
        "for i in 1 2 3 4 5 6 7 8 9 10; do echo tick $i; echo err $i >&2; sleep 0.1; done",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        text.lines().filter(|l| l.starts_with("tick")).count(),
        10,
        "{text}"
    );
    assert!(stderr(&out).contains("err 10"), "{}", stderr(&out));

    let mut run = b.spawn(&[
        "run",
        "--ttl",
        "5",
        "--heartbeat",
        "0.1",
        "--grace",
        "1",
        "--progress-timeout",
        "0.5",
        &key,
        "--",
        "sh",
        "-c",
        "echo ready; sleep 60",
    ]);
    read_until(&mut run, "ready");
    let (code, took) = wait_exit(&mut run, Duration::from_secs(20));
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(code, LOST, "{err}");
    assert!(err.contains("stalled"), "{err}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(!b.locks().held(&key).unwrap(), "released on the way out");
}

/// `--limit 2`: two runs hold the key at once, a third is refused, and
/// `status` lists both holders.
fn runs_share_a_limited_lease(b: &Backend) {
    let key = unique("pool");
    let spawn = |label: &str| {
        b.spawn(&[
            "run",
            "--limit",
            "2",
            "--label",
            label,
            &key,
            "--",
            "sh",
            "-c",
            "echo ready fence=$MISTRI_LOCK_FENCE; sleep 30",
        ])
    };
    let mut first = spawn("first");
    let mut second = spawn("second");
    let f1 = read_until(&mut first, "ready");
    let f2 = read_until(&mut second, "ready");
    assert_ne!(f1, f2, "each holder has its own fence");
    let out = b.output(&["run", "--limit", "2", &key, "--", "true"]);
    assert_eq!(out.status.code(), Some(REFUSED), "{}", stderr(&out));
    let out = b.output(&["status", "--json", &key]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["leases"][0]["limit"], 2);
    let labels: Vec<&str> = doc["leases"][0]["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["holder"].as_str().unwrap())
        .collect();
    assert_eq!(labels.len(), 2, "{doc}");
    assert!(
        labels.contains(&"first") && labels.contains(&"second"),
        "{doc}"
    );
    let out = b.output(&["status", &key]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("[1/2]") && text.contains("[2/2]"), "{text}");
    for run in [&mut first, &mut second] {
        // SAFETY: kill with a child's pid and a signal number.
        unsafe {
            libc::kill(run.id() as i32, libc::SIGTERM);
        }
        let (code, _) = wait_exit(run, Duration::from_secs(20));
        assert_eq!(code, 128 + libc::SIGTERM);
    }
    assert!(!b.locks().held(&key).unwrap(), "both released");
}

fn list_shows_leases_and_flags(b: &Backend) {
    let prefix = unique("listed");
    let locks = b.locks();
    assert!(locks
        .acquire(&format!("{prefix}:a"), Duration::from_secs(5))
        .unwrap());
    let out = b.output(&["stop", "--ttl", "10s", &format!("{prefix}:stop")]);
    assert_eq!(out.status.code(), Some(0));
    let out = b.output(&["list", "--json", &prefix]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["leases"].as_array().unwrap().len(), 1);
    assert_eq!(doc["flags"][0]["key"], format!("{prefix}:stop").as_str());
    // It is the operator's state document (`GET /api/state`), rendered by
    // the core: its prefix, the waiting lines, each holder's `stuck`.
    assert_eq!(doc["prefix"], prefix.as_str());
    assert!(doc["now_ms"].is_u64(), "{doc}");
    assert_eq!(doc["waiting"], serde_json::json!([]));
    assert_eq!(doc["leases"][0]["waiting"], 0);
    assert_eq!(doc["leases"][0]["stuck"], false);
    let out = b.output(&["list", &prefix]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("FLAG UP") && text.contains(":a"), "{text}");
}

fn all(b: &Backend) {
    exits_with_the_child_status_and_exports_the_fence(b);
    stop_ends_a_run_whose_child_ignores_sigterm(b);
    sigterm_is_forwarded_and_the_lease_released(b);
    a_broken_lease_is_lost(b);
    waits_for_a_busy_lease(b);
    a_waiting_run_starts_at_the_release_and_sigterm_ends_its_wait(b);
    max_hold_ends_a_long_command(b);
    progress_timeout_watches_the_output(b);
    runs_share_a_limited_lease(b);
    list_shows_leases_and_flags(b);
}

#[test]
fn on_local() {
    all(&Backend::local());
}

#[test]
fn on_redis() {
    let server = RedisServer::start();
    all(&Backend::redis(&server));
}

#[test]
fn on_postgres() {
    let server = PgServer::start();
    all(&Backend::postgres(&server));
}

/// `--url mysql://…` (a MariaDB 10.11), driven as on the others.
#[test]
fn on_mysql() {
    let server = MariaDbServer::start();
    all(&Backend::mysql(&server));
}

/// `stop --holder-of KEY` calls the core's `Locks::stop_holders`: each
/// holder's stop key raised once for `--ttl` (exit 0, "raised …"); a key
/// nobody holds, or whose holder watches no stop key, raises nothing
/// (exit 1, one line saying which); a backend that cannot be reached is
/// exit 1 with its error; a bad key is usage (exit 2).
fn stop_holder_of(b: &Backend) {
    let locks = b.locks();
    let key = unique("held");
    let stop = format!("{key}:stop");
    // Two holders of a 2-holder lease watching the same stop key, and a
    // third key whose holder watches none.
    let watching = |limit| HoldOptions {
        stop_key: Some(stop.clone()),
        limit,
        ..HoldOptions::default()
    };
    let first = locks.hold(&key, watching(2)).unwrap().expect("free");
    let second = locks.hold(&key, watching(2)).unwrap().expect("a slot");
    let out = b.output(&["stop", "--holder-of", &key, "--ttl", "10s"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Raised once, however many holders watch it.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("raised {stop}\n")
    );
    assert!(locks.flag(&stop).unwrap(), "the stop key is not up");
    // For --ttl (10 s), not the 300 s default.
    let doc = json(&b.output(&["list", "--json", &stop]));
    let left = doc["flags"][0]["time_left_s"].as_f64().unwrap();
    assert!(left > 0.0 && left <= 10.0, "{doc}");
    first.release().unwrap();
    second.release().unwrap();
    locks.clear_flag(&stop).unwrap();

    // Nobody holds it: nothing raised, exit 1.
    let out = b.output(&["stop", "--holder-of", &key]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert_eq!(
        stderr(&out),
        format!("mistri-locks: no live lease on {key}\n")
    );
    assert!(!locks.flag(&stop).unwrap());

    // Held by a plain lease: no stop key to raise, exit 1.
    let plain = locks
        .hold(&key, HoldOptions::default())
        .unwrap()
        .expect("free");
    let out = b.output(&["stop", "--holder-of", &key]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains(&format!("the holder of {key} watches no stop key")),
        "{}",
        stderr(&out)
    );
    plain.release().unwrap();

    // A bad key is usage.
    let out = b.output(&["stop", "--holder-of", ""]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn stop_holder_of_on_local_and_redis() {
    stop_holder_of(&Backend::local());
    let server = RedisServer::start();
    stop_holder_of(&Backend::redis(&server));
    // The backend's error: a redis-server that is gone.
    let gone = Backend::redis(&server);
    drop(server);
    let out = gone.output(&["stop", "--holder-of", "k"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    let text = stderr(&out);
    assert!(
        text.starts_with("mistri-locks: ") && text.lines().count() == 1,
        "{text}"
    );
}

/// `mistri-locks schema` prints DDL that a DBA runs (twice: idempotent);
/// the application's handle then finds its tables there.
#[test]
fn schema_prints_the_ddl() {
    let server = PgServer::start();
    let out = Command::new(BIN)
        .env_remove("MISTRI_LOCKS_URL")
        .args(["schema", "--schema", "cli_ddl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ddl = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        ddl.trim_end(),
        mistri_locks::Postgres::schema_sql("cli_ddl")
            .unwrap()
            .trim_end()
    );
    assert!(ddl.contains("\"cli_ddl\".fence_check"), "{ddl}");
    server.sql(&ddl);
    server.sql(&ddl);
    let url = format!("{}?schema=cli_ddl", server.url());
    let locks = Locks::open_with(&url, &OpenOptions::new().namespace("mistri:cli")).unwrap();
    assert!(locks.acquire("after-ddl", Duration::from_secs(5)).unwrap());
    assert_eq!(
        server
            .sql("SELECT count(*) FROM cli_ddl.leases WHERE key = 'after-ddl'")
            .trim(),
        "1"
    );
    // Without --schema: the URL's ?schema=, else mistri_locks.
    let from_url = Command::new(BIN)
        .env("MISTRI_LOCKS_URL", &url)
        .arg("schema")
        .output()
        .unwrap();
    assert_eq!(from_url.status.code(), Some(0));
    assert_eq!(String::from_utf8(from_url.stdout).unwrap(), ddl);
    let default = Command::new(BIN)
        .env_remove("MISTRI_LOCKS_URL")
        .arg("schema")
        .output()
        .unwrap();
    let default = String::from_utf8(default.stdout).unwrap();
    assert!(
        default.contains("\"mistri_locks\".fence_check"),
        "{default}"
    );
    // A name that is not a plain identifier: bad usage, one line.
    let bad = Command::new(BIN)
        .env_remove("MISTRI_LOCKS_URL")
        .args(["schema", "--schema", "x; DROP TABLE y"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert_eq!(stderr(&bad).lines().count(), 1);
}

/// `mistri-locks schema` for MySQL/MariaDB: the tables and procedures,
/// statements ended by lines of `$$`, chosen by a mysql:// URL (its
/// `?prefix=`) or `--prefix`; a DBA runs it twice (idempotent), and the
/// application's handle then finds its tables under that prefix.
#[test]
fn schema_prints_the_mysql_ddl() {
    let server = MariaDbServer::start();
    let url = format!("{}?prefix=cli_", server.url());
    let out = Command::new(BIN)
        .env("MISTRI_LOCKS_URL", &url)
        .arg("schema")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ddl = String::from_utf8(out.stdout).unwrap();
    assert_eq!(ddl, mistri_locks::MySql::schema_sql("cli_").unwrap());
    let by_flag = Command::new(BIN)
        .env_remove("MISTRI_LOCKS_URL")
        .args(["schema", "--prefix", "cli_"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(by_flag.stdout).unwrap(), ddl);
    for _ in 0..2 {
        server
            .try_sql_delimited(&ddl, "$$", Duration::from_secs(60))
            .unwrap();
    }
    // The DDL made the tables and recorded its version, before any handle.
    assert_eq!(server.sql("SELECT COUNT(*) FROM cli_meta").trim(), "1");
    let locks = Locks::open_with(&url, &OpenOptions::new().namespace("mistri:cli")).unwrap();
    assert!(locks.acquire("after-ddl", Duration::from_secs(5)).unwrap());
    let rows = server.sql("SELECT COUNT(*) FROM cli_leases");
    assert_eq!(rows.trim(), "1", "the lease is in the prefixed table");
    // A prefix that is not a plain identifier: bad usage, one line.
    let bad = Command::new(BIN)
        .env_remove("MISTRI_LOCKS_URL")
        .args(["schema", "--prefix", "x; DROP TABLE y"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert_eq!(stderr(&bad).lines().count(), 1);
}

/// Bad input: one line on stderr, a non-zero status, never a panic.
#[test]
fn bad_input_is_one_line_and_non_zero() {
    let b = Backend::local();
    let refused = std::env::temp_dir().join(unique("mistri-cli-open"));
    std::fs::create_dir_all(&refused).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&refused, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let refused_db = refused.join("locks.db").display().to_string();
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["frobnicate"], 2),
        (vec!["run", "k", "--ttl", "abc", "--", "true"], 2),
        (vec!["run", "k", "--ttl", "-1", "--", "true"], 2),
        (vec!["run", "k", "--grace", "0", "--", "true"], 2),
        (vec!["run", "k"], 2),
        (vec!["run", "", "--", "true"], 2),
        (vec!["run", "k", "--limit", "0", "--", "true"], 2),
        (vec!["run", "k", "--limit", "abc", "--", "true"], 2),
        (vec!["run", "k", "--limit", "2000000", "--", "true"], 2),
        (vec!["run", "k", "--wait", "-1", "--", "true"], 2),
        (vec!["run", "k", "--max-hold", "0", "--", "true"], 2),
        (
            vec!["run", "k", "--progress-timeout", "-1", "--", "true"],
            2,
        ),
        (vec!["stop", ""], 2),
        (vec!["stop", "f", "--ttl", "NaN"], 2),
        (vec!["--url", "http://example.com", "status"], 2),
        (vec!["--url", "redis://[nope", "status"], 2),
        (vec!["--url", "redis://127.0.0.1:1/0", "status"], 1),
        (
            vec!["--url", "redis://127.0.0.1:1/0", "run", "k", "--", "true"],
            1,
        ),
        (vec!["--url", &refused_db, "status"], 1),
        (
            vec!["--url", "postgres://127.0.0.1/db?sslmode=bogus", "status"],
            2,
        ),
        (vec!["--url", "postgresql://127.0.0.1:1/db", "status"], 1),
        (vec!["run", "k", "--", "/nonexistent/command"], 127),
        (vec!["completions", "nosh"], 2),
    ];
    for (args, want) in cases {
        let mut c = Command::new(BIN);
        c.env_remove("MISTRI_LOCKS_URL");
        if args.first() != Some(&"--url") {
            c.arg("--url").arg(&b.url);
        }
        let out = c.args(&args).output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(want), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
        assert!(err.starts_with("mistri-locks: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(refused);
}

#[test]
fn help_for_every_command_and_completions() {
    for cmd in [
        vec!["--help"],
        vec!["status", "--help"],
        vec!["list", "--help"],
        vec!["stop", "--help"],
        vec!["clear", "--help"],
        vec!["break", "--help"],
        vec!["run", "--help"],
        vec!["completions", "--help"],
        vec!["schema", "--help"],
        vec!["help", "run"],
    ] {
        let out = Command::new(BIN).args(&cmd).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{cmd:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Usage: mistri-locks"), "{cmd:?}: {text}");
    }
    let run = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(
        text.contains("MISTRI_LOCK_FENCE") && text.contains("76"),
        "{text}"
    );
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("mistri-locks") && text.contains("stop"),
            "{shell}"
        );
    }
}
