//! `mistri_locks.Hold`: a lease renewed by the core's heartbeat engine while
//! the `with` block (or the caller's work) runs.

use crate::args::{Heartbeat, Limit, MaxHold, ProgressTimeout, SafetyMargin, Seconds, Ttl, Wait};
use crate::dispatcher::ensure_dispatcher;
use crate::error::IntoPyResult;
use crate::locks::PyLocks;
use crate::signal::{forwarder, PyAbortSignal};
use mistri_locks::{HoldOptions, Interruption, Locks, ReleaseOutcome};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};
use pyo3::PyTraverseError;

/// A held lease, renewed in the background until released or lost.
///
/// Use it as a context manager; leaving the block releases it. Dropping the
/// last reference releases it too (but say `release()` or use `with` to see
/// errors).
#[pyclass(frozen, module = "mistri_locks")]
pub(crate) struct Hold {
    /// Always `Some` until dropped (taken in `Drop` to release GIL-free).
    hold: Option<mistri_locks::Hold>,
    /// What `.signal` returns: the caller's object or a fresh AbortSignal.
    signal: Py<PyAny>,
    /// For a duck-typed signal: the internal signal that forwards to it.
    forwarder: Option<PyAbortSignal>,
}

/// `mistri_locks._native._hold`: the one list of `hold`'s arguments.
/// `mistri_locks.hold`, `Locks.hold` and the asyncio forms pass their
/// arguments through to it, adding `_locks` (the handle; `None`: the
/// core's configured slot, which also validates the arguments when nothing
/// is configured) and `_cancel` (the asyncio layer's signal that ends a
/// wait when the awaiting task is cancelled). Its Python name is `hold`, so
/// argument errors read as errors of `hold()`.
#[pyfunction]
#[pyo3(name = "hold", signature = (
    key,
    ttl = Seconds::<Ttl>::LEASE_TTL,
    heartbeat = Seconds::<Heartbeat>::HEARTBEAT,
    stop_key = None,
    signal = None,
    safety_margin = None,
    label = None,
    wait = None,
    limit = Limit::ONE,
    max_hold = None,
    progress_timeout = None,
    *,
    _locks = None,
    _cancel = None,
))]
#[allow(clippy::too_many_arguments)] // one per keyword argument of hold()
pub(crate) fn hold_args(
    py: Python<'_>,
    key: String,
    ttl: Seconds<Ttl>,
    heartbeat: Seconds<Heartbeat>,
    stop_key: Option<String>,
    signal: Option<Bound<'_, PyAny>>,
    safety_margin: Option<Seconds<SafetyMargin>>,
    label: Option<String>,
    wait: Option<Seconds<Wait>>,
    limit: Limit,
    max_hold: Option<Seconds<MaxHold>>,
    progress_timeout: Option<Seconds<ProgressTimeout>>,
    _locks: Option<PyRef<'_, PyLocks>>,
    _cancel: Option<PyRef<'_, PyAbortSignal>>,
) -> PyResult<Option<Hold>> {
    let opts = HoldOptions {
        ttl: ttl.duration(py)?,
        heartbeat: heartbeat.duration(py)?,
        stop_key,
        safety_margin: safety_margin.map(|m| m.duration(py)).transpose()?,
        label,
        wait: crate::args::wait(py, wait)?,
        limit: limit.0,
        max_hold: max_hold.map(|m| m.duration(py)).transpose()?,
        progress_timeout: progress_timeout.map(|p| p.duration(py)).transpose()?,
        ..HoldOptions::default()
    };
    let source = _locks.map(|l| l.locks());
    start(py, source, key, opts, signal, _cancel.as_deref())
}

/// Starts a hold with `opts` (all but the signal) on `source` (`None`: the
/// configured slot), waiting as `opts.wait` says.
fn start(
    py: Python<'_>,
    source: Option<Locks>,
    key: String,
    mut opts: HoldOptions,
    signal: Option<Bound<'_, PyAny>>,
    cancel: Option<&PyAbortSignal>,
) -> PyResult<Option<Hold>> {
    let (core_signal, signal, forwarder) = match signal {
        None => {
            let fresh = PyAbortSignal::wrap(mistri_locks::AbortSignal::new());
            let core = fresh.core.clone();
            (core, Py::new(py, fresh)?.into_any(), None)
        }
        Some(obj) => match obj.cast::<PyAbortSignal>() {
            Ok(ours) => (ours.get().core.clone(), obj.unbind(), None),
            Err(_) => {
                let forwarder = forwarder(&obj)?;
                (forwarder.core.clone(), obj.unbind(), Some(forwarder))
            }
        },
    };
    // Before the hold exists: the engine may trip the signal at once.
    ensure_dispatcher(py)?;
    opts.signal = Some(core_signal.clone());
    let Some(waiting) = mistri_locks::start_hold(source.as_ref(), &key, opts).py_err(py)? else {
        return Ok(None); // nothing configured
    };
    let hold = if waiting.waits() {
        let cancel = cancel.map(|c| &c.core);
        crate::waiting::drive(py, waiting, &[&core_signal], cancel, || None)?
    } else {
        py.detach(|| waiting.wait()).py_err(py)?
    };
    Ok(hold.map(|hold| Hold {
        hold: Some(hold),
        signal,
        forwarder,
    }))
}

impl Hold {
    fn core(&self) -> &mistri_locks::Hold {
        // Only `Drop` takes it out.
        self.hold.as_ref().expect("a Hold is never used after drop")
    }

