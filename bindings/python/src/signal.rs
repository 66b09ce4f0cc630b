//! `mistri_locks.AbortSignal`, and the Python glue of the core's host
//! delivery (`mistri_locks::delivery`, which owns the mechanism: where an
//! abort is recorded, the queue, the wake rule, fork).
//!
//! What is Python's here: each signal's callbacks are Python objects in a
//! [`Callbacks`] list with a listener id; [`LISTENERS`] maps ids back to
//! lists, and [`deliver`] calls them with the GIL held, on the thread that
//! aborted (the core hands those events back from `abort`) or on the
//! dispatcher thread (`mistri_locks._dispatch`, a Python daemon thread that
//! waits GIL-free in [`_deliver_pending`]) when the heartbeat tripped the
//! signal. A duck-typed `signal=` object is an internal AbortSignal whose
//! one callback is the object's bound `abort` method ([`forwarder`]).
//!
//! Callback exceptions are reported through `sys.unraisablehook` and never
//! stop the other callbacks. Every list and [`LISTENERS`] are touched only
//! with the GIL held, so no other thread can hold them across an `os.fork`.

use crate::args::{wait_timeout, Seconds, Timeout};
use crate::dispatcher::ensure_dispatcher;
use mistri_locks::delivery::{self, Delivery, Next, Payload};
use mistri_locks::CallbackHandle;
use parking_lot::Mutex;
use pyo3::exceptions::PyTypeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How long a blocked wait stays GIL-free before checking for Ctrl-C.
const WAIT_SLICE: Duration = Duration::from_millis(50);
/// The longest one dispatcher step waits (it is woken at once by work).
const DISPATCH_SLICE: Duration = Duration::from_secs(1);

/// Listener id -> the callback list it stands for (weakly: a signal nobody
/// references has nobody to tell).
static LISTENERS: Mutex<Option<HashMap<u64, Weak<Callbacks>>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The Python callbacks of one signal, by the core's callback handle, in
/// registration order.
pub(crate) struct Callbacks {
    id: u64,
    list: Mutex<Vec<(u64, Py<PyAny>)>>,
}

impl Callbacks {
    fn new() -> Arc<Self> {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let callbacks = Arc::new(Callbacks {
            id,
            list: Mutex::new(Vec::new()),
        });
        let mut listeners = LISTENERS.lock();
        let map = listeners.get_or_insert_with(HashMap::new);
        map.insert(id, Arc::downgrade(&callbacks));
        callbacks
    }

    /// Runs (and forgets) every callback registered so far.
    fn fire(&self, py: Python<'_>, reason: Option<&str>) {
        let list = std::mem::take(&mut *self.list.lock());
        for (_, callback) in list {
            call_reporting(py, callback.bind(py), reason);
        }
    }
}

impl Drop for Callbacks {
    fn drop(&mut self) {
        if let Some(map) = LISTENERS.lock().as_mut() {
            map.remove(&self.id);
        }
    }
}

fn call_reporting(py: Python<'_>, callback: &Bound<'_, PyAny>, reason: Option<&str>) {
    if let Err(err) = callback.call1((reason,)) {
        err.write_unraisable(py, Some(callback));
    }
}

/// Delivers core deliveries on this Python thread: aborts to their
/// signal's callbacks, hold events to their `on_event` hook.
fn deliver(py: Python<'_>, events: Vec<Delivery>) {
    for (id, payload) in events {
        match payload {
            Payload::Abort(reason) => {
                let target = LISTENERS
                    .lock()
                    .as_ref()
                    .and_then(|map| map.get(&id)?.upgrade());
                if let Some(callbacks) = target {
                    callbacks.fire(py, reason.as_deref());
                }
            }
            Payload::Hold(event) => crate::events::deliver(py, id, &event),
        }
    }
}

/// The dispatcher thread's step: waits GIL-free up to `timeout` seconds (at
/// most one; the core's wait-timeout rule) for events, delivers them,
/// returns `False` once stopped.
#[pyfunction]
#[pyo3(signature = (timeout = None))]
pub(crate) fn _deliver_pending(
    py: Python<'_>,
    timeout: Option<Seconds<Timeout>>,
) -> PyResult<bool> {
    let slice = wait_timeout(py, timeout)?.map_or(DISPATCH_SLICE, |t| t.min(DISPATCH_SLICE));
    let since = delivery::wake_token();
    match py.detach(|| delivery::wait(since, Some(slice))) {
        Next::Events(events) => deliver(py, events),
        Next::Stopped => return Ok(false),
        Next::TimedOut | Next::Woken => {}
    }
    Ok(true)
}

/// Tells the dispatcher to finish (at interpreter exit).
#[pyfunction]
pub(crate) fn _stop_dispatch() {
    delivery::stop();
}

/// A thread-safe one-way latch with a reason and callbacks.
#[pyclass(frozen, module = "mistri_locks", name = "AbortSignal")]
pub(crate) struct PyAbortSignal {
    pub(crate) core: mistri_locks::AbortSignal,
    callbacks: Arc<Callbacks>,
}

impl PyAbortSignal {
    pub(crate) fn wrap(core: mistri_locks::AbortSignal) -> Self {
        PyAbortSignal {
            core,
            callbacks: Callbacks::new(),
        }
    }

    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Never blocks: if the list is busy, reporting fewer references
        // only keeps the objects alive this round.
        if let Some(list) = self.callbacks.list.try_lock() {
            for (_, callback) in list.iter() {
                visit.call(callback)?;
            }
        }
        Ok(())
    }
}

