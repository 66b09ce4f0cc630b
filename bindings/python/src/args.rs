//! Argument conversion: keys from Python strings, seconds from Python
//! numbers, validated by the core.
//!
//! The two conversions every operation makes are kept cheap (they are most
//! of what the face adds to a Redis acquire+release pair): a key is
//! borrowed from the `str` object's own UTF-8 buffer where the stable ABI
//! allows it, and an `int` or `float` becomes seconds without a temporary
//! object.

use crate::error::IntoPyResult;
use mistri_locks::OptionValue;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString, PyTuple};
use std::borrow::Cow;
use std::marker::PhantomData;
use std::os::raw::c_char;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

// Public C API since Python 3.3, and part of the stable ABI since 3.10.
// This module is built for the 3.9 stable ABI, whose headers (and so
// pyo3-ffi) leave it out; it is called only on 3.10+ (`UTF8_IN_PLACE`).
extern "C" {
    fn PyUnicode_AsUTF8AndSize(
        unicode: *mut ffi::PyObject,
        size: *mut ffi::Py_ssize_t,
    ) -> *const c_char;
}

/// Whether the running interpreter has `PyUnicode_AsUTF8AndSize` in its
/// stable ABI (3.10+); set once by [`init`].
static UTF8_IN_PLACE: AtomicBool = AtomicBool::new(false);

/// Notes what the running interpreter offers; called at module init.
pub(crate) fn init(py: Python<'_>) {
    UTF8_IN_PLACE.store(py.version_info() >= (3, 10), Ordering::Relaxed);
}

/// A key (or other name) argument: a `str`, as UTF-8. On Python 3.10+ it
/// borrows the string object's cached UTF-8 (no copy, no allocation), and
/// holds a reference to the string so the bytes stay valid for as long as
/// the key is in use, GIL-free stretches included (even if the caller's
/// container lets go of the string meanwhile); on 3.9 it is a copy. A
/// non-`str` is the usual `TypeError` naming the argument, and a string
/// with lone surrogates the usual `UnicodeEncodeError`.
pub(crate) struct Key<'a> {
    /// Read only through `Deref`, which ties it to the key's own lifetime
    /// (while `_owner` lives).
    text: Cow<'a, str>,
    /// The string that owns borrowed `text`.
    _owner: Option<Py<PyString>>,
}

impl std::ops::Deref for Key<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.text
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for Key<'a> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let s = obj.cast::<PyString>()?;
        if !UTF8_IN_PLACE.load(Ordering::Relaxed) {
            let text = Cow::Owned(s.to_cow()?.into_owned());
            return Ok(Key { text, _owner: None });
        }
        let mut size: ffi::Py_ssize_t = 0;
        // SAFETY: `s` is a live `str` (checked above) and the GIL is held;
        // the interpreter is 3.10+, where this function is in the stable
        // ABI. It returns NULL with an exception set, or a pointer to
        // `size` bytes of UTF-8 that the string object owns (cached in it)
        // until it is deallocated.
        let data = unsafe { PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut size) };
        if data.is_null() {
            return Err(PyErr::fetch(obj.py()));
        }
        let len = usize::try_from(size)
            .map_err(|_| PyValueError::new_err("key: negative string size"))?;
        // SAFETY: `data` points at `len` initialized bytes owned by the
        // string object, which the reference in `_owner` keeps alive for
        // as long as the `Key` (strings are immutable: the bytes do not
        // change).
        let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) };
        // CPython's UTF-8 form of a `str` is valid UTF-8; checked anyway
        // (a few nanoseconds for a key), so a broken buffer is an error,
        // never undefined behaviour.
        let text = std::str::from_utf8(bytes)
            .map_err(|e| PyValueError::new_err(format!("key is not valid UTF-8: {e}")))?;
        Ok(Key {
            text: Cow::Borrowed(text),
            _owner: Some(s.to_owned().unbind()),
        })
    }
}

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
    pub const FLAG_TTL: Self = Self::new(mistri_locks::FLAG_TTL.as_secs() as f64);
}

impl<'a, 'py, A: Argument> FromPyObject<'a, 'py> for Seconds<A> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(f) = obj.cast::<PyFloat>() {
            return Ok(Self::new(f.value()));
        }
        if obj.is_exact_instance_of::<PyInt>() {
            // The common `ttl=10`: no temporary float (`float(10)`). Out
            // of i64's range: the general path below.
            if let Ok(n) = obj.extract::<i64>() {
                return Ok(Self::new(n as f64));
            }
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

/// `hold(key, *args, **kwargs)` on a handle (`None`: the configured
/// slot): `hold.rs`'s reader by name, registered at the module's init
/// ([`set_hold`]) so that `Locks.hold` reaches it in Rust (no trip through
/// Python) without `locks.rs` and `hold.rs` importing each other.
pub(crate) type HoldByName = for<'py> fn(
    Python<'py>,
    Option<&Bound<'py, PyAny>>,
    Bound<'py, PyAny>,
    &Bound<'py, PyTuple>,
    Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>>;

static HOLD_BY_NAME: std::sync::OnceLock<HoldByName> = std::sync::OnceLock::new();

/// Registers `hold.rs`'s reader (once, at the module's init).
pub(crate) fn set_hold(f: HoldByName) {
    let _ = HOLD_BY_NAME.set(f);
}

/// `hold(key, *args, **kwargs)` on `locks` (`None`: the configured slot).
pub(crate) fn forward_hold<'py>(
    py: Python<'py>,
    locks: Option<&Bound<'py, PyAny>>,
    key: Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let Some(hold) = HOLD_BY_NAME.get() else {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "mistri_locks: the native module is not initialised",
        ));
    };
    hold(py, locks, key, args, kwargs)
}

/// A Python value as an option value: None (the default), a bool, an int,
/// a float or a str. Anything else is a TypeError naming the option.
pub(crate) fn option_value(name: &str, v: &Bound<'_, PyAny>) -> PyResult<OptionValue> {
    if v.is_none() {
        return Ok(OptionValue::None);
    }
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(OptionValue::Bool(b.is_true()));
    }
    if v.is_instance_of::<PyInt>() {
        return v
            .extract::<i64>()
            .map(OptionValue::Int)
            .map_err(|_| PyValueError::new_err(format!("{name} is out of range: {}", v)));
    }
    if let Ok(f) = v.cast::<PyFloat>() {
        return Ok(OptionValue::Float(f.value()));
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(OptionValue::Text(s.to_cow()?.into_owned()));
    }
    // Anything with `__float__` (numpy scalars) is seconds, as elsewhere.
    if v.hasattr("__float__")? {
        return Ok(OptionValue::Float(v.extract::<f64>()?));
    }
    Err(PyTypeError::new_err(format!(
        "{name} must be a number, a str or None, not {}",
        type_name(v)
    )))
}

/// `type(obj).__name__`, for messages.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".to_owned())
}
