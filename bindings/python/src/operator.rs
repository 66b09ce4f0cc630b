//! The operator's interface for Python hosts (`mistri_locks.web`,
//! `mistri_locks.metrics`): the core's `operator::handle` and
//! `operator::stats_prometheus`, called without the GIL (a request lists
//! the backend). The WSGI app and the collector are Python, in
//! `python/mistri_locks/web.py` and `metrics.py`.

use crate::locks::PyLocks;
use mistri_locks::operator::{self, OperatorOptions, OperatorRequest};
use pyo3::prelude::*;

/// One request through the shared HTTP interface:
/// `(status, [(header, value)], body)`.
#[pyfunction]
#[pyo3(signature = (locks, method, path, query, mount, scheme, host, origin, authorization, csrf, cookie, body, host_authorized, prefix, allow_actions, token))]
#[allow(clippy::too_many_arguments)]
pub fn _operator_handle(
    py: Python<'_>,
    locks: &Bound<'_, PyLocks>,
    method: &str,
    path: &str,
    query: &str,
    mount: &str,
    scheme: &str,
    host: Option<&str>,
    origin: Option<&str>,
    authorization: Option<&str>,
    csrf: Option<&str>,
    cookie: Option<&str>,
    body: &[u8],
    host_authorized: Option<bool>,
    prefix: &str,
    allow_actions: bool,
    token: Option<&str>,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let locks = locks.get().locks();
    let opts = OperatorOptions {
        prefix: prefix.to_owned(),
        allow_actions,
        token: token.map(str::to_owned),
        ..OperatorOptions::default()
    };
    let req = OperatorRequest {
        method,
        path,
        query,
        mount,
        scheme,
        host,
        forwarded_proto: None,
        forwarded_host: None,
        origin,
        authorization,
        csrf,
        cookie,
        body,
        host_authorized,
    };
    let r = py.detach(|| operator::handle(&locks, &opts, &req));
    (r.status, r.headers, r.body)
}

/// This handle's counters as Prometheus text.
#[pyfunction]
pub fn _stats_prometheus(locks: &Bound<'_, PyLocks>) -> String {
    operator::stats_prometheus(&locks.get().locks().stats())
}

/// The largest action body the interface reads.
pub const MAX_BODY: usize = operator::MAX_BODY;
