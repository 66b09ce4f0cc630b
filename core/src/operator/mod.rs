//! The operator's surface: what `mistri-locks serve`, the Rack app and the
//! WSGI app show and do, written once so that every face serves the same
//! bytes.
//!
//! - [`state_json`]: the state document (`GET /api/state`) from a
//!   [`crate::Listing`];
//! - [`stats_prometheus`], [`fleet_prometheus`]: Prometheus text of one
//!   handle's counters and of the fleet a listing shows (`GET /metrics`);
//! - [`PAGE`]: the page, one self-contained HTML file
//!   (`core/src/operator/page.html`, embedded here so the CLI, the Python
//!   package and the gem all carry it);
//! - [`handle`]: the whole HTTP interface over an [`OperatorRequest`],
//!   with its refusals (read-only by default, bearer token or the host's
//!   authorisation, same origin, CSRF).
//!
//! Nothing here keeps state between calls: the CSRF token is a double
//! submit (cookie and page), so any number of server processes behind one
//! address agree without sharing a secret. docs/OPERATING.md is the guide.

mod hosts;
mod http;
mod json;
mod metrics;
mod shared;
mod state;
pub mod wire;

pub use hosts::LOOPBACK as LOOPBACK_HOSTS;
pub use http::{
    handle, query_param, too_large, OperatorOptions, OperatorOptionsBuilder, OperatorRequest,
    OperatorRequestFields, OperatorResponse, CSRF_COOKIE, MAX_BODY, MIN_TOKEN_CHARS, PAGE,
};
pub use metrics::{fleet_prometheus, stats_prometheus, PROMETHEUS_CONTENT_TYPE};
pub use state::{holder_is_stuck, keys_json, state_json};

/// Raises the stop key of every holder of `key` that watches one
/// (`mistri-locks stop --holder-of KEY`, the page's Stop). `Ok(Ok(message))`
/// names the flags raised; `Ok(Err((status, message)))` says why nothing
/// was raised: 404 no live lease, 409 no holder watches a stop key.
///
/// # Errors
/// The backend's errors.
pub fn stop_holders(
    locks: &crate::Locks,
    key: &str,
) -> crate::Result<std::result::Result<String, (u16, String)>> {
    http::stop_holders(locks, key, "")
}
