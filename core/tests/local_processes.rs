//! The Local adapter across real processes. The test binary re-executes
//! itself as the child processes: `child` below does nothing unless
//! `MISTRI_TEST_ROLE` is set.

mod common;
use common::*;
use mistri_locks::{Error, HoldOptions, Locks};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KEY: &str = "contended";

fn spawn(role: &str, dir: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env("MISTRI_TEST_ROLE", role)
        .env("MISTRI_TEST_DIR", dir)
        .stdout(Stdio::null()) // the child's own test summary would be noise
        .spawn()
        .unwrap()
}

fn wait_for(path: &Path, limit: Duration) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < limit, "{} never appeared", path.display());
        std::thread::sleep(secs(0.005));
    }
}

/// The child processes' entry point.
#[test]
fn child() {
    let Ok(role) = std::env::var("MISTRI_TEST_ROLE") else {
        return;
    };
    let dir = PathBuf::from(std::env::var("MISTRI_TEST_DIR").unwrap());
    let locks = Locks::local(Some(&dir.join("locks.db"))).unwrap();
    match role.as_str() {
        "contend" => contend(&locks, &dir),
        "hold-forever" => {
            let hold = locks.hold(KEY, opts(1.0, 0.2)).unwrap().expect("free");
            std::fs::write(dir.join("ready"), hold.fence().to_string()).unwrap();
            std::thread::sleep(secs(60.0));
        }
        "hold-until-stopped" => {
            let stop = HoldOptions {
                stop_key: Some("stop".into()),
                ..opts(5.0, 0.1)
            };
            let hold = locks.hold(KEY, stop).unwrap().expect("free");
            std::fs::write(dir.join("ready"), "").unwrap();
            assert!(hold.signal().wait(Some(secs(20.0))), "never stopped");
            std::fs::write(dir.join("reason"), hold.signal().reason().unwrap()).unwrap();
            hold.release().unwrap();
        }
        other => panic!("unknown role {other}"),
    }
}

const WINS_EACH: usize = 15;

fn contend(locks: &Locks, dir: &Path) {
    let deadline = Instant::now() + secs(60.0);
    let mut wins = 0;
    while wins < WINS_EACH {
        assert!(Instant::now() < deadline, "could not win {WINS_EACH} times");
        let Some(hold) = locks.hold(KEY, opts(5.0, 1.0)).unwrap() else {
            std::thread::sleep(secs(0.0005));
            continue;
        };
        // The witness: an exclusive-create marker that a second holder
        // inside at the same time would find already there.
        let marker = dir.join("inside");
        if std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&marker)
            .is_err()
        {
            std::fs::write(dir.join("overlap"), "two holders at once").unwrap();
            panic!("two holders at once");
        }
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(dir.join("log"))
            .unwrap();
        writeln!(log, "{}", hold.fence()).unwrap();
        std::thread::sleep(secs(0.001));
        std::fs::remove_file(&marker).unwrap();
        hold.release().unwrap();
        wins += 1;
    }
}

#[test]
fn processes_contending_never_overlap_and_fences_increase() {
    let dir = Dir::new("mistri-local-contend");
    Locks::local(Some(&dir.db())).unwrap(); // create it once, up front
    let children: Vec<Child> = (0..4).map(|_| spawn("contend", &dir.0)).collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    assert!(!dir.0.join("overlap").exists());
    let log = std::fs::read_to_string(dir.0.join("log")).unwrap();
    let fences: Vec<u64> = log.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(fences.len(), 4 * WINS_EACH);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences not increasing: {fences:?}"
    );
}

#[test]
fn fences_keep_increasing_across_reopen() {
    let dir = Dir::new("mistri-local-reopen");
    let first = {
        let locks = Locks::local(Some(&dir.db())).unwrap();
        let h = locks.hold("k", opts(5.0, 1.0)).unwrap().unwrap();
        h.fence()
    };
    let locks = Locks::local(Some(&dir.db())).unwrap();
    let h = locks.hold("k", opts(5.0, 1.0)).unwrap().unwrap();
    assert!(h.fence() > first);
}

#[test]
fn a_sigkilled_holders_lease_frees_within_ttl_plus_a_tick() {
    let dir = Dir::new("mistri-local-kill");
    let mut child = spawn("hold-forever", &dir.0);
    wait_for(&dir.0.join("ready"), secs(20.0));
    let locks = Locks::local(Some(&dir.db())).unwrap();
    assert!(locks.held(KEY).unwrap());
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let killed = Instant::now();
    while !locks.acquire(KEY, secs(5.0)).unwrap() {
        assert!(killed.elapsed() < secs(5.0), "never freed");
        std::thread::sleep(secs(0.01));
    }
    let took = killed.elapsed();
    // ttl 1 s, renewed every 0.2 s: free 0.8–1.0 s after the kill.
    assert!(
        took >= secs(0.6),
        "freed too early ({took:?}): was it renewing?"
    );
    assert!(took <= secs(1.0 + 0.2 + 0.3), "freed after {took:?}");
}

#[test]
fn a_stop_flag_from_another_process_trips_the_holder() {
    let dir = Dir::new("mistri-local-stop");
    let mut child = spawn("hold-until-stopped", &dir.0);
    wait_for(&dir.0.join("ready"), secs(20.0));
    let locks = Locks::local(Some(&dir.db())).unwrap();
    assert!(locks.held(KEY).unwrap());
    let raised = Instant::now();
    locks.set_flag("stop", secs(30.0)).unwrap();
    wait_for(&dir.0.join("reason"), secs(5.0));
    let took = raised.elapsed();
    assert!(took <= secs(0.1 + 0.3), "tripped after {took:?}");
    assert!(child.wait().unwrap().success());
    assert!(!locks.held(KEY).unwrap(), "released on the way out");
}

#[test]
fn a_corrupt_database_is_a_clear_error_not_a_hang() {
    let dir = Dir::new("mistri-local-corrupt");
    std::fs::write(dir.db(), "this is not an sqlite database\n".repeat(200)).unwrap();
    let start = Instant::now();
    let err = Locks::local(Some(&dir.db())).unwrap_err();
    assert!(start.elapsed() < secs(2.0));
    assert!(matches!(err, Error::Config(_)), "{err}");
    assert!(err.to_string().contains("locks.db"), "{err}");
}

#[test]
fn an_unusable_path_is_a_clear_error() {
    let dir = Dir::new("mistri-local-unusable");
    let file = dir.0.join("a-file");
    std::fs::write(&file, "").unwrap();
    // Its parent is a file, not a folder: even root can't create it.
    let err = Locks::local(Some(&file.join("locks.db"))).unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
    assert!(err.to_string().contains("a-file"), "{err}");
}
