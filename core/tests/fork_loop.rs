//! Fork in a tight loop while a busy heartbeat runs (issue 9, case 7): a
//! `fork` may land while the heartbeat thread holds one of the library's
//! mutexes; the child inherits it locked, with no thread to unlock it. Each
//! child makes one `hold` of a fresh key and `_exit`s; the parent gives it
//! 3 s and kills it if it hangs. The promise: no child ever hangs.
//!
//! ```text
//! cargo test -p mistri_locks_core --test fork_loop -- --nocapture --test-threads=1
//! ```
//!
//! In its own binary: forking a process full of test threads is asking for
//! trouble, and the two cases are serialized by a lock for the same reason.

mod common;
use common::*;
use mistri_locks::Locks;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const FORKS: usize = 300;
const CHILD_LIMIT: Duration = Duration::from_secs(3);
/// Stop early after this many hung children: the verdict is clear, and the
/// run stays bounded (at most this many × 3 s of waiting).
const STOP_AFTER_HUNG: usize = 5;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[derive(Default, Debug)]
struct Tally {
    forks: usize,
    ok: usize,
    failed: usize,
    hung: usize,
}

/// What the child does: one hold of a fresh key, then `_exit` with a code
/// that says how it went. Never returns.
fn child(locks: &Locks, key: &str) -> ! {
    let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        locks.hold(key, opts(5.0, 1.0))
    })) {
        Ok(Ok(Some(_hold))) => 0,
        Ok(Ok(None)) => 3,
        Ok(Err(_)) => 4,
        Err(_) => 5,
    };
    // SAFETY: _exit takes no pointers and never returns; skipping the
    // test harness and every destructor in the child is the point.
    unsafe { libc::_exit(code) }
}

fn fork_loop(label: &str, locks: &Locks, busy: usize, heartbeat: f64) {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let holds: Vec<_> = (0..busy)
        .map(|i| {
            locks
                .hold(&format!("busy-{i}"), opts(5.0, heartbeat))
                .unwrap()
                .expect("free")
        })
        .collect();
    std::thread::sleep(secs(0.2)); // the heartbeat is in full swing
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut slowest = Duration::ZERO;
    for i in 0..FORKS {
        let key = format!("fresh-{i}");
        // SAFETY: fork has no memory-safety preconditions; the child only
        // calls the library and `_exit`s (see `child`), never returning into
        // the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            child(locks, &key);
        }
        tally.forks += 1;
        let forked = Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: `status` is a valid out-pointer; `pid` is our child.
            let waited = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            assert!(waited >= 0, "waitpid failed");
            if waited == pid {
                slowest = slowest.max(forked.elapsed());
                if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                    tally.ok += 1;
                } else {
                    tally.failed += 1;
                }
                break;
            }
            if forked.elapsed() >= CHILD_LIMIT {
                if tally.hung == 0 {
                    print_stack(label, pid);
                }
                // SAFETY: kill and waitpid take no pointers but `status`
                // (valid); `pid` is our unreaped child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                tally.hung += 1;
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if tally.hung >= STOP_AFTER_HUNG {
            break;
        }
    }
    let lost = holds.iter().filter(|h| h.is_lost()).count();
    println!(
        "{label}: {busy} holds at {} ms heartbeat; {} forks in {:.1} s: {} ok, {} failed, {} hung (killed after 3 s){}; slowest finished child {:?}; busy holds lost meanwhile: {lost}",
        heartbeat * 1000.0,
        tally.forks,
        started.elapsed().as_secs_f64(),
        tally.ok,
        tally.failed,
        tally.hung,
        if tally.forks < FORKS { " - stopped early" } else { "" },
        slowest,
    );
    for h in holds {
        let _ = h.release();
    }
    assert_eq!(tally.hung, 0, "{label}: {tally:?}");
    assert_eq!(tally.failed, 0, "{label}: {tally:?}");
}

/// Where a hung child is stuck, if gdb is at hand (so a failure says which
/// lock it is, not just that there is one). Bounded: gdb gets 20 s.
fn print_stack(label: &str, pid: libc::pid_t) {
    let Ok(mut gdb) = std::process::Command::new("gdb")
        .args(["-p", &pid.to_string(), "-batch", "-ex", "bt"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
    else {
        return;
    };
    let started = Instant::now();
    while gdb.try_wait().ok().flatten().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = gdb.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = String::new();
    if let Some(mut stdout) = gdb.stdout.take() {
        use std::io::Read;
        let _ = stdout.read_to_string(&mut out);
    }
    let _ = gdb.wait();
    println!("{label}: first hung child ({pid}) is stuck at:");
    for line in out.lines().filter(|l| l.starts_with('#')).take(25) {
        println!("    {line}");
    }
}

#[test]
fn fork_loop_memory_2000_holds_1ms() {
    fork_loop("Memory", &Locks::memory(), 2000, 0.001);
}

#[test]
fn fork_loop_local_200_holds_10ms() {
    let dir = std::env::temp_dir().join(mistri_locks_testkit::unique("mistri-fork-loop"));
    std::fs::create_dir_all(&dir).unwrap();
    let locks = Locks::local(Some(&dir.join("locks.db"))).unwrap();
    fork_loop("Local", &locks, 200, 0.01);
    let _ = std::fs::remove_dir_all(&dir);
}
