//! The face's own threads for blocking calls (backend I/O, waits in line):
//! never libuv's 4-thread pool, so a waiting lease cannot starve `fs` or
//! `dns`. A call takes an idle thread or starts a new one (a wait in line
//! may block for a long time, so threads are never shared while busy); a
//! thread idle for [`IDLE`] exits. Pool threads do not keep the process
//! alive: only the deferred promise of a pending call does.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// How long an idle thread waits for work before it exits.
const IDLE: Duration = Duration::from_secs(30);

struct Pool {
    tx: Mutex<Sender<Job>>,
    rx: Arc<Mutex<Receiver<Job>>>,
    /// Threads waiting for work and not yet claimed by a caller.
    idle: AtomicU32,
    all: AtomicU32,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = channel();
        Pool {
            tx: Mutex::new(tx),
            rx: Arc::new(Mutex::new(rx)),
            idle: AtomicU32::new(0),
            all: AtomicU32::new(0),
        }
    })
}

/// (threads, idle threads).
pub fn counts() -> (u32, u32) {
    let p = pool();
    (p.all.load(Ordering::SeqCst), p.idle.load(Ordering::SeqCst))
}

/// Runs `job` on a thread of its own for as long as it runs.
pub fn run(job: impl FnOnce() + Send + 'static) {
    let p = pool();
    // Claim an idle thread or start one; either way the job goes through the
    // channel, to a thread that counts itself busy until it takes a job.
    let claimed = p
        .idle
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if !claimed {
        p.all.fetch_add(1, Ordering::SeqCst);
        let rx = p.rx.clone();
        let started = std::thread::Builder::new()
            .name("mistri-node".into())
            .spawn(move || worker(rx));
        if let Err(e) = started {
            // The job waits in the channel for the next thread that idles.
            p.all.fetch_sub(1, Ordering::SeqCst);
            eprintln!("mistri-locks: could not start a thread ({e}); the call waits for one");
        }
    }
    let tx = p.tx.lock().unwrap_or_else(|e| e.into_inner());
    // The receiver lives in the static: sending cannot fail.
    let _ = tx.send(Box::new(job));
}

fn worker(rx: Arc<Mutex<Receiver<Job>>>) {
    let p = pool();
    // Started for a job: busy until it takes one.
    let mut claimed = true;
    loop {
        if !claimed {
            p.idle.fetch_add(1, Ordering::SeqCst);
        }
        let next = rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .recv_timeout(IDLE);
        match next {
            Ok(job) => {
                claimed = false;
                job();
            }
            Err(RecvTimeoutError::Timeout) => {
                // Threads waiting here must be at least the jobs queued
                // plus `idle`: leave only by taking one off `idle`; else a
                // job is on its way, so wait on without counting again.
                if p.idle
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
                {
                    break;
                }
                claimed = true;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    p.all.fetch_sub(1, Ordering::SeqCst);
}
