//! The Python face of mistri_locks: the native module `mistri_locks._native`,
//! re-exported by the `mistri_locks` package (see `python/mistri_locks/`).
//!
//! Conversion and Python idiom only; every rule lives in the core. Two
//! rules of this layer:
//! - The GIL is released around every backend round trip and every wait,
//!   and waits run in short slices with `check_signals()` so Ctrl-C works.
//! - No Rust thread ever calls into Python: callbacks and duck-typed
//!   signals are delivered on Python threads (see `signal.rs`).

mod aio;
mod args;
mod dispatcher;
mod error;
mod events;
mod hold;
mod info;
mod locks;
mod operator;
mod signal;
mod waiting;

use crate::error::IntoPyResult;
use crate::hold::Hold;
use crate::locks::PyLocks;
use parking_lot::Mutex;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// The configured Python object, kept only so that `locks()` returns that
/// very object (it may be a subclass). The core's slot
/// (`mistri_locks::configure`) is the one `hold()` uses; `configure` sets
/// both under this lock.
static CONFIGURED: Mutex<Option<Py<PyLocks>>> = Mutex::new(None);

/// Sets (or with None, clears) the process-wide handle used by `hold()`:
/// `configure(locks)`.
#[pyfunction]
fn configure(locks: Option<Bound<'_, PyLocks>>) {
    let mut slot = CONFIGURED.lock();
    let replaced = mistri_locks::configure(locks.as_ref().map(|l| l.get().locks()));
    let previous = std::mem::replace(&mut *slot, locks.map(Bound::unbind));
    drop(slot);
    drop((replaced, previous)); // with the GIL held, outside the mutex
}

/// The configured handle, or None.
#[pyfunction]
#[pyo3(name = "locks")]
fn configured(py: Python<'_>) -> Option<Py<PyLocks>> {
    CONFIGURED.lock().as_ref().map(|l| l.clone_ref(py))
}

/// Acquires `key` on the configured handle and keeps it renewed on a
/// heartbeat until released. None when nothing is configured or the
/// lease is held elsewhere (at the end of `wait`, if given). The arguments
/// are those of `_hold` (`hold.rs`).
#[pyfunction]
#[pyo3(name = "hold", signature = (key, *args, **kwargs))]
fn hold_configured<'py>(
    py: Python<'py>,
    key: Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    args::forward_hold(py, None, key, args, kwargs)
}

/// The stop flag of job `job_id` (a Celery task, Dramatiq message,
/// ActiveJob or Sidekiq job): the core's `job::stop_key`, the protocol's
/// one format (docs/PROTOCOL.md, "Jobs").
#[pyfunction]
fn job_stop_key(py: Python<'_>, job_id: &Bound<'_, PyAny>) -> PyResult<String> {
    let Ok(id) = job_id.extract::<String>() else {
        return Err(PyTypeError::new_err(format!(
            "job id must be a str, got {}",
            args::type_name(job_id)
        )));
    };
    mistri_locks::job::stop_key(&id).py_err(py)
}

