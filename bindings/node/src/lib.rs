//! The Node.js face of mistri_locks, built with napi-rs: the binding glue.
//! Everything a JavaScript caller sees (Web Locks' `request`, the
//! `AbortController` of a lease, `Interrupted`, error classes, the HTTP
//! handler) is in `lib/index.cjs`; this crate only moves values across.
//!
//! The event loop never blocks: every call that may touch the backend or
//! wait runs on the face's own threads ([`pool`], never libuv's pool) and
//! answers through a deferred promise; a lease's stop or loss reaches
//! JavaScript through one thread-safe function per JS thread that does not
//! keep the process alive ([`hold::set_dispatcher`]). Each `worker_thread`
//! loads the addon for itself; the core (engines, the configured Locks) is
//! shared by the process.
//!
//! Errors cross as a rejected promise or a thrown Error whose message starts
//! with `[MISTRI_<KIND>] `; `lib/index.cjs` turns it into a `LocksError`
//! with that `code`. A value of the wrong kind for its option (the core's
//! `WrongType`) starts `[TypeError:MISTRI_INVALID_ARGUMENT] ` and becomes a
//! `TypeError` with that `code`.

// napi-derive registers the exports only outside `cfg(test)`; clippy's
// --all-targets checks the lib as a test too, where every export is unused.
#![cfg_attr(test, allow(dead_code))]

mod convert;
mod hold;
mod job;
mod locks;
mod operator;
mod pool;

use napi::bindgen_prelude::*;
use napi_derive::napi;

/// The core's error as a JS error carrying its kind (see the module header).
pub(crate) fn js_error(e: &mistri_locks::Error) -> napi::Error {
    use mistri_locks::Error as E;
    let code = match e {
        E::InvalidArgument(_) => "MISTRI_INVALID_ARGUMENT",
        // A JS TypeError that keeps the code (lib/index.cjs `translate`).
        E::WrongType(_) => "TypeError:MISTRI_INVALID_ARGUMENT",
        E::Config(_) => "MISTRI_CONFIG",
        E::Connection(_) => "MISTRI_CONNECTION",
        E::Backend(_) => "MISTRI_BACKEND",
        E::System(_) => "MISTRI_SYSTEM",
        _ => "MISTRI_ERROR",
    };
    napi::Error::new(Status::GenericFailure, format!("[{code}] {}", e.message()))
}

/// Runs `work` (a call that does not wait in line) on the face's own
/// threads and settles the returned promise with its result; a panic
/// rejects it instead of crossing into Node.
pub(crate) fn spawn_promise<T, F>(env: &Env, work: F) -> Result<Object<'_>>
where
    T: ToNapiValue + Send + 'static,
    F: FnOnce() -> mistri_locks::Result<T> + Send + 'static,
{
    spawn_promise_in(env, pool::Kind::Call, work)
}

/// [`spawn_promise`] in the group of `kind` ([`pool`]).
pub(crate) fn spawn_promise_in<T, F>(env: &Env, kind: pool::Kind, work: F) -> Result<Object<'_>>
where
    T: ToNapiValue + Send + 'static,
    F: FnOnce() -> mistri_locks::Result<T> + Send + 'static,
{
    let (deferred, promise) = env.create_deferred()?;
    pool::run(kind, move || {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
            Ok(Ok(value)) => deferred.resolve(move |_| Ok(value)),
            Ok(Err(e)) => deferred.reject(js_error(&e)),
            Err(_) => deferred.reject(napi::Error::new(
                Status::GenericFailure,
                "[MISTRI_SYSTEM] internal error: the native call panicked",
            )),
        }
    });
    Ok(promise)
}

/// The addon's version (the workspace's).
#[napi]
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The stop-flag key of job `id` (the protocol's one format, from the core).
#[napi]
pub fn job_stop_key(id: String) -> Result<String> {
    mistri_locks::job::stop_key(&id).map_err(|e| js_error(&e))
}

/// `seconds` checked by the core's one rule for a duration option named
/// `what` (positive, finite, at most `MAX_SECS`); returns it.
#[napi]
pub fn check_seconds(what: String, seconds: f64) -> Result<f64> {
    mistri_locks::args::duration_from_secs(&what, seconds).map_err(|e| js_error(&e))?;
    Ok(seconds)
}

/// The face's own threads (`src/pool.rs`): `[calls, idle calls, waits,
/// idle waits, most call threads, most wait threads]` (tests read it).
#[napi]
pub fn pool_threads() -> Vec<u32> {
    let mut counts = pool::counts().to_vec();
    for max in [pool::CALL_THREADS, pool::WAIT_THREADS] {
        counts.push(u32::try_from(max).unwrap_or(u32::MAX));
    }
    counts
}
