//! Helpers shared by the core's integration tests.

#![allow(dead_code)] // each test binary uses its own subset

use mistri_locks::{Adapter, Beat, HoldOptions, Lease, Memory, Renewal, Renewed, Result};
use std::time::{Duration, Instant};

/// `CLOCK_MONOTONIC` in ns: one clock for every process of the host.
pub fn mono_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Seconds as a `Duration`.
pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// A fresh folder for a Local database, removed on drop.
pub struct Dir(pub std::path::PathBuf);

impl Dir {
    pub fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(mistri_locks_testkit::unique(name));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    /// The database file in it.
    pub fn db(&self) -> std::path::PathBuf {
        self.0.join("locks.db")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Hold options that watch `stop`, ttl 60 s, heartbeat 5 s (a 1 s tick).
pub fn stop_opts(stop: &str) -> HoldOptions {
    HoldOptions {
        stop_key: Some(stop.into()),
        ..opts(60.0, 5.0)
    }
}

/// Hold options with this ttl and heartbeat (seconds), the rest default.
pub fn opts(ttl: f64, heartbeat: f64) -> HoldOptions {
    HoldOptions {
        ttl: secs(ttl),
        heartbeat: secs(heartbeat),
        ..HoldOptions::default()
    }
}

/// What a test adapter does with a heartbeat batch; everything else goes
/// to its [`Memory`] as is.
pub trait BeatHook: Send + Sync + 'static {
    /// The batch, with the Memory to pass it on to (by default, as is).
    fn beat(
        &self,
        inner: &Memory,
        renewals: &[Renewal<'_>],
        flags: &[&str],
        deadline: Instant,
    ) -> Result<Beat> {
        inner.beat(renewals, flags, deadline)
    }
}

/// A Memory adapter whose batches go through `hook` (tests that count,
/// stall or fail the engine's round trips). Derefs to the hook, so a test
/// reads its counters as fields.
#[derive(Default)]
pub struct Wrapped<H> {
    pub inner: Memory,
    pub hook: H,
}

impl<H> std::ops::Deref for Wrapped<H> {
    type Target = H;
    fn deref(&self) -> &H {
        &self.hook
    }
}

impl<H: BeatHook> Adapter for Wrapped<H> {
    fn name(&self) -> &'static str {
        "wrapped-memory"
    }
    fn acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lease>> {
        self.inner.acquire(key, ttl)
    }
    fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool> {
        self.inner.renew(lease, ttl)
    }
    fn renew_within(&self, renewal: &Renewal<'_>) -> Result<Renewed> {
        self.inner.renew_within(renewal)
    }
    fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease)
    }
    fn held(&self, key: &str) -> Result<bool> {
        self.inner.held(key)
    }
    fn break_lease(&self, key: &str) -> Result<bool> {
        self.inner.break_lease(key)
    }
    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()> {
        self.inner.set_flag(key, ttl)
    }
    fn flag(&self, key: &str) -> Result<bool> {
        self.inner.flag(key)
    }
    fn clear_flag(&self, key: &str) -> Result<()> {
        self.inner.clear_flag(key)
    }
    fn beat(&self, renewals: &[Renewal<'_>], flags: &[&str], deadline: Instant) -> Result<Beat> {
        self.hook.beat(&self.inner, renewals, flags, deadline)
    }
}

/// Runs `child` in a forked child with a 10 s alarm (a hang fails the test
/// instead of wedging it) and returns its exit code.
pub fn in_child(child: impl FnOnce() -> i32) -> i32 {
    // SAFETY: fork has no memory-safety preconditions; the child only runs
    // `child` and then _exit, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: alarm and _exit are async-signal-safe and take no pointers.
        unsafe { libc::alarm(10) };
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(99);
        // SAFETY: as above.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer; pid is our child.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    if libc::WIFSIGNALED(status) {
        panic!("child killed by signal {} (hung?)", libc::WTERMSIG(status));
    }
    libc::WEXITSTATUS(status)
}

/// Starts this test binary again as a child running its `child` test with
/// `env`, and waits until it says `ready` on stderr: the child and the rest
/// of what it says.
pub fn spawn_ready_child(
    env: &[(&str, &str)],
) -> (
    std::process::Child,
    std::io::Lines<std::io::BufReader<std::process::ChildStderr>>,
) {
    use std::io::BufRead;
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().unwrap();
    let mut said = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let ready = said.by_ref().map_while(Result::ok).any(|l| l == "ready");
    assert!(ready, "the waiting process never started");
    (child, said)
}

/// A fresh Local database path for `suite`'s case `name`, in a new folder
/// of its own under the temp dir (made, and emptied if it was there).
pub fn temp_db(suite: &str, name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mistri-{suite}-{}-{}",
        std::process::id(),
        mistri_locks_testkit::unique(name)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("locks.db")
}
