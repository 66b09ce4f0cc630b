//! Argument conversion: seconds from Python numbers, validated by the core.

use crate::error::IntoPyResult;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};
use std::marker::PhantomData;
use std::time::Duration;

/// Names an argument that takes seconds, for messages.
pub(crate) trait Argument {
    const NAME: &'static str;
}

/// The `ttl` argument.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ttl;
impl Argument for Ttl {
    const NAME: &'static str = "ttl";
}

/// The `heartbeat` argument.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heartbeat;
impl Argument for Heartbeat {
    const NAME: &'static str = "heartbeat";
}

/// The `safety_margin` argument of holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SafetyMargin;
impl Argument for SafetyMargin {
    const NAME: &'static str = "safety_margin";
}

/// The `timeout` argument of waits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeout;
impl Argument for Timeout {
    const NAME: &'static str = "timeout";
}

/// The `wait` argument of acquires and holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait;
impl Argument for Wait {
    const NAME: &'static str = "wait";
}

/// The `max_hold` argument of holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MaxHold;
impl Argument for MaxHold {
    const NAME: &'static str = "max_hold";
}

/// The `progress_timeout` argument of holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProgressTimeout;
impl Argument for ProgressTimeout {
    const NAME: &'static str = "progress_timeout";
}

/// Seconds as Python passes them for argument `A`: an `int` or a `float`
/// (or anything with `__float__`, such as numpy scalars), but never a `bool`
/// (`ttl=True` is a bug, not one second). Range checks happen in
/// [`Seconds::duration`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seconds<A>(pub f64, PhantomData<A>);

impl<A: Argument> Seconds<A> {
    pub const fn new(secs: f64) -> Self {
        Seconds(secs, PhantomData)
    }

    /// The core's validation: NaN, infinite, zero, negative or huge values
    /// are a `ValueError` naming the argument.
    pub fn duration(self, py: Python<'_>) -> PyResult<Duration> {
        mistri_locks::duration_from_secs(A::NAME, self.0).py_err(py)
    }
}

impl Seconds<Ttl> {
    pub const LEASE_TTL: Self = Self::new(mistri_locks::LEASE_TTL.as_secs() as f64);
    pub const FLAG_TTL: Self = Self::new(mistri_locks::FLAG_TTL.as_secs() as f64);
}

impl Seconds<Heartbeat> {
    pub const HEARTBEAT: Self = Self::new(mistri_locks::HEARTBEAT.as_secs() as f64);
}

impl<'a, 'py, A: Argument> FromPyObject<'a, 'py> for Seconds<A> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(f) = obj.cast::<PyFloat>() {
            return Ok(Self::new(f.value()));
        }
        let numeric = !obj.is_instance_of::<PyBool>()
            && !obj.is_instance_of::<pyo3::types::PyString>()
            && (obj.is_instance_of::<PyInt>() || obj.hasattr("__float__")?);
        if !numeric {
            return Err(PyTypeError::new_err(format!(
                "{} must be a number of seconds (int or float), got {}",
                A::NAME,
                type_name(&obj)
            )));
        }
        match obj.extract::<f64>() {
            Ok(v) => Ok(Self::new(v)),
            // An int too large for a float: let the core's range check
            // produce the message.
            Err(_) if obj.is_instance_of::<PyInt>() => {
                let negative = obj.lt(0)?;
                Ok(Self::new(if negative {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }))
            }
            Err(e) => Err(e),
        }
    }
}

/// A wait timeout, by the core's one rule for every face
/// (`mistri_locks::wait_timeout_from_secs`): `None`, +inf or more than 1e9
/// seconds wait forever; `0` just looks; negative or NaN is a `ValueError`.
pub(crate) fn wait_timeout(
    py: Python<'_>,
    timeout: Option<Seconds<Timeout>>,
) -> PyResult<Option<Duration>> {
    match timeout {
        None => Ok(None),
        Some(Seconds(secs, _)) => {
            mistri_locks::wait_timeout_from_secs(Timeout::NAME, secs).py_err(py)
        }
    }
}

/// How long an acquire or hold waits for a lease held elsewhere, by the
/// same rule as a timeout: `None` does not wait (the core's `wait: None`),
/// `0` tries once, +inf or more than 1e9 seconds wait without limit
/// (`Duration::MAX`); negative or NaN is a `ValueError` naming `wait`.
pub(crate) fn wait(py: Python<'_>, wait: Option<Seconds<Wait>>) -> PyResult<Option<Duration>> {
    match wait {
        None => Ok(None),
        Some(Seconds(secs, _)) => Ok(Some(
            mistri_locks::wait_timeout_from_secs(Wait::NAME, secs)
                .py_err(py)?
                .unwrap_or(Duration::MAX),
        )),
    }
}

/// The `limit` of an N-holder lease: an `int` (never a `bool`, a float or a
/// string: a `TypeError`) from 1 to `mistri_locks::MAX_LIMIT` (else a
/// `ValueError` with the core's message, checked where the core checks
/// options).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limit(pub u32);

impl Limit {
    pub const ONE: Self = Limit(1);
}

impl<'a, 'py> FromPyObject<'a, 'py> for Limit {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
            return Err(PyTypeError::new_err(format!(
                "limit must be an int, got {}",
                type_name(&obj)
            )));
        }
        // In u32's range, the core checks it (with the message every face
        // gives); out of it, the same message here.
        match obj
            .extract::<i64>()
            .ok()
            .and_then(|n| u32::try_from(n).ok())
        {
            Some(n) => Ok(Limit(n)),
            None => Err(PyValueError::new_err(format!(
                "limit must be between 1 and {}, got {}",
                mistri_locks::MAX_LIMIT,
                obj.str()?
            ))),
        }
    }
}

/// `type(obj).__name__`, for messages.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".to_owned())
}
