//! `MistriLocks::Delivery`: notes from core signal callbacks to Ruby.
//!
//! A core signal's callbacks run on the thread that aborts it, which may be
//! the heartbeat (a Rust thread that must never call Ruby). So a Ruby
//! object that wants to hear an abort (an `AbortSignal` with `on_abort`
//! blocks, a hold's duck-typed `signal:`) registers a delivery id on the
//! Ruby side, and the core callback here only records `(id, reason)`:
//!
//! - on a Ruby thread inside [`capture`] (an `abort!` or an `on_abort` made
//!   from Ruby), into that call's own list, which Ruby delivers at once on
//!   the same thread before the call returns;
//! - anywhere else (the heartbeat), into the process-wide queue, which the
//!   Ruby delivery thread empties with `_wait_events` (blocking without the
//!   GVL, interruptible).
//!
//! The queue remembers the fork generation: a forked child starts empty
//! (its parent's pending notes are the parent's business). It uses std's
//! futex-based Mutex/Condvar, which a forked child can use even if the
//! parent's delivery thread was parked on them (parking_lot's global wait
//! table would hand the lock to that thread, absent in the child).

use crate::nogvl::nogvl;
use magnus::{function, prelude::*, Error, RModule, Ruby};
use std::cell::RefCell;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// One note: which Ruby object to tell, and the abort's reason.
pub type Event = (u64, Option<String>);

struct Queue {
    generation: u32,
    events: Vec<Event>,
    wakes: u64,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    generation: 0,
    events: Vec::new(),
    wakes: 0,
});
static CHANGED: Condvar = Condvar::new();

thread_local! {
    static CAPTURED: RefCell<Option<Vec<Event>>> = const { RefCell::new(None) };
}

fn queue() -> MutexGuard<'static, Queue> {
    // Nothing panics while holding it; if something did, the queue is
    // still consistent (a Vec and two counters).
    let mut q = QUEUE.lock().unwrap_or_else(PoisonError::into_inner);
    let generation = crate::fork::generation();
    if q.generation != generation {
        q.generation = generation;
        q.events.clear();
    }
    q
}

/// Records a note for delivery id `id` (see the module doc for where).
pub fn record(id: u64, reason: Option<&str>) {
    let event = (id, reason.map(str::to_owned));
    let event = CAPTURED.with(|c| match c.borrow_mut().as_mut() {
        Some(list) => {
            list.push(event);
            None
        }
        None => Some(event),
    });
    if let Some(event) = event {
        queue().events.push(event);
        CHANGED.notify_all();
    }
}

/// A core `on_abort` callback that records a note for `id`.
pub fn notifier(id: u64) -> impl FnOnce(Option<&str>) + Send + 'static {
    move |reason| record(id, reason)
}

/// Runs `f`, collecting the notes recorded on this thread meanwhile instead
/// of queueing them.
pub fn capture<R>(f: impl FnOnce() -> R) -> (R, Vec<Event>) {
    let outer = CAPTURED.with(|c| c.borrow_mut().replace(Vec::new()));
    let r = f();
    let events = CAPTURED.with(|c| std::mem::replace(&mut *c.borrow_mut(), outer));
    (r, events.unwrap_or_default())
}

/// Blocks until the queue has notes (returning them all) or until
/// [`wake`] is called (returning `None`).
fn take_or_wait() -> Option<Vec<Event>> {
    let mut q = queue();
    let wakes = q.wakes;
    loop {
        if !q.events.is_empty() {
            return Some(std::mem::take(&mut q.events));
        }
        if q.wakes != wakes {
            return None;
        }
        q = CHANGED.wait(q).unwrap_or_else(PoisonError::into_inner);
    }
}

fn wake() {
    let mut q = queue();
    q.wakes = q.wakes.wrapping_add(1);
    CHANGED.notify_all();
}

/// `MistriLocks::Delivery._wait_events` -> `[[id, reason], ...]`: the
/// delivery thread's wait, without the GVL and interruptible.
fn wait_events(ruby: &Ruby) -> Result<Vec<Event>, Error> {
    loop {
        if let Some(events) = nogvl(ruby, take_or_wait, wake)? {
            return Ok(events);
        }
        ruby.thread_check_ints()?;
    }
}

pub fn init(_ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let delivery = module.define_module("Delivery")?;
    delivery.define_singleton_method("_wait_events", function!(wait_events, 0))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the queue is process-wide.
    #[test]
    fn notes_are_captured_on_their_thread_queued_elsewhere_and_waits_wake() {
        let ((), mine) = capture(|| {
            record(1, Some("mine"));
            std::thread::spawn(|| record(2, None)).join().unwrap();
        });
        assert_eq!(mine, vec![(1, Some("mine".to_owned()))]);
        assert_eq!(take_or_wait(), Some(vec![(2, None)]));

        let waker = std::thread::spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            wake();
        });
        assert_eq!(take_or_wait(), None, "woken, nothing queued");
        waker.join().unwrap();
    }
}
