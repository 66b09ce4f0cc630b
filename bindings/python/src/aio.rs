//! The asyncio face's shims: the native classes' `*_async` methods (and
//! `AbortSignal.on_abort_async` / `cancel_task`) call the functions of the
//! Python module `mistri_locks._aio`, which holds the whole asyncio layer
//! (running blocking calls on the loop's executor, waking a loop with
//! `call_soon_threadsafe`). Here: argument validation that must match the
//! synchronous face, and the call. No Rust thread is involved.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `mistri_locks._aio.<name>(*args, **kwargs)`.
pub(crate) fn call<'py>(
    py: Python<'py>,
    name: &str,
    args: impl pyo3::call::PyCallArgs<'py>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    py.import("mistri_locks._aio")?
        .getattr(name)?
        .call(args, kwargs)
}
