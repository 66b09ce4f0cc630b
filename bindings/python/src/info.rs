//! `Adapter.info(key)`: the core's [`LeaseInfo`] as a plain dict, so any
//! Python code (and `json.dumps`) can read it.

use mistri_locks::internals::unix_millis;
use mistri_locks::HolderInfo;
use mistri_locks::LeaseInfo;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `{"key", "time_left", "holder", "fence", "acquired_at", "renewed_at",
/// "ttl", "heartbeat", "limit", "holders"}`: seconds as floats, times as
/// Unix seconds; the holder's fields are None when it stored no
/// description, and always for an N-holder lease, whose holders are the
/// list `holders` (by fence; each a dict of `holder`, `fence`,
/// `acquired_at`, `renewed_at`, `ttl`, `heartbeat`) and whose `limit` is
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

/// One holder's fields into `d` (all None for `None`).
fn describe(d: &Bound<'_, PyDict>, h: Option<&HolderInfo>) -> PyResult<()> {
    d.set_item("holder", h.map(|h| h.label.clone()))?;
    d.set_item("fence", h.map(|h| h.fence))?;
    let secs = |t| unix_millis(t) as f64 / 1000.0;
    d.set_item("acquired_at", h.map(|h| secs(h.acquired_at)))?;
    d.set_item("renewed_at", h.map(|h| secs(h.renewed_at)))?;
    d.set_item("ttl", h.map(|h| h.ttl.as_secs_f64()))?;
    d.set_item("heartbeat", h.map(|h| h.heartbeat.as_secs_f64()))?;
    Ok(())
}
