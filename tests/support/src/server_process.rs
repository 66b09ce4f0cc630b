//! The life of one throwaway server process, shared by every harness here
//! ([`crate::RedisServer`], the [`crate::RedisCluster`] and
//! [`crate::RedisSentinels`] nodes, [`crate::PgServer`],
//! [`crate::PgBouncer`], [`crate::MariaDbServer`]). A harness states what
//! differs (its [`Kind`], its command line, how it tells the server is
//! ready, which signal stops it); [`ServerProcess`] does the rest the same
//! way for all:
//!
//! - **Spawn**: the child is told to die with the thread that spawned it
//!   (`PR_SET_PDEATHSIG`, the kind's signal), so a test killed outright
//!   leaves no server behind; then its readiness is polled until the
//!   kind's deadline. A child that exits first, or is not ready by then
//!   (it is killed), is an error that carries the tail of its log.
//! - **Processes**: the child and the children it forks (a postmaster's
//!   backends), read from `/proc`; a server of threads has none.
//! - **Freeze** (SIGSTOP to the child, then to its children, read again
//!   until none is left running) returns once every thread of every one of
//!   them shows stopped, so a caller that times a silence from there times
//!   a real one. **Thaw** is SIGCONT, the children first.
//! - **Shutdown** with the server's own signal (thawed first), SIGKILL to
//!   every process past the kind's deadline; **kill** is SIGKILL to every
//!   process at once, as a crash. Both reap the child and wait until its
//!   children are gone, so the port and the data folder are free for a
//!   restart. Dropping a [`ServerProcess`] kills what is left.
//!
//! Around it: [`free_port`], [`fresh_folder`], [`run_within`] and
//! [`client_output`] (a helper program with a deadline), [`log_tail`], [`retry_for`] and
//! [`first_success`] (the retries of a restart and of a first start).

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What differs between servers in how their process is run.
pub(crate) struct Kind {
    /// The program's name, in messages.
    pub name: &'static str,
    /// How to get it, in the message of a spawn that fails.
    pub install: &'static str,
    /// How long a spawned server may take to be ready.
    pub start_within: Duration,
    /// How long a shutdown may take before SIGKILL, and a freeze before
    /// it is a failure.
    pub stop_within: Duration,
    /// The pause between two readiness checks.
    pub poll: Duration,
    /// The signal the server gets when the thread that spawned it dies.
    pub death_signal: libc::c_int,
}

