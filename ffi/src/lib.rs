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
//! - Every exported body runs behind the panic boundary (`panic.rs`).
//! - No C callback ever runs while this library holds a lock (`signal.rs`).

#![deny(unsafe_op_in_unsafe_fn)]
// C type names are lowercase, like rustls-ffi's.
#![allow(non_camel_case_types)]

mod args;
pub mod hold;
pub mod locks;
mod panic;
pub mod signal;
pub mod status;

use std::ffi::c_char;

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
