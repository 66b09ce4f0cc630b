//! Host delivery: how a signal's abort reaches a host-language object (a
//! Python callback, a Ruby block, a duck-typed `signal=` object) on a thread
//! of that host — the one mechanism every face uses.
//!
//! No Rust thread may call into Python or Ruby. So a face that wants to
//! hear a core signal's abort picks a *listener id* (a number it maps to
//! its host object) and calls [`listen`]; when the signal trips, the core
//! records a [`Delivery`] `(id, Payload::Abort(reason))`:
//! - on a host thread inside [`abort`] or [`listen`] (the host's own
//!   `abort`, or listening to a signal that is aborted already): into that
//!   call's return value, which the face delivers on the same thread before
//!   the call returns (so `abort()` runs callbacks before it returns);
//! - anywhere else (the notifier thread, for trips by the heartbeat
//!   engine): into this process's queue, which one thread that the host
//!   owns drains with [`wait`].
//!
//! The host thread: the face starts it when [`claim_host_thread`] returns
//! true (once per process until [`host_thread_ended`]), and it loops on
//! [`wait`] without the GIL/GVL, delivering what it gets. Python waits in
//! short slices; Ruby passes [`wake`] as the unblock function, having read
//! [`wake_token`] *before* releasing the GVL, so a wake that lands while
//! the thread enters the wait is never lost. [`stop`] ends the wait for
//! good (interpreter exit).
//!
//! Fork: the queue is a [`ForkLocal`]: a forked child starts with an empty
//! queue, no host thread and not stopped; the parent's pending events are
//! the parent's. Its lock and condvar are `std::sync` ones (a child may use
//! them even if the parent's host thread was parked on them).
//!
//! Invariant: each event is handed out once, to the listening call's own
//! thread or to one [`wait`]. Lock order: the queue lock is a leaf, never
//! held while callbacks or host code run.

use crate::runtime::fork::ForkLocal;
use crate::runtime::sync::{Condvar, Mutex};
use crate::signal::{AbortSignal, CallbackHandle, WakeToken};
use std::cell::RefCell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What one delivery carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// A signal's abort, with its reason.
    Abort(Option<String>),
    /// A hold's event, for an `on_event` hook ([`post_event`]).
    Hold(crate::signal::event::Event),
}

/// One delivery: the face's listener id and what it carries.
pub type Delivery = (u64, Payload);

/// How a [`wait`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Events to deliver, oldest first (never empty).
    Events(Vec<Delivery>),
    /// The timeout passed with nothing queued.
    TimedOut,
    /// [`wake`] was called since the token was read: check for interrupts
    /// and wait again.
    Woken,
    /// [`stop`] was called: the host thread should end.
    Stopped,
}

#[derive(Default)]
struct State {
    events: Vec<Delivery>,
    wakes: u64,
    host_thread: bool,
    stopped: bool,
}

#[derive(Default)]
struct Queue {
    state: Mutex<State>,
    changed: Condvar,
}

fn queue() -> &'static Queue {
    static QUEUE: OnceLock<ForkLocal<Queue>> = OnceLock::new();
    QUEUE
        .get_or_init(|| ForkLocal::new(Queue::default(), |_| Queue::default()))
        .get()
}

thread_local! {
    /// Set while a host call runs [`abort`] or [`listen`] on this thread.
    static CAPTURED: RefCell<Option<Vec<Delivery>>> = const { RefCell::new(None) };
}

fn record(id: u64, payload: Payload) {
    let event = (id, payload);
    let event = CAPTURED.with(|c| match c.borrow_mut().as_mut() {
        Some(mine) => {
            mine.push(event);
            None
        }
        None => Some(event),
    });
    if let Some(event) = event {
        let q = queue();
        q.state.lock().events.push(event);
        q.changed.notify_all();
    }
}

/// Runs `f`, keeping the events recorded on this thread meanwhile.
fn capture<R>(f: impl FnOnce() -> R) -> (R, Vec<Delivery>) {
    let outer = CAPTURED.with(|c| c.borrow_mut().replace(Vec::new()));
    let r = f();
    let mine = CAPTURED.with(|c| std::mem::replace(&mut *c.borrow_mut(), outer));
    (r, mine.unwrap_or_default())
}

/// Listens to `signal` for listener `id`: when it trips, `(id, reason)` is
/// delivered once (see the module doc for where). If it is aborted already
/// the event is returned here, for the caller to deliver on this thread.
/// The handle removes the listener again ([`AbortSignal::remove_callback`]).
pub fn listen(signal: &AbortSignal, id: u64) -> (CallbackHandle, Vec<Delivery>) {
    capture(|| signal.on_abort(move |reason| record(id, Payload::Abort(reason.map(str::to_owned)))))
}