#[pymethods]
impl PyAbortSignal {
    #[new]
    fn new() -> Self {
        Self::wrap(mistri_locks::AbortSignal::new())
    }

    /// Trips the signal. Returns True if this call tripped it (the first
    /// reason wins). Callbacks run on this thread before it returns.
    #[pyo3(signature = (reason = None))]
    fn abort(&self, py: Python<'_>, reason: Option<&str>) -> bool {
        let (tripped, events) = delivery::abort(&self.core, reason);
        deliver(py, events);
        tripped
    }

    /// Has the signal been tripped?
    #[getter]
    fn aborted(&self) -> bool {
        self.core.is_aborted()
    }

    /// The reason given to the first abort, if any.
    #[getter]
    fn reason(&self) -> Option<String> {
        self.core.reason()
    }

    /// Registers `callback(reason)` to run once on abort; runs it now if the
    /// signal is already aborted. Returns a handle for `remove_callback`.
    fn on_abort(&self, py: Python<'_>, callback: Bound<'_, PyAny>) -> PyResult<u64> {
        if !callback.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "callback must be callable, got {}",
                crate::args::type_name(&callback)
            )));
        }
        // Listen and list under one lock: an event delivered meanwhile (by
        // the dispatcher) finds the callback in the list.
        let (handle, events) = {
            let mut list = self.callbacks.list.lock();
            let (handle, events) = delivery::listen(&self.core, self.callbacks.id);
            list.push((handle.as_u64(), callback.unbind()));
            (handle, events)
        };
        ensure_dispatcher(py)?;
        deliver(py, events);
        Ok(handle.as_u64())
    }

    /// Removes a callback that has not run yet. Returns whether it was found.
    fn remove_callback(&self, handle: u64) -> bool {
        let removed = {
            let mut list = self.callbacks.list.lock();
            let at = list.iter().position(|(h, _)| *h == handle);
            at.map(|i| list.remove(i))
        };
        if removed.is_some() {
            self.core.remove_callback(CallbackHandle::from_u64(handle));
        }
        // The removed callback is released here, with the GIL held.
        removed.is_some()
    }

    /// Blocks until aborted or `timeout` seconds pass (None, +inf or more
    /// than 1e9: no limit; 0: just look). Returns whether the signal is
    /// aborted. Releases the GIL while it waits; Ctrl-C (KeyboardInterrupt)
    /// interrupts it.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<Seconds<Timeout>>) -> PyResult<bool> {
        let timeout = wait_timeout(py, timeout)?;
        interruptible_wait(py, &self.core, timeout)
    }

    /// `wait` as a coroutine: resolves when the signal trips (True) or when
    /// `timeout` seconds pass (whether it tripped), without a thread or
    /// blocking the loop. Same timeout rule as `wait` (checked here).
    #[pyo3(signature = (timeout = None))]
    fn wait_async<'py>(
        slf: &Bound<'py, Self>,
        timeout: Option<Seconds<Timeout>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let timeout = wait_timeout(py, timeout)?.map(|t| t.as_secs_f64());
        crate::aio::call(py, "signal_wait", (slf, timeout), None)
    }

    /// Registers `callback(reason)` to run on the running event loop (the
    /// caller's) when the signal trips; a coroutine function's coroutine
    /// runs as a task there. Returns a handle for `remove_callback`.
    fn on_abort_async<'py>(
        slf: &Bound<'py, Self>,
        callback: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::aio::call(slf.py(), "signal_on_abort_async", (slf, callback), None)
    }

    /// Cancels `task` (default: the current task) on its loop when the
    /// signal trips. Returns a handle for `remove_callback`.
    #[pyo3(signature = (task = None))]
    fn cancel_task<'py>(
        slf: &Bound<'py, Self>,
        task: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::aio::call(slf.py(), "signal_cancel_task", (slf, task), None)
    }

    /// A child signal: aborted (with this one's reason) when this one is;
    /// aborting the child leaves this one alone.
    fn derive(&self) -> Self {
        Self::wrap(self.core.derive())
    }

    fn __repr__(&self) -> String {
        match (self.core.is_aborted(), self.core.reason()) {
            (false, _) => "<mistri_locks.AbortSignal pending>".to_owned(),
            (true, None) => "<mistri_locks.AbortSignal aborted>".to_owned(),
            (true, Some(r)) => format!("<mistri_locks.AbortSignal aborted: {r:?}>"),
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.traverse(&visit)
    }
}

/// Waits on `signal` in GIL-free slices, checking for Ctrl-C in between.
pub(crate) fn interruptible_wait(
    py: Python<'_>,
    signal: &mistri_locks::AbortSignal,
    timeout: Option<Duration>,
) -> PyResult<bool> {
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    loop {
        let slice = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(WAIT_SLICE),
            None => WAIT_SLICE,
        };
        if py.detach(|| signal.wait(Some(slice))) {
            return Ok(true);
        }
        py.check_signals()?;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(signal.is_aborted());
        }
    }
}

/// For `hold(..., signal=obj)`: an internal signal whose one callback is
/// `obj.abort`, so the core's trip reaches `obj` on a Python thread.
pub(crate) fn forwarder(target: &Bound<'_, PyAny>) -> PyResult<PyAbortSignal> {
    let abort = target.getattr("abort").ok().filter(|a| a.is_callable());
    let Some(abort) = abort else {
        return Err(PyTypeError::new_err(format!(
            "signal must be a mistri_locks.AbortSignal or an object with an abort(reason) method, got {}",
            crate::args::type_name(target)
        )));
    };
    let signal = PyAbortSignal::new();
    signal.on_abort(target.py(), abort)?;
    Ok(signal)
}
