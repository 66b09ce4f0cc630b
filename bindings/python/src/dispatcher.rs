//! Starting the dispatcher thread (`mistri_locks._dispatch`, a Python daemon
//! thread), which runs what the heartbeat delivers to Python: `on_abort`
//! callbacks, duck-typed signals (`signal.rs`) and event hooks
//! (`events.rs`). A leaf: both of those start it here, and what it
//! delivers is `signal.rs`'s business, so neither imports the other's
//! thread start.

use mistri_locks::delivery;
use pyo3::prelude::*;

/// Makes sure this process runs the dispatcher thread (the core says when:
/// once per process, again in a forked child).
pub(crate) fn ensure_dispatcher(py: Python<'_>) -> PyResult<()> {
    if !delivery::claim_host_thread() {
        return Ok(());
    }
    let started = py
        .import("mistri_locks._dispatch")
        .and_then(|m| m.call_method0("start"));
    if started.is_err() {
        delivery::host_thread_ended();
    }
    started.map(drop)
}
