//! `run KEY -- CMD ARGS…`: hold a lease while a command runs.
//!
//! Order of events:
//! 1. refuse to start while the stop flag is up (exit 76): a stop asked for
//!    is honoured until the flag expires or is cleared;
//! 2. acquire the lease as a hold (renewed on the heartbeat, stop flag read
//!    every tick), or one of `--limit N` slots of an N-holder lease; held
//!    elsewhere: wait up to `--wait` (woken by the release or expiry, not
//!    by polling; SIGINT/SIGTERM end the wait, and so does the stop flag,
//!    read once a second meanwhile), then exit 75;
//! 3. start the command in its own process group (so SIGTERM/SIGKILL reach
//!    the whole tree it starts), with `MISTRI_LOCK_KEY`, `MISTRI_LOCK_FENCE`
//!    and `MISTRI_LOCK_STOP_KEY` in its environment; if stdin is a terminal
//!    of which we are the foreground, the command's group gets it (so it can
//!    read the terminal and Ctrl-C reaches it directly). The command is
//!    killed (SIGKILL) if this process dies first (`PR_SET_PDEATHSIG`), so
//!    it can't outlive the lease by much;
//! 4. wait for whichever comes first: the command exits; the hold trips
//!    (stop flag raised: exit 76, or lease lost: exit 77) — the command's
//!    group gets SIGTERM, then SIGKILL after `--grace`; SIGINT, SIGTERM or
//!    SIGHUP arrive — forwarded to the command's group (SIGINT and SIGTERM
//!    also start the grace, after which it gets SIGKILL);
//! 5. release the lease (unless lost), then exit with the command's status
//!    (128 + N if a signal N ended it) or 76 / 77.
//!
//! The hung-holder guard: `--max-hold S` stops renewing S after the
//! acquire; `--progress-timeout S` makes the command's output its proof of
//! progress — its stdout and stderr then go through pipes that this
//! process copies to its own, and every chunk touches the hold; S without
//! output stops the renewals. Either way the hold is lost: the command's
//! group gets SIGTERM (then SIGKILL after the grace) and the exit is 77.
//! (Only with `--progress-timeout` does the command lose a terminal on
//! stdout/stderr.)
//!
//! The main thread only waits on one channel; the command's exit, the
//! signals and the hold's trip each arrive there from their own thread (the
//! trip from the core's notifier thread, never the heartbeat's).

use crate::show::term;
use crate::{say, Failure, EXIT_LOST, EXIT_REFUSED, EXIT_STOPPED};
use mistri_locks::{Hold, HoldOptions, Locks, Poll};
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{ExitStatus, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

pub const AFTER_HELP: &str = "\
The command sees MISTRI_LOCK_KEY, MISTRI_LOCK_FENCE (pass it to storage that
rejects stale writers) and, with --stop-key, MISTRI_LOCK_STOP_KEY.

On a raised stop flag or a lost lease the command's process group gets SIGTERM,
then SIGKILL after --grace. SIGINT, SIGTERM and SIGHUP sent to mistri-locks are
forwarded to it (SIGINT/SIGTERM also start the grace). The lease is released on
the way out.

--limit N shares the lease among up to N runs at once (a semaphore; each has
its own fence). --max-hold S ends the lease S after it was taken; with
--progress-timeout S the command's stdout and stderr are copied through
mistri-locks, and S without any output from it counts as hung. Both end the
command as a lost lease does.

Exit status: the command's (128+N if killed by signal N); 75 the lease is held
elsewhere (after --wait); 76 stopped by the stop flag (also: the flag was
already up, the command was not started); 77 the lease was lost (also:
--max-hold reached, or no output for --progress-timeout); 126/127 the
command could not be executed / was not found; 1 a backend error.";

/// Arguments of `run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The lease to hold while the command runs.
    #[arg(value_parser = crate::key)]
    key: String,
    /// Lease ttl: how long the lease outlives this process if it dies.
    #[arg(long, value_parser = crate::duration, default_value = "30", value_name = "S")]
    ttl: Duration,
    /// Longest wait between renewals (renewals happen at least every ttl/3).
    #[arg(long, value_parser = crate::duration, default_value = "5", value_name = "S")]
    heartbeat: Duration,
    /// A flag that, once raised (`mistri-locks stop K`), stops the command.
    #[arg(long, value_parser = crate::key, value_name = "K")]
    stop_key: Option<String>,
    /// Time between SIGTERM and SIGKILL.
    #[arg(long, value_parser = crate::duration, default_value = "10", value_name = "S")]
    grace: Duration,
    /// Wait up to S (or `forever`) for a lease held elsewhere (woken by its release or expiry) instead of exiting 75.
    #[arg(long, value_parser = crate::wait, value_name = "S")]
    wait: Option<Duration>,
    /// Share the lease among up to N holders at once (a semaphore).
    #[arg(long, value_name = "N", default_value = "1", value_parser = clap::value_parser!(u32).range(1..=i64::from(mistri_locks::MAX_LIMIT)))]
    limit: u32,
    /// Stop renewing S after the acquire (hung-holder guard): the command is ended, exit 77.
    #[arg(long, value_parser = crate::duration, value_name = "S")]
    max_hold: Option<Duration>,
    /// The command must write to stdout or stderr at least every S (copied through), else it counts as hung: exit 77.
    #[arg(long, value_parser = crate::duration, value_name = "S")]
    progress_timeout: Option<Duration>,
    /// How this holder describes itself to `status` (default: host:pid mistri-locks run CMD).
    #[arg(long, value_name = "TEXT")]
    label: Option<String>,
    /// The command and its arguments (after --).
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

