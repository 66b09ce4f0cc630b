//! The face's own threads for blocking calls (backend I/O, waits in line):
//! never libuv's 4-thread pool, so a waiting lease cannot starve `fs` or
//! `dns`. Two bounded groups:
//! - **calls** ([`Kind::Call`]: every call that does not wait in line:
//!   open, a one-try hold, release, flags, info, list, the operator's
//!   requests) share at most [`CALL_THREADS`] threads; more calls in
//!   flight queue here, first come first served. However many promises a
//!   program starts at once, the face asks the backend at most this many
//!   things at a time, so it never outgrows the core's idle connections
//!   nor crowds out the heartbeat engine's threads (each call beyond them
//!   used to start a thread and a connection of its own);
//! - **waits** ([`Kind::Wait`]: a hold that waits in line) get a thread
//!   each, as the core's wait sleeps its caller's thread until rung (no
//!   CPU, no I/O while it sleeps), up to [`WAIT_THREADS`]; a wait beyond
//!   them starts when one ends (its `wait` still counts from the call, and
//!   its signal still cancels it). Waits never hold a call thread, so
//!   the release that ends a wait is never queued behind it.
//!
//! Threads start on demand and leave after [`IDLE`] without work. They do
//! not keep the process alive: only the deferred promise of a pending call
//! does.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// How long an idle thread waits for work before it exits.
const IDLE: Duration = Duration::from_secs(30);

/// Threads for calls that do not wait in line (well under the 16 idle
/// connections the core keeps per address).
pub const CALL_THREADS: usize = 4;

/// Threads for waits in line.
pub const WAIT_THREADS: usize = 256;

/// Which group a job runs in.
#[derive(Clone, Copy)]
pub enum Kind {
    Call,
    Wait,
}

struct State {
    queue: VecDeque<Job>,
    threads: usize,
    /// Threads waiting for work (a job pushed while `idle > queue.len()`
    /// is taken by one of them).
    idle: usize,
}

struct Group {
    name: &'static str,
    max: usize,
    state: Mutex<State>,
    ready: Condvar,
}

static CALLS: Group = Group::new("mistri-node", CALL_THREADS);
static WAITS: Group = Group::new("mistri-node-wait", WAIT_THREADS);

impl Group {
    const fn new(name: &'static str, max: usize) -> Self {
        Group {
            name,
            max,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                threads: 0,
                idle: 0,
            }),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&'static self, job: Job) {
        let mut s = self.lock();
        s.queue.push_back(job);
        if s.idle >= s.queue.len() {
            drop(s);
            self.ready.notify_one();
            return;
        }
        if s.threads >= self.max {
            // Queued: the next thread that finishes a job takes it.
            return;
        }
        s.threads += 1;
        drop(s);
        let started = std::thread::Builder::new()
            .name(self.name.into())
            .spawn(move || self.work());
        if let Err(e) = started {
            // The job waits in the queue for the next thread that frees up.
            self.lock().threads -= 1;
            eprintln!("mistri-locks: could not start a thread ({e}); the call waits for one");
        }
    }

    fn work(&'static self) {
        let mut s = self.lock();
        loop {
            if let Some(job) = s.queue.pop_front() {
                drop(s);
                job();
                s = self.lock();
                continue;
            }
            s.idle += 1;
            let (next, timeout) = self
                .ready
                .wait_timeout(s, IDLE)
                .unwrap_or_else(|e| e.into_inner());
            s = next;
            s.idle -= 1;
            if timeout.timed_out() && s.queue.is_empty() {
                break;
            }
        }
        s.threads -= 1;
    }

    fn counts(&self) -> (u32, u32) {
        let s = self.lock();
        let n = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        (n(s.threads), n(s.idle))
    }
}

/// (call threads, idle ones, wait threads, idle ones).
pub fn counts() -> [u32; 4] {
    let (c, ci) = CALLS.counts();
    let (w, wi) = WAITS.counts();
    [c, ci, w, wi]
}

/// Runs `job` on the group of `kind` (module header).
pub fn run(kind: Kind, job: impl FnOnce() + Send + 'static) {
    let group = match kind {
        Kind::Call => &CALLS,
        Kind::Wait => &WAITS,
    };
    group.push(Box::new(job));
}