/// Queues a hold's `event` for listener `id` on the host thread (or, on a
/// host thread inside [`abort`]/[`listen`], for that call): how a face's
/// `on_event` hook, which runs on the notifier thread, hands the event to
/// host code, typed all the way.
pub fn post_event(id: u64, event: crate::signal::event::Event) {
    record(id, Payload::Hold(event));
}

/// Aborts `signal` on behalf of host code: returns whether this call
/// tripped it, and the events of its listeners (and its children's), for
/// the caller to deliver on this thread before it returns.
pub fn abort(signal: &AbortSignal, reason: Option<&str>) -> (bool, Vec<Delivery>) {
    capture(|| signal.abort(reason))
}

/// True if the caller must start this process's host thread now: the first
/// call in a process (again in a forked child, which inherits no threads)
/// and the first after [`host_thread_ended`].
pub fn claim_host_thread() -> bool {
    let mut state = queue().state.lock();
    !std::mem::replace(&mut state.host_thread, true)
}

/// The host thread is gone (or could not be started): the next
/// [`claim_host_thread`] starts another.
pub fn host_thread_ended() {
    queue().state.lock().host_thread = false;
}

/// The queue's wake count, to read before releasing the interpreter lock
/// and pass to [`wait`] (see [`AbortSignal::wake_token`]).
pub fn wake_token() -> WakeToken {
    WakeToken(queue().state.lock().wakes)
}

/// The host thread's wait: blocks (up to `timeout`; `None`: no limit) until
/// events are queued, [`wake`] has been called since `since` was read, or
/// [`stop`] is called. Call it without the GIL/GVL.
pub fn wait(since: WakeToken, timeout: Option<Duration>) -> Next {
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    let q = queue();
    let mut state = q.state.lock();
    loop {
        if !state.events.is_empty() {
            return Next::Events(std::mem::take(&mut state.events));
        }
        if state.stopped {
            return Next::Stopped;
        }
        if state.wakes != since.0 {
            return Next::Woken;
        }
        match deadline {
            Some(d) => {
                let (guard, timed_out) = q.changed.wait_until(state, d);
                state = guard;
                if timed_out && state.events.is_empty() && !state.stopped {
                    return Next::TimedOut;
                }
            }
            None => state = q.changed.wait(state),
        }
    }
}

/// Wakes the host thread's [`wait`] without events (Ruby's unblock
/// function). Safe from any thread.
pub fn wake() {
    let q = queue();
    let mut state = q.state.lock();
    state.wakes = state.wakes.wrapping_add(1);
    q.changed.notify_all();
}

/// Ends the host thread's waits for good, in this process (at interpreter
/// exit). Events still queued are handed out first.
pub fn stop() {
    let q = queue();
    q.state.lock().stopped = true;
    q.changed.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the queue is process-wide.
    #[test]
    fn events_go_to_their_thread_or_the_queue_and_wakes_are_never_lost() {
        let signal = AbortSignal::new();
        let (handle, none) = listen(&signal, 1);
        assert!(none.is_empty());
        let other = AbortSignal::new();
        listen(&other, 2);
        let (tripped, mine) = abort(&signal, Some("mine"));
        assert!(tripped);
        assert_eq!(mine, vec![(1, Payload::Abort(Some("mine".to_owned())))]);
        assert!(!signal.remove_callback(handle), "ran once, gone");
        std::thread::spawn(move || other.abort(None))
            .join()
            .unwrap();
        let since = wake_token();
        assert_eq!(
            wait(since, None),
            Next::Events(vec![(2, Payload::Abort(None))])
        );
        // already aborted: the event comes back at once, not queued
        let (_, late) = listen(&signal, 3);
        assert_eq!(late, vec![(3, Payload::Abort(Some("mine".to_owned())))]);
        assert_eq!(wait(since, Some(Duration::from_millis(10))), Next::TimedOut);
        // a wake after the token was read, before the wait: not lost
        let since = wake_token();
        wake();
        assert_eq!(wait(since, None), Next::Woken);
        let since = wake_token();
        let waker = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(30));
            wake();
        });
        assert_eq!(wait(since, None), Next::Woken);
        waker.join().unwrap();

        assert!(claim_host_thread());
        assert!(!claim_host_thread());
        host_thread_ended();
        assert!(claim_host_thread());
        stop();
        assert_eq!(wait(wake_token(), None), Next::Stopped);
    }
}