enum Event {
    Exited(std::io::Result<ExitStatus>),
    Signal(i32),
    Tripped,
}

/// How long a wait for the lease sleeps before looking at signals.
const WAIT_SLICE: Duration = Duration::from_millis(100);
/// How often the stop flag is read while waiting for the lease.
const FLAG_EVERY: Duration = Duration::from_secs(1);

/// `--progress-timeout`: copies the command's `from` (its stdout or stderr)
/// to our `to` as it comes, touching the hold for every chunk. The
/// receiver hears when the pipe closed.
fn copy_touching(
    mut from: impl Read + Send + 'static,
    mut to: impl Write + Send + 'static,
    hold: &Arc<Hold>,
) -> mpsc::Receiver<()> {
    let hold = hold.clone();
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    hold.touch();
                    let _ = to.write_all(&buf[..n]).and_then(|()| to.flush());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = done.send(());
    });
    finished
}

fn send_group(pgid: libc::pid_t, signal: i32) {
    // SAFETY: kill has no memory preconditions; a negative pid names the
    // command's process group, which is ours to signal.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

/// Gives the terminal on stdin to `pgid` if we are its foreground group;
/// returns our group to hand it back to.
fn give_terminal(pgid: libc::pid_t) -> Option<libc::pid_t> {
    // SAFETY: isatty/tcgetpgrp/getpgrp/signal/tcsetpgrp take plain integers
    // and no pointers; ignoring SIGTTOU lets a process change the terminal's
    // foreground group while not itself in it.
    unsafe {
        if libc::isatty(0) != 1 || libc::tcgetpgrp(0) != libc::getpgrp() {
            return None;
        }
        libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        if libc::tcsetpgrp(0, pgid) != 0 {
            return None;
        }
        // It may have stopped on SIGTTIN before it got the terminal.
        libc::kill(-pgid, libc::SIGCONT);
        Some(libc::getpgrp())
    }
}

fn take_terminal(ours: Option<libc::pid_t>) {
    if let Some(pgid) = ours {
        // SAFETY: as in give_terminal; SIGTTOU is still ignored.
        unsafe {
            libc::tcsetpgrp(0, pgid);
        }
    }
}

pub fn run(locks: &Locks, args: RunArgs) -> Result<i32, Failure> {
    let (tx, rx) = mpsc::channel::<Event>();
    let mut signals =
        signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM, libc::SIGHUP]).map_err(
            |e| Failure {
                status: crate::EXIT_ERROR,
                message: format!("cannot watch signals: {e}"),
            },
        )?;
    let handle = signals.handle();
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for sig in signals.forever() {
                if tx.send(Event::Signal(sig)).is_err() {
                    break;
                }
            }
        });
    }
    let result = run_with(locks, args, &tx, &rx);
    handle.close();
    result
}

