//! Jobs and stops from C: a job's stop flag (`mistri_job_stop_key`, the
//! protocol's `job:<id>:stop`), stopping a job by its id, and stopping the
//! holders of a key — the core's one implementation of each.

use crate::args::{c_string_lossy, secs, try_out, try_str};
use crate::handle::try_ref_from_ptr;
use crate::locks::mistri_locks;
use crate::panic::ffi_boundary;
use crate::status::mistri_status;
use mistri_core::StopOutcome;
use std::ffi::c_char;

/// The stop flag of job `job_id`: `"job:<job_id>:stop"`, the same string
/// in every face (docs/PROTOCOL.md, "Jobs").
///
/// On `MISTRI_OK`, `*key` receives a new string the caller frees with
/// `mistri_string_free`.
///
/// Errors: `MISTRI_INVALID_ARGUMENT` (an empty id, or a key too long).
///
/// # Safety
/// `job_id` is NULL or a NUL-terminated string; `key` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_job_stop_key(
    job_id: *const c_char,
    key: *mut *mut c_char,
) -> mistri_status {
    ffi_boundary!("mistri_job_stop_key", {
        let out = try_out!(key);
        let made = mistri_core::job::stop_key(try_str!(job_id))?;
        out.write(c_string_lossy(&made).into_raw())
    })
}

/// Raises the stop flag of job `job_id` for `ttl` seconds
/// (`MISTRI_FLAG_TTL` by convention): the job stops at its next
/// checkpoint, or as soon as it starts.
///
/// Errors: `MISTRI_INVALID_ARGUMENT` (an empty id, a bad ttl), the
/// backend's errors.
///
/// # Safety
/// `locks` is NULL or a live handle; `job_id` is NULL or a NUL-terminated
/// string.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_stop_job(
    locks: *const mistri_locks,
    job_id: *const c_char,
    ttl: f64,
) -> mistri_status {
    ffi_boundary!("mistri_locks_stop_job", {
        let locks = try_ref_from_ptr!(locks);
        locks.stop_job(try_str!(job_id), secs("ttl", ttl)?)?;
        Ok(())
    })
}

/// Raises, for `ttl` seconds, the stop key of every holder of `key` that
/// watches one (`mistri-locks stop --holder-of KEY`).
///
/// On `MISTRI_OK`, `*raised` receives how many stop flags were raised: 0
/// when nobody holds `key` or no holder watches a stop key
/// (`mistri_locks_info` tells which).
///
/// Errors: `MISTRI_INVALID_ARGUMENT` (empty key, bad ttl), the backend's
/// errors.
///
/// # Safety
/// `locks` is NULL or a live handle; `key` is NULL or a NUL-terminated
/// string; `raised` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_stop_holders(
    locks: *const mistri_locks,
    key: *const c_char,
    ttl: f64,
    raised: *mut usize,
) -> mistri_status {
    ffi_boundary!("mistri_locks_stop_holders", {
        let out = try_out!(raised);
        let locks = try_ref_from_ptr!(locks);
        let n = match locks.stop_holders(try_str!(key), secs("ttl", ttl)?)? {
            StopOutcome::Raised(keys) => keys.len(),
            _ => 0,
        };
        out.write(n)
    })
}