/// A free port on 127.0.0.1 (free when asked: the caller binds it soon).
pub(crate) fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// `parent/PREFIX-PID-PORT`, empty: a leftover of the same name (this
/// process, this port) is removed first.
pub(crate) fn fresh_folder(parent: &Path, prefix: &str, port: u16) -> Result<PathBuf, String> {
    let dir = parent.join(format!("{prefix}-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// The last 2,000 bytes of the file at `path` (empty if unreadable).
pub(crate) fn log_tail(path: &Path) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let start = log.len().saturating_sub(2000);
    log.get(start..).unwrap_or(&log).to_owned()
}

/// `attempt` up to `times` times; the first success, or a panic with the
/// last error (a test helper: a server that won't start ends the test).
pub(crate) fn first_success<T>(
    times: usize,
    what: &str,
    mut attempt: impl FnMut() -> Result<T, String>,
) -> T {
    let mut last = String::new();
    for _ in 0..times {
        match attempt() {
            Ok(done) => return done,
            Err(e) => last = e,
        }
    }
    panic!("could not start {what}: {last}");
}

/// `attempt` again, `pause` apart, until it succeeds or `within` has
/// passed: its success or its last error.
pub(crate) fn retry_for<T>(
    within: Duration,
    pause: Duration,
    mut attempt: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + within;
    loop {
        match attempt() {
            Ok(done) => return Ok(done),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(pause),
        }
    }
}

/// Runs `cmd` to completion within `within`, killing it past that.
/// Returns (success, stdout, stderr).
pub(crate) fn run_within(
    mut cmd: Command,
    within: Duration,
) -> Result<(bool, String, String), String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{cmd:?} not runnable: {e}"))?;
    // Drain both pipes on threads so a chatty child never blocks.
    let mut out_pipe = child.stdout.take().expect("stdout piped");
    let mut err_pipe = child.stderr.take().expect("stderr piped");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    match status {
        Some(status) => Ok((status.success(), out, err)),
        None => Err(format!("{cmd:?} did not finish within {within:?}: {err}")),
    }
}

/// Runs a client program (`psql`, `mariadb`) within `within`: its
/// output (the last newline dropped), or its error (stderr, then stdout).
pub(crate) fn client_output(cmd: Command, within: Duration) -> Result<String, String> {
    match run_within(cmd, within)? {
        (true, out, _) => Ok(out.trim_end_matches('\n').to_owned()),
        (false, out, err) => Err(format!("{}{}", err.trim(), out.trim())),
    }
}

/// `s` with every byte but RFC 3986's unreserved ones as `%XX`, for a
/// password in a URL.
pub(crate) fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One server process of a harness (module header); none until spawned.
pub(crate) struct ServerProcess {
    kind: &'static Kind,
    child: Option<Child>,
    frozen: AtomicBool,
}

impl ServerProcess {
    pub(crate) fn new(kind: &'static Kind) -> ServerProcess {
        ServerProcess {
            kind,
            child: None,
            frozen: AtomicBool::new(false),
        }
    }

    /// Spawns `cmd` (dying with this thread) and polls `ready` (given the
    /// child's pid) until it says yes. On failure nothing is left running;
    /// the error ends with the tail of `log`, if given.
    pub(crate) fn spawn(
        &mut self,
        mut cmd: Command,
        log: Option<&Path>,
        mut ready: impl FnMut(u32) -> bool,
    ) -> Result<(), String> {
        let kind = self.kind;
        debug_assert!(self.child.is_none(), "{} spawned twice", kind.name);
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            let death_signal = kind.death_signal;
            // SAFETY: prctl is async-signal-safe and touches no memory of
            // ours; it runs in the child between fork and exec, after std
            // has changed the uid if asked to (which would clear the
            // setting), so it sticks.
            unsafe {
                cmd.pre_exec(move || {
                    libc::prctl(libc::PR_SET_PDEATHSIG, death_signal);
                    Ok(())
                });
            }
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("{} not runnable ({}): {e}", kind.name, kind.install))?;
        let pid = child.id();
        self.child = Some(child);
        self.frozen.store(false, Ordering::SeqCst);
        let tail = || {
            log.map(|l| format!("; log: {}", log_tail(l)))
                .unwrap_or_default()
        };
        let deadline = Instant::now() + kind.start_within;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!("{} exited early ({status}){}", kind.name, tail()));
            }
            if ready(pid) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(format!(
                    "{} was not ready within {:?}{}",
                    kind.name,
                    kind.start_within,
                    tail()
                ));
            }
            std::thread::sleep(kind.poll);
        }
    }

    /// The child's pid, if it is running.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The child first, then its live children; empty if not running.
    pub(crate) fn pids(&self) -> Vec<i32> {
        let Some(main) = self.main() else {
            return Vec::new();
        };
        let mut pids = vec![main];
        pids.extend(children_of(main));
        pids
    }

    fn main(&self) -> Option<i32> {
        self.pid()
            .map(|pid| i32::try_from(pid).expect("pid fits i32"))
    }

    /// SIGSTOP to every process (module header); returns once all are
    /// stopped. No-op if frozen or not running.
    pub(crate) fn freeze(&self) {
        if self.is_frozen() {
            return;
        }
        let Some(main) = self.main() else { return };
        // The child first, so it forks nothing new meanwhile.
        signal(main, libc::SIGSTOP);
        for _ in 0..3 {
            for pid in children_of(main) {
                signal(pid, libc::SIGSTOP);
            }
        }
        // kill() returns before the target has stopped (a busy process on
        // the other core stops at its next trip through the kernel).
        let until = Instant::now() + self.kind.stop_within;
        loop {
            let running: Vec<i32> = std::iter::once(main)
                .chain(children_of(main))
                .filter(|&pid| !all_threads_stopped(pid))
                .collect();
            if running.is_empty() {
                break;
            }
            assert!(
                Instant::now() < until,
                "processes {running:?} of {} never stopped",
                self.kind.name
            );
            for pid in running {
                signal(pid, libc::SIGSTOP);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// SIGCONT, the children first. No-op unless frozen.
    pub(crate) fn thaw(&self) {
        if !self.frozen.swap(false, Ordering::SeqCst) {
            return;
        }
        if let Some(main) = self.main() {
            for pid in children_of(main) {
                signal(pid, libc::SIGCONT);
            }
            signal(main, libc::SIGCONT);
        }
    }

    pub(crate) fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// Thaws, sends `sig` to the child and waits for it to exit; SIGKILL
    /// to every process past the kind's deadline. Then waits until its
    /// children are gone.
    pub(crate) fn shutdown(&mut self, sig: libc::c_int) {
        self.thaw();
        let Some(mut child) = self.child.take() else {
            return;
        };
        let main = i32::try_from(child.id()).expect("pid fits i32");
        let children = children_of(main);
        signal(main, sig);
        let deadline = Instant::now() + self.kind.stop_within;
        while !matches!(child.try_wait(), Ok(Some(_))) {
            if Instant::now() >= deadline {
                for pid in children_of(main) {
                    signal(pid, libc::SIGKILL);
                }
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        wait_gone(&children, self.kind.stop_within);
    }

    /// SIGKILL to every process at once (a stopped one dies of it too),
    /// as a crash would; reaps the child and waits until its children are
    /// gone.
    pub(crate) fn kill(&mut self) {
        let pids = self.pids();
        for pid in &pids {
            signal(*pid, libc::SIGKILL);
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        wait_gone(pids.get(1..).unwrap_or(&[]), self.kind.stop_within);
        self.frozen.store(false, Ordering::SeqCst);
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn signal(pid: i32, sig: libc::c_int) {
    // SAFETY: kill takes no pointers. `pid` is our child (not yet reaped:
    // it is reaped only where `child` is taken) or one of its children
    // read from /proc just now; one that has exited meanwhile makes kill
    // fail with ESRCH, which is ignored.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The state letter of a `/proc/.../stat` line ("pid (comm) state ppid
/// ...": comm may hold spaces or ')'), and the parent pid.
fn stat_fields(stat: &str) -> (Option<&str>, Option<i32>) {
    let rest = stat.rfind(')').map(|i| &stat[i + 1..]).unwrap_or("");
    let mut fields = rest.split_whitespace();
    let state = fields.next();
    (state, fields.next().and_then(|s| s.parse().ok()))
}

/// Process ids whose parent is `parent`, zombies left out (an exited
/// backend its postmaster has not reaped yet).
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let (state, ppid) = stat_fields(&stat);
            (ppid == Some(parent) && state != Some("Z")).then_some(pid)
        })
        .collect()
}

/// Whether every thread of `pid` is stopped (or gone: a process that
/// exited can't answer either).
fn all_threads_stopped(pid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    dir.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).map_or(true, |stat| {
            matches!(stat_fields(&stat).0, Some("T" | "t" | "Z" | "X"))
        })
    })
}

/// Waits (up to `within`) until none of `pids` exists any more.
fn wait_gone(pids: &[i32], within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let alive = pids.iter().any(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .is_ok_and(|s| stat_fields(&s).0 != Some("Z"))
        });
        if !alive {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SH: Kind = Kind {
        name: "sh",
        install: "it comes with the system",
        start_within: Duration::from_secs(10),
        stop_within: Duration::from_secs(10),
        poll: Duration::from_millis(5),
        death_signal: libc::SIGKILL,
    };

    /// A shell with two children of its own, like a postmaster.
    fn shell_with_children() -> ServerProcess {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 600 & sleep 600 & wait"])
            .stdin(Stdio::null());
        let mut process = ServerProcess::new(&SH);
        process
            .spawn(cmd, None, |pid| {
                children_of(i32::try_from(pid).unwrap()).len() == 2
            })
            .expect("sh starts");
        process
    }

    fn state(pid: i32) -> Option<String> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat_fields(&stat).0.map(str::to_owned)
    }

    #[test]
    fn a_freeze_stops_the_child_and_its_children_a_thaw_resumes_them() {
        let process = shell_with_children();
        let pids = process.pids();
        assert_eq!(pids.len(), 3, "{pids:?}");
        process.freeze();
        assert!(process.is_frozen());
        for &pid in &pids {
            // freeze returns only once each one shows stopped.
            assert_eq!(state(pid).as_deref(), Some("T"), "pid {pid}");
        }
        process.thaw();
        assert!(!process.is_frozen());
        let deadline = Instant::now() + SH.stop_within;
        while pids.iter().any(|&p| state(p).as_deref() == Some("T")) {
            assert!(Instant::now() < deadline, "not resumed: {pids:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn kill_ends_a_frozen_child_and_its_children() {
        let mut process = shell_with_children();
        let pids = process.pids();
        process.freeze();
        process.kill();
        assert_eq!(process.pid(), None);
        assert!(!process.is_frozen());
        for &pid in &pids[1..] {
            // Gone, or a zombie of whoever inherited it.
            assert!(
                matches!(state(pid).as_deref(), None | Some("Z")),
                "pid {pid} lives on: {:?}",
                state(pid)
            );
        }
    }

    #[test]
    fn a_shutdown_sends_the_signal_and_a_spawn_can_follow() {
        let mut process = ServerProcess::new(&SH);
        let mut cmd = Command::new("sleep");
        cmd.arg("600");
        process.spawn(cmd, None, |_| true).expect("sleep starts");
        let first = process.pid().unwrap();
        process.freeze();
        // Thawed first, else a stopped process would sit on SIGTERM.
        process.shutdown(libc::SIGTERM);
        assert_eq!(process.pid(), None);
        assert_eq!(state(i32::try_from(first).unwrap()), None, "reaped");
        let mut cmd = Command::new("sleep");
        cmd.arg("600");
        process.spawn(cmd, None, |_| true).expect("spawns again");
        assert_ne!(process.pid(), Some(first));
    }

    #[test]
    fn a_spawn_fails_when_the_child_exits_or_is_never_ready() {
        let dir = fresh_folder(&std::env::temp_dir(), "mistri-sp-test", free_port()).unwrap();
        let log = dir.join("log");
        std::fs::write(&log, "the last words").unwrap();
        let mut process = ServerProcess::new(&SH);
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exit 3"]);
        let err = process.spawn(cmd, Some(&log), |_| false).unwrap_err();
        assert!(err.starts_with("sh exited early"), "{err}");
        assert!(err.ends_with("; log: the last words"), "{err}");
        assert_eq!(process.pid(), None);

        const IMPATIENT: Kind = Kind {
            start_within: Duration::from_millis(100),
            ..SH
        };
        let mut process = ServerProcess::new(&IMPATIENT);
        let mut cmd = Command::new("sleep");
        cmd.arg("600");
        let err = process.spawn(cmd, None, |_| false).unwrap_err();
        assert!(err.starts_with("sh was not ready within 100ms"), "{err}");
        assert_eq!(process.pid(), None, "killed and reaped");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
