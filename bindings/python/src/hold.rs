//! `mistri_locks.Hold`: a lease renewed by the core's heartbeat engine while
//! the `with` block (or the caller's work) runs.

use crate::args::{Heartbeat, SafetyMargin, Seconds, Ttl};
use crate::error::IntoPyResult;
use crate::signal::{ensure_dispatcher, forwarder, PyAbortSignal};
use mistri_locks::{HoldOptions, Locks, ReleaseOutcome};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
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

/// The arguments of `hold(...)`, shared by `Locks.hold` (`source` is that
/// handle) and `mistri_locks.hold` (`None`: the core's configured slot,
/// which also validates the arguments when nothing is configured).
#[allow(clippy::too_many_arguments)] // one per keyword argument of hold()
pub(crate) fn start(
    py: Python<'_>,
    source: Option<Locks>,
    key: String,
    ttl: Seconds<Ttl>,
    heartbeat: Seconds<Heartbeat>,
    stop_key: Option<String>,
    signal: Option<Bound<'_, PyAny>>,
    safety_margin: Option<Seconds<SafetyMargin>>,
    label: Option<String>,
) -> PyResult<Option<Hold>> {
    let ttl = ttl.duration(py)?;
    let heartbeat = heartbeat.duration(py)?;
    let safety_margin = safety_margin.map(|m| m.duration(py)).transpose()?;
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
    let opts = HoldOptions {
        ttl,
        heartbeat,
        stop_key,
        signal: Some(core_signal),
        safety_margin,
        label,
        ..HoldOptions::default()
    };
    let hold = py
        .detach(|| match source {
            Some(locks) => locks.hold(&key, opts),
            None => mistri_locks::hold(&key, opts),
        })
        .py_err(py)?;
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
}

#[pymethods]
impl Hold {
    /// Stops renewing and deletes the lease if it is still ours. Returns
    /// True if this call deleted it; False if it was already released,
    /// lost, gone, or this is a forked child's copy of a parent's hold
    /// (which never touches the parent's lease). Returns only after no
    /// heartbeat can touch the lease again.
    fn release(&self, py: Python<'_>) -> PyResult<bool> {
        let hold = self.core();
        let outcome = py.detach(|| hold.release()).py_err(py)?;
        Ok(outcome == ReleaseOutcome::Released)
    }

    /// `release` as a coroutine (runs off the loop; if the awaiting task is
    /// cancelled, the release still completes).
    fn release_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::aio::call(slf.py(), "release_hold", (slf,), None)
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
        // Dropping releases: a round trip, and a wait for an in-flight tick,
        // so do it without the GIL. If no token can be had (interpreter
        // shutting down), the closure is dropped unrun and the hold with it:
        // the release then simply happens here.
        let _ = Python::try_attach(move |py| py.detach(move || drop(hold)));
    }
}
