//! `Locks.stats()`, `Locks.on_event(callback)` and
//! `Locks.remove_event_hook(handle)`: the core's counters and hold events
//! (`mistri_locks::stats`, which defines every name) for Python.
//!
//! No Rust thread calls Python: the core runs its event hooks on its
//! notifier thread, and the hook registered here only posts the encoded
//! event to the core's host-delivery queue (`mistri_locks::delivery`) under
//! the callback's listener id; the dispatcher thread (`mistri_locks._dispatch`,
//! a Python thread) decodes it and calls the callback with a dict. The
//! listener ids live above [`ID_BASE`], apart from the signals' ids.
//!
//! [`HOOKS`] is touched only with the GIL held (see `signal.rs` on fork).

use mistri_locks::delivery;
use mistri_locks::Locks;
use mistri_locks::{Event, EventHookHandle, StatValue};
use parking_lot::Mutex;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Event listener ids start here, apart from the signals' listener ids.
const ID_BASE: u64 = 1 << 62;
static NEXT_ID: AtomicU64 = AtomicU64::new(ID_BASE);

/// Listener id (the handle Python sees) -> the Python callback and the
/// core's hook handle.
static HOOKS: Mutex<Option<HashMap<u64, Registered>>> = Mutex::new(None);

/// A Python callback and the core hook that forwards to it.
type Registered = (Py<PyAny>, EventHookHandle);

/// `stats()` as a dict: counts are ints, round-trip times float seconds
/// (None before the first beat).
pub(crate) fn stats<'py>(py: Python<'py>, locks: &Locks) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, value) in locks.stats().entries() {
        match value {
            StatValue::Count(n) => dict.set_item(name, n)?,
            StatValue::Seconds(s) => dict.set_item(name, s)?,
        }
    }
    Ok(dict)
}

/// `on_event(callback)`: registers `callback(event: dict)`; returns its handle.
pub(crate) fn on_event(py: Python<'_>, locks: &Locks, callback: Bound<'_, PyAny>) -> PyResult<u64> {
    if !callback.is_callable() {
        return Err(PyTypeError::new_err(format!(
            "on_event takes a callable, got {}",
            callback.get_type().name()?
        )));
    }
    crate::dispatcher::ensure_dispatcher(py)?;
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    // Registered before the core hook, so no event can find it missing.
    let mut hooks = HOOKS.lock();
    let map = hooks.get_or_insert_with(HashMap::new);
    let core = locks.on_event(move |event| delivery::post_event(id, event.clone()));
    map.insert(id, (callback.unbind(), core));
    Ok(id)
}

/// `remove_event_hook(handle)`: true if it was registered on this owner.
pub(crate) fn remove_event_hook(locks: &Locks, handle: u64) -> bool {
    let core = HOOKS
        .lock()
        .as_ref()
        .and_then(|m| m.get(&handle).map(|(_, core)| *core));
    let Some(core) = core else {
        return false;
    };
    if !locks.remove_event_hook(core) {
        return false; // another owner's hook
    }
    // Dropped with the GIL held (the caller's).
    let entry = HOOKS.lock().as_mut().and_then(|m| m.remove(&handle));
    drop(entry);
    true
}

/// Delivers a hold's event posted under listener `id`, on the dispatcher
/// thread (nothing if its hook was removed meanwhile).
pub(crate) fn deliver(py: Python<'_>, id: u64, event: &Event) {
    let callback = HOOKS
        .lock()
        .as_ref()
        .and_then(|m| m.get(&id).map(|(c, _)| c.clone_ref(py)));
    let Some(callback) = callback else {
        return;
    };
    let result = event_dict(py, event).and_then(|d| callback.bind(py).call1((d,)));
    if let Err(err) = result {
        err.write_unraisable(py, Some(callback.bind(py)));
    }
}

fn event_dict<'py>(py: Python<'py>, event: &Event) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("kind", event.kind.name())?;
    dict.set_item("key", &event.key)?;
    dict.set_item("fence", event.fence)?;
    dict.set_item("reason", event.reason.as_deref())?;
    dict.set_item("cause", event.cause.map(|c| c.name()))?;
    Ok(dict)
}
