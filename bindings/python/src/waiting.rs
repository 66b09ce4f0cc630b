//! Waiting acquires and holds (`wait=`): the core's [`Waiting`] driven in
//! GIL-free slices, with `check_signals()` between them so Ctrl-C
//! (KeyboardInterrupt) ends the wait.
//!
//! A wait ends when the core says so (acquired; refused at the end of the
//! wait; the acquire's or hold's signal aborted), when a Python signal
//! handler raises, or when `cancel` (the asyncio layer's per-call signal,
//! aborted when the awaiting task is cancelled) trips. Leaving early drops
//! the `Waiting`, which leaves the line. Aborting any of the watched
//! signals wakes the GIL-free sleep at once (a core callback rings the
//! waiter's bell; no Python runs for it).

use crate::error::IntoPyResult;
use mistri_locks::{AbortSignal, Poll, Waiting};
use pyo3::prelude::*;
use std::time::Duration;

/// How long a wait stays GIL-free before checking for Ctrl-C.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// Wakes the waiter when a signal trips, for as long as it lives.
struct WakeOnAbort<'a> {
    signal: &'a AbortSignal,
    handle: mistri_locks::CallbackHandle,
}

impl Drop for WakeOnAbort<'_> {
    fn drop(&mut self) {
        self.signal.remove_callback(self.handle);
    }
}

/// Drives `waiting` to its end. `signals` are watched for a prompt wake
/// (the core also checks the one it was given); `cancel` tripping ends the
/// wait with `cancelled` (the caller's refusal value).
pub(crate) fn drive<T: Send>(
    py: Python<'_>,
    mut waiting: Waiting<T>,
    signals: &[&AbortSignal],
    cancel: Option<&AbortSignal>,
    cancelled: impl FnOnce() -> T,
) -> PyResult<T> {
    let _wakers: Vec<WakeOnAbort<'_>> = signals
        .iter()
        .copied()
        .chain(cancel)
        .map(|signal| {
            let waker = waiting.waker();
            let handle = signal.on_abort(move |_| waker.wake());
            WakeOnAbort { signal, handle }
        })
        .collect();
    loop {
        if cancel.is_some_and(AbortSignal::is_aborted) {
            return Ok(cancelled());
        }
        let since = waiting.wake_token();
        let step = py.detach(|| waiting.poll(since, Some(WAIT_SLICE)));
        if let Poll::Ready(done) = step.py_err(py)? {
            return Ok(done);
        }
        py.check_signals()?;
    }
}
