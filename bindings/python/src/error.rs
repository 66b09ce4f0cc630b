//! Exceptions: one base class, `mistri_locks.Error`, with a subclass per kind
//! of trouble, and [`map_error`], the one place core errors become Python
//! exceptions.
//!
//! Bad arguments are the caller's bug, not an operational failure, so they
//! raise the builtin `ValueError` (empty key, bad duration, bad namespace) or
//! `TypeError` (wrong type), not a `mistri_locks.Error`.
//!
//! The classes are built with `type(name, bases, dict)` rather than
//! `create_exception!` because `ConnectionError` has two bases
//! (`mistri_locks.Error` and the builtin `ConnectionError`), so that
//! `except ConnectionError:` in existing code keeps working.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// The exception classes, created once per process.
pub(crate) struct Exceptions {
    pub error: Py<PyType>,
    pub config: Py<PyType>,
    pub connection: Py<PyType>,
    pub backend: Py<PyType>,
    pub system: Py<PyType>,
    /// `Interrupted`, raised by `Hold.checkpoint()` (and re-exported by the
    /// package as `mistri_locks.Interrupted`).
    pub interrupted: Py<PyType>,
}

static EXCEPTIONS: PyOnceLock<Exceptions> = PyOnceLock::new();

fn new_class<'py>(
    py: Python<'py>,
    name: &str,
    doc: &str,
    bases: &[&Bound<'py, PyAny>],
) -> PyResult<Py<PyType>> {
    let dict = PyDict::new(py);
    dict.set_item("__doc__", doc)?;
    dict.set_item("__module__", "mistri_locks")?;
    let bases = PyTuple::new(py, bases)?;
    let class = py
        .get_type::<PyType>()
        .call1((name, bases, dict))?
        .cast_into::<PyType>()?;
    Ok(class.unbind())
}

fn build(py: Python<'_>) -> PyResult<Exceptions> {
    let builtins = py.import("builtins")?;
    let exception = builtins.getattr("Exception")?;
    let error = new_class(
        py,
        "Error",
        "Base class of every error mistri_locks raises for operational trouble.",
        &[&exception],
    )?;
    let error_any = error.bind(py).clone().into_any();
    let config = new_class(
        py,
        "ConfigError",
        "The adapter could not be set up as asked (e.g. an unparsable Redis URL).",
        &[&error_any],
    )?;
    let connection = new_class(
        py,
        "ConnectionError",
        "The backend could not be reached or stopped answering. Also a builtin ConnectionError.",
        &[&error_any, &builtins.getattr("ConnectionError")?],
    )?;
    let backend = new_class(
        py,
        "BackendError",
        "The backend answered, but with an error.",
        &[&error_any],
    )?;
    let system = new_class(
        py,
        "SystemResourceError",
        "The operating system refused something mistri_locks needs (a thread, random bytes). Also an OSError.",
        &[&error_any, &builtins.getattr("OSError")?],
    )?;
    let interrupted = interrupted_class(py, &error_any)?;
    Ok(Exceptions {
        error,
        config,
        connection,
        backend,
        system,
        interrupted,
    })
}

/// `Interrupted(reason, key="", detail=None, flag=None, cause=None)`, a
/// subclass of `Error`: the core's `Interruption` in Python. Its `args` are
/// the constructor's, so pickling (Celery's result backends) rebuilds it.
/// Written here, in the native module, so that `Hold.checkpoint` raises it
/// without importing the pure-Python package.
fn interrupted_class(py: Python<'_>, error: &Bound<'_, PyAny>) -> PyResult<Py<PyType>> {
    let globals = PyDict::new(py);
    globals.set_item("Error", error)?;
    py.run(
        cr#"
class Interrupted(Error):
    """Raised by ``Hold.checkpoint()``: the work should stop here.

    ``reason`` is ``"stopped"`` (the stop flag went up, or the hold's signal
    was aborted) or ``"lost"`` (the lease was lost: another holder may have
    it now, so no further write may rely on it). ``key`` is the lease's key,
    ``detail`` the signal's reason text; ``flag`` is the stop flag seen
    raised (None: the caller's own abort, or lost) and ``cause`` why the
    lease was lost (``"not_held"``, ``"too_late"``, ``"deadline"``,
    ``"max_hold"``, ``"stalled"``; None: stopped, or a forked child's copy)."""

    def __init__(self, reason, key="", detail=None, flag=None, cause=None):
        super().__init__(reason, key, detail, flag, cause)
        self.reason = reason
        self.key = key
        self.detail = detail
        self.flag = flag
        self.cause = cause

    def __str__(self):
        text = f"lease {self.key!r} {'was lost' if self.reason == 'lost' else 'was asked to stop'}"
        return f"{text} ({self.detail})" if self.detail else text

Interrupted.__module__ = "mistri_locks"
"#,
        Some(&globals),
        None,
    )?;
    Ok(globals
        .get_item("Interrupted")?
        .ok_or_else(|| PyValueError::new_err("Interrupted was not defined"))?
        .cast_into::<PyType>()?
        .unbind())
}

/// The exception classes (created on first use).
pub(crate) fn exceptions(py: Python<'_>) -> PyResult<&'static Exceptions> {
    EXCEPTIONS.get_or_try_init(py, || build(py))
}

/// Turns a core error into the Python exception that stands for it.
pub(crate) fn map_error(py: Python<'_>, err: mistri_locks::Error) -> PyErr {
    use mistri_locks::Error as E;
    let classes = match exceptions(py) {
        Ok(classes) => classes,
        Err(e) => return e,
    };
    let (class, message) = match err {
        E::InvalidArgument(m) => return PyValueError::new_err(m),
        E::WrongType(m) => return PyTypeError::new_err(m),
        E::Config(m) => (&classes.config, m),
        E::Connection(m) => (&classes.connection, m),
        E::Backend(m) => (&classes.backend, m),
        E::System(m) => (&classes.system, m),
        // `Error` is non_exhaustive: a kind added later still gets the base
        // class, with its kind in the message.
        other => (&classes.error, other.to_string()),
    };
    PyErr::from_type(class.bind(py).clone(), message)
}

/// Lets `?` work on core results inside `#[pymethods]`.
pub(crate) trait IntoPyResult<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for mistri_locks::Result<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| map_error(py, e))
    }
}
