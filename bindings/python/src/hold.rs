//! `mistri_locks.Hold`: a lease renewed by the core's heartbeat engine while
//! the `with` block (or the caller's work) runs.

use crate::dispatcher::ensure_dispatcher;
use crate::error::IntoPyResult;
use crate::locks::PyLocks;
use crate::signal::{forwarder, PyAbortSignal};
use mistri_locks::{HoldOptions, Interruption, Locks, ReleaseOutcome};
use pyo3::exceptions::PyTypeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
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

/// The places of `hold`'s positional arguments after the key (Python
/// idiom: `hold("k", 5, 1, "stop:k")`); by keyword, any of the core's
/// `HoldOptions::NAMES` and `signal`.
const POSITIONAL: [&str; 10] = [
    "ttl",
    "heartbeat",
    "stop_key",
    "signal",
    "safety_margin",
    "label",
    "wait",
    "limit",
    "max_hold",
    "progress_timeout",
];

/// `mistri_locks._native._hold(key, *args, **kwargs)`: `hold`'s arguments
/// read by name into the core's `HoldOptions::set`, which holds their one
/// list, checks and defaults. `mistri_locks.hold`, `Locks.hold` (through
/// [`hold_by_name`], without a trip through Python) and the asyncio forms
/// pass their arguments to it, adding `_locks` (the handle; `None`: the
/// core's configured slot, which also validates the arguments when nothing
/// is configured) and `_cancel` (the asyncio layer's signal that ends a
/// wait when the awaiting task is cancelled). Its Python name is `hold`,
/// so argument errors read as errors of `hold()`.
#[pyfunction]
#[pyo3(name = "hold", signature = (key, *args, **kwargs))]
pub(crate) fn hold_args(
    py: Python<'_>,
    key: Bound<'_, PyAny>,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Option<Hold>> {
    hold_by_name(py, None, key, args, kwargs)
}

/// `hold(key, *args, **kwargs)` on `locks` as a Python object (for
/// `args::set_hold`).
pub(crate) fn forward<'py>(
    py: Python<'py>,
    locks: Option<&Bound<'py, PyAny>>,
    key: Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let hold = hold_by_name(py, locks, key, args, kwargs)?;
    Ok(hold.into_pyobject(py)?.into_any())
}

/// `hold(key, *args, **kwargs)` on `locks` (`None`: `_locks` in `kwargs`,
/// else the configured slot).
pub(crate) fn hold_by_name(
    py: Python<'_>,
    locks: Option<&Bound<'_, PyAny>>,
    key: Bound<'_, PyAny>,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Option<Hold>> {
    let Ok(key) = key.extract::<String>() else {
        return Err(PyTypeError::new_err(format!(
            "hold() argument 'key' must be str, not {}",
            crate::args::type_name(&key)
        )));
    };
    if args.len() > POSITIONAL.len() {
        return Err(PyTypeError::new_err(format!(
            "hold() takes at most {} positional arguments ({} given)",
            POSITIONAL.len() + 1,
            args.len() + 1
        )));
    }
    let mut opts = HoldOptions::default();
    let mut signal = None;
    let mut source: Option<Locks> = locks
        .map(|l| l.cast::<PyLocks>().map(|l| l.get().locks().clone()))
        .transpose()?;
    let mut cancel: Option<Bound<'_, PyAbortSignal>> = None;
    let mut given: Vec<(String, Bound<'_, PyAny>)> = POSITIONAL
        .iter()
        .zip(args.iter())
        .map(|(name, value)| ((*name).to_owned(), value))
        .collect();
    if let Some(kwargs) = kwargs {
        for (name, value) in kwargs.iter() {
            let name: String = name.extract()?;
            if given.iter().any(|(n, _)| *n == name) {
                return Err(PyTypeError::new_err(format!(
                    "hold() got multiple values for argument '{name}'"
                )));
            }
            given.push((name, value));
        }
    }
    for (name, value) in given {
        match name.as_str() {
            "signal" => signal = (!value.is_none()).then_some(value),
            "_locks" if locks.is_none() => {
                if !value.is_none() {
                    source = Some(value.cast::<PyLocks>()?.get().locks().clone());
                }
            }
            "_cancel" => {
                if !value.is_none() {
                    cancel = Some(value.cast_into::<PyAbortSignal>()?);
                }
            }
            _ if !HoldOptions::NAMES.contains(&name.as_str()) => {
                let hint = mistri_locks::nearest_name(&name, &HoldOptions::NAMES)
                    .map(|n| format!("; did you mean {n:?}?"))
                    .unwrap_or_default();
                return Err(PyTypeError::new_err(format!(
                    "hold() got an unexpected keyword argument '{name}'{hint}"
                )));
            }
            // No None for these: their default is a value (`ttl=None` is a bug).
            "ttl" | "heartbeat" | "limit" if value.is_none() => {
                return Err(PyTypeError::new_err(format!(
                    "hold() argument '{name}' must be a number, not None"
                )));
            }
            _ => {
                let value = crate::args::option_value(&name, &value)?;
                if let Err(e) = opts.set(&name, value) {
                    return Err(crate::error::map_error(py, e));
                }
            }
        }
    }
    let cancel = cancel.as_ref().map(|c| c.get());
    start(py, source, key, opts, signal, cancel)
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
