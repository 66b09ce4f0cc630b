//! `Locks.info(key)` and `Locks.list(prefix)`: the core's [`LeaseInfo`],
//! [`FlagInfo`] and [`Listing`] as plain dicts, so any Python code (and
//! `json.dumps`) can read them. Their shapes are typed for mypy as the
//! `TypedDict`s of `mistri_locks/_info.py` (`LeaseInfo`, `HolderInfo`,
//! `FlagInfo`, `Listing`); a field added here is added there.

use mistri_locks::internals::unix_millis;
use mistri_locks::{FlagInfo, HolderInfo, LeaseInfo, Listing};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::time::SystemTime;

/// `{"key", "time_left", "holder", "fence", "acquired_at", "renewed_at",
/// "ttl", "heartbeat", "stop_key", "limit", "holders"}`: seconds as floats, times as
/// Unix seconds; the holder's fields are None when it stored no
/// description, and always for an N-holder lease, whose holders are the
/// list `holders` (by fence; each a dict of `holder`, `fence`,
/// `acquired_at`, `renewed_at`, `ttl`, `heartbeat`, `stop_key`) and whose `limit` is
/// the newest holder's.
pub fn to_dict<'py>(py: Python<'py>, info: &LeaseInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("key", &info.key)?;
    d.set_item("time_left", info.time_left.map(|t| t.as_secs_f64()))?;
    describe(&d, info.holder.as_ref())?;
    d.set_item("limit", info.limit)?;
    let holders = info
        .holders
        .iter()
        .map(|h| {
            let one = PyDict::new(py);
            describe(&one, Some(h)).map(|()| one)
        })
        .collect::<PyResult<Vec<_>>>()?;
    d.set_item("holders", holders)?;
    Ok(d)
}

/// `{"key", "time_left"}` of a raised flag (`time_left`: float seconds, or
/// None for a flag with no expiry).
fn flag_dict<'py>(py: Python<'py>, flag: &FlagInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("key", &flag.key)?;
    d.set_item("time_left", flag.time_left.map(|t| t.as_secs_f64()))?;
    Ok(d)
}

/// `{"leases": [lease dict, ...], "flags": [flag dict, ...], "waiting":
/// [{"key", "lines", "oldest_wait"}, ...]}`, each list sorted by key as the
/// core returns it; a lease dict is `to_dict`'s.
pub fn listing_dict<'py>(py: Python<'py>, listing: &Listing) -> PyResult<Bound<'py, PyDict>> {
    let leases = (listing.leases.iter())
        .map(|l| to_dict(py, l))
        .collect::<PyResult<Vec<_>>>()?;
    let flags = (listing.flags.iter())
        .map(|f| flag_dict(py, f))
        .collect::<PyResult<Vec<_>>>()?;
    let waiting = (listing.waiting.iter())
        .map(|w| {
            let d = PyDict::new(py);
            d.set_item("key", &w.key)?;
            d.set_item("lines", w.lines)?;
            d.set_item("oldest_wait", w.oldest_wait.as_secs_f64())?;
            Ok(d)
        })
        .collect::<PyResult<Vec<_>>>()?;
    let d = PyDict::new(py);
    d.set_item("leases", leases)?;
    d.set_item("flags", flags)?;
    d.set_item("waiting", waiting)?;
    Ok(d)
}

/// One holder's fields into `d` (all None for `None`).
fn describe(d: &Bound<'_, PyDict>, h: Option<&HolderInfo>) -> PyResult<()> {
    d.set_item("holder", h.map(|h| h.label.clone()))?;
    d.set_item("fence", h.map(|h| h.fence))?;
    d.set_item("acquired_at", h.map(|h| unix_secs(h.acquired_at)))?;
    d.set_item("renewed_at", h.map(|h| unix_secs(h.renewed_at)))?;
    d.set_item("ttl", h.map(|h| h.ttl.as_secs_f64()))?;
    d.set_item("heartbeat", h.map(|h| h.heartbeat.as_secs_f64()))?;
    d.set_item("stop_key", h.and_then(|h| h.stop_key.clone()))?;
    Ok(())
}

/// Unix seconds of a wall-clock time, to the millisecond the backends
/// store (0 before 1970), as the CLI's `*_at_ms` fields.
fn unix_secs(t: SystemTime) -> f64 {
    unix_millis(t) as f64 / 1000.0
}