/// `_job_options(**options)` -> the job's lease options checked, with
/// every default applied, by the core's `JobOptionsBuilder` (read by name:
/// an unknown name is a TypeError naming the nearest): a dict of `ttl`,
/// `heartbeat`, `limit`, `wait` (`math.inf`: no limit), `attempts`,
/// `backoff` (None: exponential) and the policies `on_conflict`,
/// `on_stopped`, `on_lost` as the core names them. A value of the wrong
/// kind is a TypeError, one out of range a ValueError, in the core's words.
#[pyfunction]
#[pyo3(signature = (**options))]
fn _job_options<'py>(
    py: Python<'py>,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    use mistri_locks::job::JobOptions;
    let mut builder = JobOptions::builder();
    if let Some(options) = options {
        for (name, value) in options.iter() {
            let name: String = name.extract()?;
            if !JobOptions::NAMES.contains(&name.as_str()) {
                let hint = mistri_locks::nearest_name(&name, &JobOptions::NAMES)
                    .map(|n| format!("; did you mean {n:?}?"))
                    .unwrap_or_default();
                return Err(PyTypeError::new_err(format!(
                    "unknown job option '{name}'{hint}"
                )));
            }
            if value.is_none()
                && matches!(name.as_str(), "ttl" | "heartbeat" | "limit" | "attempts")
            {
                return Err(PyTypeError::new_err(format!(
                    "{name} must be a number, not None"
                )));
            }
            let value = args::option_value(&name, &value)?;
            if let Err(e) = builder.set(&name, value) {
                return Err(error::map_error(py, e));
            }
        }
    }
    let o = builder.build().py_err(py)?;
    let out = PyDict::new(py);
    out.set_item("ttl", o.ttl.as_secs_f64())?;
    out.set_item("heartbeat", o.heartbeat.as_secs_f64())?;
    out.set_item("limit", o.limit)?;
    out.set_item("wait", o.wait.map_or(f64::INFINITY, |w| w.as_secs_f64()))?;
    out.set_item("attempts", o.attempts)?;
    out.set_item("backoff", o.backoff.map(|b| b.as_secs_f64()))?;
    out.set_item("on_conflict", o.on_conflict.name())?;
    out.set_item("on_stopped", o.on_stopped.name())?;
    out.set_item("on_lost", o.on_lost.name())?;
    Ok(out)
}

#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    mistri_locks::internals::set_language("python");
    args::init(py);
    args::set_hold(hold::forward);
    m.add_class::<PyLocks>()?;
    m.add_class::<locks::Memory>()?;
    m.add_class::<locks::Redis>()?;
    m.add_class::<locks::Local>()?;
    m.add_class::<locks::Postgres>()?;
    m.add_class::<Hold>()?;
    m.add_class::<signal::PyAbortSignal>()?;
    m.add_class::<operator::PyOperatorOptions>()?;
    m.add_function(wrap_pyfunction!(locks::open, m)?)?;
    m.add_function(wrap_pyfunction!(locks::postgres_url, m)?)?;
    m.add_function(wrap_pyfunction!(locks::mysql_url, m)?)?;
    m.add_function(wrap_pyfunction!(configure, m)?)?;
    m.add_function(wrap_pyfunction!(job_stop_key, m)?)?;
    m.add_function(wrap_pyfunction!(_job_options, m)?)?;
    m.add_function(wrap_pyfunction!(configured, m)?)?;
    m.add_function(wrap_pyfunction!(hold_configured, m)?)?;
    // Named `hold` for its messages, listed as `_hold`.
    m.add("_hold", wrap_pyfunction!(hold::hold_args, m)?)?;
    m.add_function(wrap_pyfunction!(signal::_deliver_pending, m)?)?;
    m.add_function(wrap_pyfunction!(signal::_stop_dispatch, m)?)?;
    m.add_function(wrap_pyfunction!(operator::_operator_handle, m)?)?;
    m.add_function(wrap_pyfunction!(operator::_operator_options, m)?)?;
    m.add_function(wrap_pyfunction!(operator::_stats_prometheus, m)?)?;
    m.add("_OPERATOR_MAX_BODY", operator::MAX_BODY)?;
    let exc = error::exceptions(py)?;
    m.add("Error", exc.error.bind(py))?;
    m.add("ConfigError", exc.config.bind(py))?;
    m.add("ConnectionError", exc.connection.bind(py))?;
    m.add("BackendError", exc.backend.bind(py))?;
    m.add("SystemResourceError", exc.system.bind(py))?;
    m.add("Interrupted", exc.interrupted.bind(py))?;
    m.add("LEASE_TTL", mistri_locks::LEASE_TTL.as_secs())?;
    m.add("HEARTBEAT", mistri_locks::HEARTBEAT.as_secs())?;
    m.add("FLAG_TTL", mistri_locks::FLAG_TTL.as_secs())?;
    Ok(())
}
