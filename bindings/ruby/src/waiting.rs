//! Waiting acquires and holds (`wait:`): the core's [`Waiting`] driven
//! through [`nogvl::wait`], without the GVL, with [`WaitWaker::wake`] as the
//! unblock function, so `Thread#raise`, `Timeout.timeout`, `Thread#kill`
//! and Ctrl-C interrupt the wait. The interrupt is raised here, and the
//! `Waiting` is dropped on the way out: the caller leaves the line.
//!
//! The signals given (the acquire's or hold's) also wake the wait at once
//! when they trip (a core callback rings the waiter's bell; no Ruby runs
//! for it); the core then ends the wait with a refusal.
//!
//! [`WaitWaker::wake`]: mistri_locks::WaitWaker::wake

use crate::error;
use crate::nogvl;
use magnus::{Error, Ruby};
use mistri_locks::{AbortSignal, CallbackHandle, Poll, Waiting};
use std::cell::RefCell;

/// Removes a wake-on-abort callback when the wait ends.
struct WakeOnAbort<'a> {
    signal: &'a AbortSignal,
    handle: CallbackHandle,
}

impl Drop for WakeOnAbort<'_> {
    fn drop(&mut self) {
        self.signal.remove_callback(self.handle);
    }
}

/// Drives `waiting` to its end (acquired, or refused at the end of the
/// wait or on a tripped signal), or raises a pending interrupt.
pub fn drive<T>(ruby: &Ruby, waiting: Waiting<T>, signals: &[&AbortSignal]) -> Result<T, Error> {
    let waker = waiting.waker();
    let _wakers: Vec<WakeOnAbort<'_>> = signals
        .iter()
        .map(|&signal| {
            let waker = waker.clone();
            let handle = signal.on_abort(move |_| waker.wake());
            WakeOnAbort { signal, handle }
        })
        .collect();
    // Only this thread touches it: with the GVL for the token, without it
    // for the poll, never both at once.
    let waiting = RefCell::new(waiting);
    let done = nogvl::wait(
        ruby,
        || waiting.borrow().wake_token(),
        |since| match waiting.borrow_mut().poll(since, None) {
            Ok(Poll::Ready(done)) => Some(Ok(done)),
            Ok(Poll::Pending) => None,
            Err(e) => Some(Err(e)),
        },
        || waker.wake(),
    )?;
    done.map_err(|e| error::to_ruby(ruby, e))
}
