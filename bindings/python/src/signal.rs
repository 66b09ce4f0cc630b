//! `mistri_locks.AbortSignal`, and how Python callbacks reach a Python
//! thread.
//!
//! The core signal runs its callbacks on whichever thread aborts it. That
//! may be the heartbeat engine's Rust thread, which must never call into
//! Python. So each Python-facing signal keeps its Python callbacks in a
//! [`Callbacks`] list of its own and registers one *Rust* callback on the
//! core signal, [`route`], which only records the reason and decides who
//! delivers:
//!
//! - When Python code calls `AbortSignal.abort()`, the callbacks run right
//!   there, on the calling thread, before `abort()` returns (also those of
//!   derived signals tripped by it). `abort()` sets up a thread-local
//!   collector; `route` sees it and hands the list back instead of queueing.
//! - Otherwise (heartbeat thread: stop flag or lost lease) `route` queues the
//!   list for the package's dispatcher thread (`mistri_locks._dispatch`), a
//!   Python daemon thread that waits GIL-free in [`deliver_pending`] and runs
//!   the callbacks with the GIL held.
//!
//! A duck-typed `signal=` object given to `hold()` gets the same treatment:
//! an internal core signal with a one-entry list whose callback is the
//! object's bound `abort` method (see [`Forwarder`]).
//!
//! Callback exceptions are reported through `sys.unraisablehook` and never
//! stop the other callbacks (the core's rule for panics).
//!
//! Invariant: a list's `fired` and `list` change together under its mutex,
//! so a callback registered concurrently with the abort is either in the
//! list that gets delivered or sees `fired` and runs at once: never lost,
//! never run twice. Lock order: a list mutex is never held while taking the
//! queue mutex or calling Python.

use crate::args::{wait_timeout, Seconds, Timeout};
use parking_lot::{Condvar, Mutex};
use pyo3::exceptions::PyTypeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a blocked wait stays GIL-free before checking for Ctrl-C.
const WAIT_SLICE: Duration = Duration::from_millis(50);

#[derive(Default)]
struct CallbackState {
    /// `Some(reason)` once the core signal has been aborted.
    fired: Option<Option<String>>,
    next_handle: u64,
    list: Vec<(u64, Py<PyAny>)>,
}

/// The Python callbacks of one core signal.
#[derive(Default)]
pub(crate) struct Callbacks {
    state: Mutex<CallbackState>,
}

impl Callbacks {
    /// A list attached to `core`: `route` runs when `core` is aborted.
    pub(crate) fn attach(core: &mistri_locks::AbortSignal) -> Arc<Callbacks> {
        let callbacks = Arc::new(Callbacks::default());
        let weak = Arc::downgrade(&callbacks);
        core.on_abort(move |reason| {
            if let Some(callbacks) = weak.upgrade() {
                route(&callbacks, reason);
            }
        });
        callbacks
    }

    /// Adds `callback` and returns its handle; `Err((handle, reason))` (and
    /// nothing added) if the signal has already fired, so the caller runs it
    /// at once.
    fn add(&self, callback: Py<PyAny>) -> Result<u64, (u64, Option<String>)> {
        let mut state = self.state.lock();
        state.next_handle += 1;
        let handle = state.next_handle;
        match &state.fired {
            Some(reason) => Err((handle, reason.clone())),
            None => {
                state.list.push((handle, callback));
                Ok(handle)
            }
        }
    }

    fn remove(&self, handle: u64) -> Option<Py<PyAny>> {
        let mut state = self.state.lock();
        let at = state.list.iter().position(|(h, _)| *h == handle)?;
        Some(state.list.remove(at).1)
    }

    /// Runs (and forgets) the callbacks of a fired list on this Python
    /// thread.
    fn deliver(&self, py: Python<'_>) {
        let (reason, list) = {
            let mut state = self.state.lock();
            let Some(reason) = state.fired.clone() else {
                return;
            };
            (reason, std::mem::take(&mut state.list))
        };
        for (_, callback) in list {
            call_reporting(py, callback.bind(py), reason.as_deref());
        }
    }

    fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        // The GC runs with the GIL held; `route` may hold the lock for a
        // moment on a Rust thread. If so, report fewer references: that only
        // makes the collector keep the objects alive this round.
        if let Some(state) = self.state.try_lock() {
            for (_, callback) in &state.list {
                visit.call(callback)?;
            }
        }
        Ok(())
    }
}

fn call_reporting(py: Python<'_>, callback: &Bound<'_, PyAny>, reason: Option<&str>) {
    if let Err(err) = callback.call1((reason,)) {
        err.write_unraisable(py, Some(callback));
    }
}

thread_local! {
    /// Set while Python code runs `AbortSignal.abort()` on this thread: lists
    /// fired meanwhile are delivered by that call, not by the dispatcher.
    static COLLECTOR: RefCell<Option<Vec<Arc<Callbacks>>>> = const { RefCell::new(None) };
}

/// The core signal's callback (any thread, never Python).
fn route(callbacks: &Arc<Callbacks>, reason: Option<&str>) {
    let pending = {
        let mut state = callbacks.state.lock();
        state.fired = Some(reason.map(str::to_owned));
        !state.list.is_empty()
    };
    if !pending {
        return;
    }
    let collected = COLLECTOR.with(|c| match c.borrow_mut().as_mut() {
        Some(found) => {
            found.push(callbacks.clone());
            true
        }
        None => false,
    });
    if !collected {
        enqueue(callbacks.clone());
    }
}

// ---- the dispatcher queue --------------------------------------------------

/// Fired lists waiting for the dispatcher thread, of one process.
///
/// Each process gets a fresh queue (mutex and condvar included): a forked
/// child must not use a condvar that the parent's dispatcher thread was
/// parked on at the fork. parking_lot would count that thread, which does
/// not exist in the child, as a waiter and could hand it the mutex.
struct Queue {
    pid: u32,
    state: Mutex<QueueState>,
    ready: Condvar,
}

