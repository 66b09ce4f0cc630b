//! The Python face of mistri_locks: the native module `mistri_locks._native`,
//! re-exported by the `mistri_locks` package (see `python/mistri_locks/`).
//!
//! Conversion and Python idiom only; every rule lives in the core. Two
//! rules of this layer:
//! - The GIL is released around every backend round trip and every wait,
//!   and waits run in short slices with `check_signals()` so Ctrl-C works.
//! - No Rust thread ever calls into Python: callbacks and duck-typed
//!   signals are delivered on Python threads (see `signal.rs`).

mod adapter;
mod args;
mod error;
mod hold;
mod info;
mod signal;

use crate::adapter::Adapter;
use crate::args::{Heartbeat, SafetyMargin, Seconds, Ttl};
use crate::hold::{start, Hold, Source};
use parking_lot::Mutex;
use pyo3::prelude::*;

/// The adapter object passed to `configure`, so `locks()` returns that very
/// object. The core keeps its own copy of the `Locks` for `hold()`.
static CONFIGURED: Mutex<Option<Py<Adapter>>> = Mutex::new(None);

/// Sets (or with None, clears) the process-wide adapter used by `hold()`.
#[pyfunction]
fn configure(adapter: Option<Bound<'_, Adapter>>) {
    let locks = adapter.as_ref().map(|a| a.get().locks());
    let previous = std::mem::replace(&mut *CONFIGURED.lock(), adapter.map(Bound::unbind));
    mistri_locks::configure(locks);
    drop(previous); // with the GIL held, outside the mutex
}

/// The configured adapter, or None.
#[pyfunction]
fn locks(py: Python<'_>) -> Option<Py<Adapter>> {
    CONFIGURED.lock().as_ref().map(|a| a.clone_ref(py))
}

/// Acquires `key` on the configured adapter and keeps it renewed on a
/// heartbeat until released. None when no adapter is configured or the
/// lease is held elsewhere.
#[pyfunction]
#[pyo3(name = "hold", signature = (key, ttl = Seconds::<Ttl>::LEASE_TTL, heartbeat = Seconds::<Heartbeat>::HEARTBEAT, stop_key = None, signal = None, safety_margin = None))]
fn hold_configured(
    py: Python<'_>,
    key: String,
    ttl: Seconds<Ttl>,
    heartbeat: Seconds<Heartbeat>,
    stop_key: Option<String>,
    signal: Option<Bound<'_, PyAny>>,
    safety_margin: Option<Seconds<SafetyMargin>>,
) -> PyResult<Option<Hold>> {
    // The configured Python adapter object (which may be a subclass), not
    // the core's global.
    let source = match &*CONFIGURED.lock() {
        Some(adapter) => Source::Adapter(adapter.get().locks()),
        None => Source::Nothing,
    };
    start(
        py,
        source,
        key,
        ttl,
        heartbeat,
        stop_key,
        signal,
        safety_margin,
    )
}

#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    mistri_locks::info::set_language("python");
    m.add_class::<Adapter>()?;
    m.add_class::<adapter::Memory>()?;
    m.add_class::<adapter::Redis>()?;
    m.add_class::<adapter::Local>()?;
    m.add_class::<Hold>()?;
    m.add_class::<signal::PyAbortSignal>()?;
    m.add_function(wrap_pyfunction!(configure, m)?)?;
    m.add_function(wrap_pyfunction!(locks, m)?)?;
    m.add_function(wrap_pyfunction!(hold_configured, m)?)?;
    m.add_function(wrap_pyfunction!(signal::_deliver_pending, m)?)?;
    m.add_function(wrap_pyfunction!(signal::_stop_dispatch, m)?)?;
    let exc = error::exceptions(py)?;
    m.add("Error", exc.error.bind(py))?;
    m.add("ConfigError", exc.config.bind(py))?;
    m.add("ConnectionError", exc.connection.bind(py))?;
    m.add("BackendError", exc.backend.bind(py))?;
    m.add("SystemResourceError", exc.system.bind(py))?;
    m.add("LEASE_TTL", mistri_locks::LEASE_TTL.as_secs())?;
    m.add("HEARTBEAT", mistri_locks::HEARTBEAT.as_secs())?;
    m.add("FLAG_TTL", mistri_locks::FLAG_TTL.as_secs())?;
    Ok(())
}