    /// The core's release, GIL-free.
    fn release_core(&self, py: Python<'_>) -> PyResult<ReleaseOutcome> {
        let hold = self.core();
        py.detach(|| hold.release()).py_err(py)
    }
}

/// The value of the `mistri_locks.ReleaseOutcome` member for `outcome`
/// (`python/mistri_locks/_release.py`; the C face's names, lower case).
fn outcome_name(outcome: ReleaseOutcome) -> &'static str {
    match outcome {
        ReleaseOutcome::Released => "released",
        ReleaseOutcome::NotHeld => "not_held",
        ReleaseOutcome::Lost => "lost",
        ReleaseOutcome::AlreadyReleased => "already_released",
        ReleaseOutcome::OtherProcess => "other_process",
        ReleaseOutcome::Expired => "expired",
    }
}

#[pymethods]
impl Hold {
    /// Stops renewing and deletes the lease if it is still ours. Returns
    /// True if this call deleted it; False if it was already released,
    /// lost, gone, or this is a forked child's copy of a parent's hold
    /// (which never touches the parent's lease); `release_outcome()` says
    /// which. Does not wait for the heartbeat: from this call on no tick
    /// renews the lease, and a renewal in flight cannot outlive the delete.
    /// The delete is bounded by the adapter's I/O timeout and by the
    /// lease's end (the answer to its last confirmed renewal + ttl): when
    /// the lease's end comes first it has lapsed, and this returns False
    /// (`release_outcome()`: `EXPIRED`). If the delete cannot be confirmed
    /// before the lease's end this raises (ConnectionError), and calling
    /// again retries.
    fn release(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.release_core(py)? == ReleaseOutcome::Released)
    }

    /// `release()`, saying what happened: a `mistri_locks.ReleaseOutcome`,
    /// `RELEASED` (this call deleted the lease), `NOT_HELD` (it had gone,
    /// expired or taken, by the time of the delete), `LOST` (the hold had
    /// been lost before), `ALREADY_RELEASED` (an earlier release ran),
    /// `OTHER_PROCESS` (a forked child's copy: the parent's lease was left
    /// alone), or `EXPIRED` (no answer came before the lease's end: it has
    /// lapsed by expiry). Same errors as `release()`.
    fn release_outcome<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let outcome = self.release_core(py)?;
        static CLASS: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        let class = CLASS.import(py, "mistri_locks._release", "ReleaseOutcome")?;
        class.call1((outcome_name(outcome),))
    }

    /// `release` as a coroutine (runs off the loop; if the awaiting task is
    /// cancelled, the release still completes).
    fn release_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::aio::call(slf.py(), "release_hold", (slf,), None)
    }

    /// `release_outcome` as a coroutine (as `release_async`).
    fn release_outcome_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::aio::call(slf.py(), "release_hold_outcome", (slf,), None)
    }

    /// Reports progress for `progress_timeout=`: the work is alive. Cheap
    /// (a clock read and a store; keeps the GIL); a no-op without a
    /// progress timeout.
    fn touch(&self) {
        self.core().touch();
    }

    /// Raises `mistri_locks.Interrupted` if the work should stop here, from
    /// the core's typed `Hold::interruption` (no reason text read):
    /// `reason="lost"` (with its `cause`) when the lease was lost (renewal
    /// refused or the safe deadline passed), `reason="stopped"` (with the
    /// `flag` seen raised, None for the caller's own abort) when the signal
    /// was tripped otherwise. Else returns None. Cheap (atomic loads; keeps
    /// the GIL): call it between units of work.
    fn checkpoint(&self, py: Python<'_>) -> PyResult<()> {
        let hold = self.core();
        let (reason, flag, cause) = match hold.interruption() {
            Some(Interruption::Stopped { flag }) => ("stopped", flag, None),
            Some(Interruption::Lost { cause }) => ("lost", None, cause.map(|c| c.name())),
            Some(other) => (other.name(), None, None),
            // Lost is recorded just before the signal trips: lost already.
            None if hold.is_lost() => ("lost", None, None),
            None => return Ok(()),
        };
        let detail = hold.signal().reason();
        let class = crate::error::exceptions(py)?.interrupted.bind(py);
        let err = class.call1((reason, hold.key(), detail, flag, cause))?;
        Err(PyErr::from_value(err))
    }

    /// The key held.
    #[getter]
    fn key(&self) -> &str {
        self.core().key()
    }

    /// The fencing number of this acquisition: greater than every earlier
    /// one for this key.
    #[getter]
    fn fence(&self) -> u64 {
        self.core().fence()
    }

    /// Has the lease been lost (the signal is then tripped, saying so)?
    #[getter]
    fn lost(&self) -> bool {
        self.core().is_lost()
    }

    /// The signal tripped on stop flag or loss: the `signal=` given, or a
    /// fresh AbortSignal.
    #[getter]
    fn signal(&self, py: Python<'_>) -> Py<PyAny> {
        self.signal.clone_ref(py)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.release(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let hold = self.core();
        format!(
            "<mistri_locks.Hold key={:?} fence={} lost={}>",
            hold.key(),
            hold.fence(),
            if hold.is_lost() { "True" } else { "False" }
        )
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.signal)?;
        if let Some(forwarder) = &self.forwarder {
            forwarder.traverse(&visit)?;
        }
        Ok(())
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let Some(hold) = self.hold.take() else {
            return;
        };
        // Dropping releases: a round trip (the delete), so do it without
        // the GIL. If no token can be had (interpreter
        // shutting down), the closure is dropped unrun and the hold with it:
        // the release then simply happens here.
        let _ = Python::try_attach(move |py| py.detach(move || drop(hold)));
    }
}