fn run_with(
    locks: &Locks,
    args: RunArgs,
    tx: &mpsc::Sender<Event>,
    rx: &mpsc::Receiver<Event>,
) -> Result<i32, Failure> {
    let program = args.command[0].clone();
    let name = std::path::Path::new(&program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| program.clone());
    let opts =
        HoldOptions {
            ttl: args.ttl,
            heartbeat: args.heartbeat,
            stop_key: args.stop_key.clone(),
            label: Some(args.label.clone().unwrap_or_else(|| {
                format!("{} run {name}", mistri_locks::internals::default_label())
            })),
            wait: args.wait,
            limit: args.limit,
            max_hold: args.max_hold,
            progress_timeout: args.progress_timeout,
            ..HoldOptions::default()
        };
    opts.validate()?;

    // 1 + 2: the stop flag, then the lease (waiting if asked).
    let stopped = |stop: &str| {
        let stop = term(stop);
        say!(
            "mistri-locks: stop flag {stop} is up; not starting (lower it with `mistri-locks clear {stop}`)"
        );
        Ok(EXIT_STOPPED)
    };
    if let Some(stop) = &args.stop_key {
        if locks.flag(stop)? {
            return stopped(stop);
        }
    }
    let mut waiting = locks.start_hold(&args.key, opts)?;
    let mut flag_read = Instant::now();
    let hold = loop {
        let since = waiting.wake_token();
        if let Poll::Ready(got) = waiting.poll(since, Some(WAIT_SLICE))? {
            break got;
        }
        // Leave at once on SIGINT/SIGTERM (dropping the wait leaves the line).
        if let Ok(Event::Signal(sig)) = rx.try_recv() {
            if sig != libc::SIGHUP {
                return Ok(128 + sig);
            }
        }
        if let Some(stop) = &args.stop_key {
            if flag_read.elapsed() >= FLAG_EVERY {
                flag_read = Instant::now();
                if locks.flag(stop)? {
                    return stopped(stop);
                }
            }
        }
    };
    drop(waiting);
    let Some(hold) = hold else {
        let who = locks
            .info(&args.key)
            .ok()
            .flatten()
            .and_then(|i| i.holder)
            .map(|h| format!(" by {} (fence {})", term(&h.label), h.fence))
            .unwrap_or_default();
        say!(
            "mistri-locks: the lease on {} is held{who}",
            term(&args.key)
        );
        return Ok(EXIT_REFUSED);
    };
    if let Some(stop) = &args.stop_key {
        // Raised while we waited: honour it before starting anything.
        if args.wait.is_some() && locks.flag(stop)? {
            let _ = hold.release();
            return stopped(stop);
        }
    }
    let hold = Arc::new(hold);

    // 3: the command, in its own process group.
    let mut command = std::process::Command::new(&program);
    command
        .args(&args.command[1..])
        .env("MISTRI_LOCK_KEY", &args.key)
        .env("MISTRI_LOCK_FENCE", hold.fence().to_string())
        .process_group(0);
    if let Some(stop) = &args.stop_key {
        command.env("MISTRI_LOCK_STOP_KEY", stop);
    }
    if args.progress_timeout.is_some() {
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let die_with_us = move || {
        // SAFETY: in the forked child only async-signal-safe calls (prctl,
        // getppid, _exit) with integer arguments.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
        }
        Ok(())
    };
    // SAFETY: the closure allocates nothing and calls only
    // async-signal-safe functions, as pre_exec requires.
    unsafe {
        command.pre_exec(die_with_us);
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = hold.release();
            let status = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Err(Failure {
                status,
                message: format!("cannot run {program}: {e}"),
            });
        }
    };
    let pgid = child.id() as libc::pid_t;
    let terminal = give_terminal(pgid);
    let mut child = child;
    let copies = [
        child
            .stdout
            .take()
            .map(|out| copy_touching(out, std::io::stdout(), &hold)),
        child
            .stderr
            .take()
            .map(|err| copy_touching(err, std::io::stderr(), &hold)),
    ];
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send(Event::Exited(child.wait()));
        });
    }
    {
        let tx = tx.clone();
        hold.signal().on_abort(move |_| {
            let _ = tx.send(Event::Tripped);
        });
    }

    // 4: wait.
    let mut kill_at: Option<Instant> = None;
    let mut ended_by: Option<i32> = None;
    let status = loop {
        let event = match kill_at {
            Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(event) => event,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    say!(
                        "mistri-locks: {program} still running after the {} grace; sending SIGKILL",
                        crate::show::human(args.grace)
                    );
                    send_group(pgid, libc::SIGKILL);
                    kill_at = None;
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break None,
            },
            None => match rx.recv() {
                Ok(event) => event,
                Err(_) => break None,
            },
        };
        match event {
            Event::Exited(status) => break status.ok(),
            Event::Signal(sig) => {
                send_group(pgid, sig);
                if sig != libc::SIGHUP && kill_at.is_none() {
                    kill_at = Some(Instant::now() + args.grace);
                }
            }
            Event::Tripped => {
                if ended_by.is_some() {
                    continue;
                }
                let reason = hold.signal().reason().unwrap_or_default();
                ended_by = Some(if hold.is_lost() {
                    EXIT_LOST
                } else {
                    EXIT_STOPPED
                });
                say!(
                    "mistri-locks: {}; sending SIGTERM to {program}",
                    term(&reason)
                );
                send_group(pgid, libc::SIGTERM);
                if kill_at.is_none() {
                    kill_at = Some(Instant::now() + args.grace);
                }
            }
        }
    };
    take_terminal(terminal);
    // Whatever the command left in its group goes with it: nothing may run
    // on without the lease.
    send_group(pgid, libc::SIGKILL);
    // The last of its output (a process that left the group may keep a
    // pipe open: don't wait for it long).
    for copy in copies.into_iter().flatten() {
        let _ = copy.recv_timeout(Duration::from_secs(1));
    }

    // 5: release and report. A lost hold's release deletes nothing that
    // is not ours (a stalled or capped hold's lease still is: it goes now
    // rather than at its expiry).
    let lost = hold.is_lost();
    if let Err(e) = hold.release() {
        say!(
            "mistri-locks: release of {} failed: {}",
            term(&args.key),
            term(&e.to_string())
        );
    }
    let own = match status {
        Some(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
        None => crate::EXIT_ERROR,
    };
    Ok(match ended_by {
        Some(code) => {
            say!("mistri-locks: {program} ended with status {own}");
            if lost {
                EXIT_LOST
            } else {
                code
            }
        }
        None if lost => EXIT_LOST,
        None => own,
    })
}
