//! The notifier: one process-wide thread that runs the abort callbacks of
//! signals the heartbeat engine trips, so user code (a Rust closure, a C
//! callback, a face's collector) never runs on the heartbeat or I/O thread.
//! A slow callback, or one that releases holds, therefore cannot delay a
//! renewal or a deadline, nor deadlock the engine.
//!
//! The latch of each signal is set (and its waiters woken) by the engine
//! before the callbacks are queued here: `is_aborted`/`wait` see the trip at
//! once; callbacks follow in trip order.
//!
//! The thread starts on the first queued batch and exits after
//! [`IDLE_EXIT`](crate::runtime::IDLE_EXIT) with nothing to do. Fork: the queue is a
//! [`ForkLocal`], so a forked child starts with an empty queue of its own
//! (the parent's pending callbacks are the parent's) and starts its own
//! thread when it needs one.
//!
//! Lock order: the queue lock is a leaf, never held while callbacks run.

// Under loom the queue and its thread are not built (see `run_later`).
#![cfg_attr(loom, allow(dead_code, unused_imports))]

use crate::runtime::fork::ForkLocal;
use crate::runtime::sync::{Condvar, Mutex};
use crate::signal::PendingCallbacks;
use std::collections::VecDeque;
use std::sync::OnceLock;
use std::time::Instant;

#[derive(Default)]
struct Queue {
    batches: VecDeque<PendingCallbacks>,
    running: bool,
}

#[derive(Default)]
struct Notifier {
    queue: Mutex<Queue>,
    ready: Condvar,
}

#[cfg(not(loom))]
fn notifier() -> &'static Notifier {
    static NOTIFIER: OnceLock<ForkLocal<Notifier>> = OnceLock::new();
    NOTIFIER
        .get_or_init(|| ForkLocal::new(Notifier::default(), |_| Notifier::default()))
        .get()
}

/// Queues `pending` to run on the notifier thread. If no thread can be
/// started (the OS refuses), the callbacks run here rather than never.
#[cfg(not(loom))]
pub(crate) fn run_later(pending: PendingCallbacks) {
    let n = notifier();
    let mut queue = n.queue.lock();
    queue.batches.push_back(pending);
    if queue.running {
        n.ready.notify_one();
        return;
    }
    let started = crate::runtime::thread::spawn("mistri-notifier", move || serve(n));
    match started {
        Ok(_) => queue.running = true,
        Err(_) => {
            let batches: Vec<_> = queue.batches.drain(..).collect();
            drop(queue);
            batches.into_iter().for_each(PendingCallbacks::run);
        }
    }
}

/// Under loom the callbacks run on the tripping thread: a model has no
/// notifier thread (it would wait for work forever, and loom's timed waits
/// never time out). The latch and every waiter's wake-up come first either
/// way (`AbortSignal::trip`).
#[cfg(loom)]
pub(crate) fn run_later(pending: PendingCallbacks) {
    pending.run();
}

/// Queues `task` (a face's or the stats' event delivery) to run on the
/// notifier thread, in order with the signals' callbacks.
pub(crate) fn run_task(task: impl FnOnce() + Send + 'static) {
    run_later(PendingCallbacks::task(task));
}

#[cfg(not(loom))]
fn serve(n: &'static Notifier) {
    let mut queue = n.queue.lock();
    loop {
        if let Some(batch) = queue.batches.pop_front() {
            drop(queue);
            batch.run();
            queue = n.queue.lock();
            continue;
        }
        let (guard, timed_out) = n
            .ready
            .wait_until(queue, Instant::now() + crate::runtime::IDLE_EXIT);
        queue = guard;
        if timed_out && queue.batches.is_empty() {
            queue.running = false;
            return;
        }
    }
}