#[derive(Default)]
struct QueueState {
    items: Vec<Arc<Callbacks>>,
    stopped: bool,
}

/// Only ever locked for a moment, never waited on.
static CURRENT_QUEUE: Mutex<Option<Arc<Queue>>> = Mutex::new(None);
static DISPATCHER_PID: AtomicU32 = AtomicU32::new(0);

/// This process's queue.
fn queue() -> Arc<Queue> {
    let pid = std::process::id();
    let mut current = CURRENT_QUEUE.lock();
    match &*current {
        Some(queue) if queue.pid == pid => queue.clone(),
        _ => {
            let queue = Arc::new(Queue {
                pid,
                state: Mutex::new(QueueState::default()),
                ready: Condvar::new(),
            });
            // A parent's queue, inherited by fork: its lists are the
            // parent's to deliver, and its locks may have waiters that do
            // not exist here. Leave it untouched.
            std::mem::forget(current.replace(queue.clone()));
            queue
        }
    }
}

fn enqueue(callbacks: Arc<Callbacks>) {
    let queue = queue();
    queue.state.lock().items.push(callbacks);
    queue.ready.notify_all();
}

/// Makes sure this process runs the dispatcher thread (started by the
/// Python package; again in a forked child, which inherits no threads).
pub(crate) fn ensure_dispatcher(py: Python<'_>) -> PyResult<()> {
    let pid = std::process::id();
    if DISPATCHER_PID.load(Ordering::Acquire) == pid {
        return Ok(());
    }
    py.import("mistri_locks._dispatch")?
        .call_method0("ensure_running")?;
    DISPATCHER_PID.store(pid, Ordering::Release);
    Ok(())
}

/// The dispatcher thread's step: waits GIL-free up to `timeout` seconds for
/// fired lists, delivers them, returns `False` once stopped.
#[pyfunction]
pub(crate) fn _deliver_pending(py: Python<'_>, timeout: f64) -> bool {
    let slice = Duration::from_secs_f64(timeout.clamp(0.0, 1.0));
    let (batch, stopped) = py.detach(|| {
        let queue = queue();
        let mut state = queue.state.lock();
        if state.items.is_empty() && !state.stopped {
            queue.ready.wait_for(&mut state, slice);
        }
        (std::mem::take(&mut state.items), state.stopped)
    });
    for callbacks in batch {
        callbacks.deliver(py);
    }
    !stopped
}

/// Tells the dispatcher to finish (at interpreter exit).
#[pyfunction]
pub(crate) fn _stop_dispatch() {
    let queue = queue();
    queue.state.lock().stopped = true;
    queue.ready.notify_all();
}

// ---- AbortSignal ----------------------------------------------------------

/// A thread-safe one-way latch with a reason and callbacks.
#[pyclass(frozen, module = "mistri_locks", name = "AbortSignal")]
pub(crate) struct PyAbortSignal {
    pub(crate) core: mistri_locks::AbortSignal,
    callbacks: Arc<Callbacks>,
}

impl PyAbortSignal {
    pub(crate) fn wrap(core: mistri_locks::AbortSignal) -> Self {
        let callbacks = Callbacks::attach(&core);
        PyAbortSignal { core, callbacks }
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
        let outer = COLLECTOR.with(|c| c.replace(Some(Vec::new())));
        let tripped = self.core.abort(reason);
        let fired = COLLECTOR.with(|c| c.replace(outer)).unwrap_or_default();
        for callbacks in fired {
            callbacks.deliver(py);
        }
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
        match self.callbacks.add(callback.clone().unbind()) {
            Ok(handle) => {
                ensure_dispatcher(py)?;
                Ok(handle)
            }
            Err((handle, reason)) => {
                call_reporting(py, &callback, reason.as_deref());
                Ok(handle)
            }
        }
    }

    /// Removes a callback that has not run yet. Returns whether it was found.
    fn remove_callback(&self, handle: u64) -> bool {
        // The removed callback is released here, with the GIL held.
        self.callbacks.remove(handle).is_some()
    }

    /// Blocks until aborted or `timeout` seconds pass (None: no limit).
    /// Returns whether the signal is aborted. Releases the GIL while it
    /// waits; Ctrl-C (KeyboardInterrupt) interrupts it.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<Seconds<Timeout>>) -> PyResult<bool> {
        let timeout = wait_timeout(timeout)?;
        interruptible_wait(py, &self.core, timeout)
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
        self.callbacks.traverse(&visit)
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

// ---- duck-typed signals ---------------------------------------------------

/// Carries a core signal's abort to a Python object's `abort(reason)` method
/// on the dispatcher thread, for `hold(..., signal=obj)`.
pub(crate) struct Forwarder {
    pub(crate) core: mistri_locks::AbortSignal,
    callbacks: Arc<Callbacks>,
}

impl Forwarder {
    pub(crate) fn new(target: &Bound<'_, PyAny>) -> PyResult<Self> {
        let abort = target.getattr("abort").ok().filter(|a| a.is_callable());
        let Some(abort) = abort else {
            return Err(PyTypeError::new_err(format!(
                "signal must be a mistri_locks.AbortSignal or an object with an abort(reason) method, got {}",
                crate::args::type_name(target)
            )));
        };
        let core = mistri_locks::AbortSignal::new();
        let callbacks = Callbacks::attach(&core);
        // Fresh, unfired signal: the add cannot be refused.
        let _ = callbacks.add(abort.unbind());
        Ok(Forwarder { core, callbacks })
    }

    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.callbacks.traverse(visit)
    }
}
