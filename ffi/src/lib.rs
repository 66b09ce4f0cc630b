//! The C ABI of mistri_locks: `libmistri_locks.so` / `libmistri_locks.a`
//! with the header `include/mistri_locks.h` (generated from these sources by
//! cbindgen, committed, and checked for drift by `tests/header.rs`).
//!
//! Conventions (also written at the top of the header, for C readers):
//! - Names: `mistri_<thing>_<verb>` for functions on a handle type
//!   (`mistri_locks_acquire`, `mistri_hold_release`, `mistri_signal_wait`),
//!   `mistri_<thing>_new` / `mistri_<thing>_free` for lifetimes, plain
//!   `mistri_<verb>` for process-wide functions (`mistri_configure`,
//!   `mistri_last_error`). Types are lowercase `mistri_<thing>`; constants
//!   and enum values are `MISTRI_<NAME>`.
//! - Every fallible function returns a [`status::mistri_status`]; results go
//!   to trailing out-params, written only on `MISTRI_OK`. Refusals (lease held
//!   elsewhere, not our lease) are `MISTRI_OK` with `false`/NULL out.
//! - Every exported body runs behind the panic boundary (`panic.rs`), and
//!   is its logic only: handle borrows (`handle.rs`, rustls-ffi's
//!   `Castable`), strings, seconds and out-params (`args.rs`) are one macro
//!   each, and each fails with a status naming the argument.
//! - No C callback ever runs while this library holds a lock (`signal.rs`).
//!
//! Modules, leaf first: `status` (statuses, the last error; uses nothing
//! else here) ← `panic` ← `handle`, `args` ← `locks`, `signal`, `options`,
//! `acquire`, `hold`, `events`, `stats`, `info` ← `listing`.

#![deny(unsafe_op_in_unsafe_fn)]
// C type names are lowercase, like rustls-ffi's.
#![allow(non_camel_case_types)]

pub mod acquire;
mod args;
pub mod events;
mod handle;
pub mod hold;
pub mod info;
pub mod job;
pub mod listing;
pub mod locks;
pub mod metrics;
pub mod open;
pub mod options;
mod panic;
pub mod signal;
pub mod stats;
pub mod status;

use std::ffi::{c_char, c_int};

/// The library's version, e.g. `"0.1.0"` (static; never free it). Compare
/// with `MISTRI_LOCKS_VERSION` from the header to catch a header/library
/// mismatch.
#[no_mangle]
pub extern "C" fn mistri_version() -> *const c_char {
    const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    panic::ffi_boundary_or!("mistri_version", VERSION.as_ptr().cast(), {
        VERSION.as_ptr().cast()
    })
}

/// The message of the last error on the calling thread, as
/// `"<function>: <kind>: <details>"`, e.g.
/// `"mistri_locks_acquire: invalid argument: ttl must be greater than zero seconds, got 0"`.
///
/// Returns `""` if no call on this thread has failed yet. Never NULL.
///
/// Ownership: the string belongs to the library. It stays valid until the
/// next `mistri_*` call on this thread (copy it if you need it longer); do not
/// free it.
///
/// Threading: each thread has its own last error, so a failure on one thread
/// never overwrites another thread's message. Successful calls leave it
/// alone: check the status first, then read the message.
#[no_mangle]
pub extern "C" fn mistri_last_error() -> *const c_char {
    const EMPTY: *const c_char = c"".as_ptr();
    panic::ffi_boundary_or!("mistri_last_error", EMPTY, {
        status::last_error_ptr().unwrap_or(EMPTY)
    })
}

/// The name of a status as a static string, e.g. `"MISTRI_CONNECTION"`, or
/// `"MISTRI_UNKNOWN_STATUS"` for a number that is not a status.
///
/// Ownership: static; never free it. Threading: any thread.
#[no_mangle]
pub extern "C" fn mistri_status_name(status: c_int) -> *const c_char {
    const UNKNOWN: *const c_char = c"MISTRI_UNKNOWN_STATUS".as_ptr();
    panic::ffi_boundary_or!("mistri_status_name", UNKNOWN, {
        status::status_name(status).as_ptr().cast()
    })
}
