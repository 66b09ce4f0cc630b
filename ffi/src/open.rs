//! One entry point for every backend: [`mistri_locks_open`] takes any URL
//! of the core's one scheme table, with typed options from
//! [`mistri_open_options`] (the house builder: one setter per option, so
//! an option can be added without breaking a caller).

use crate::args::{secs, try_out, try_str};
use crate::handle::{free_box, to_boxed_mut_ptr, try_mut_from_ptr, try_ref, Castable};
use crate::locks::{locks_handle, mistri_locks};
use crate::panic::{ffi_boundary, ffi_boundary_void};
use crate::status::mistri_status;
use mistri_core::{Locks, OpenOptions};
use std::ffi::c_char;

/// Options for `mistri_locks_open`, set one at a time. Made by
/// `mistri_open_options_new` with every default: the namespace
/// `"mistri:locks"`, the label `host:pid language`, the Postgres schema of
/// the URL (else `mistri_locks`), the backend's own I/O timeout.
///
/// The namespace, label and timeout setters check their value at once (a
/// bad value is `MISTRI_INVALID_ARGUMENT` and leaves the option as it
/// was); the schema is checked when a handle opens, against the URL.
/// Strings are copied.
///
/// Ownership: made by `mistri_open_options_new`, freed by
/// `mistri_open_options_free` (handles opened with it do not need it).
///
/// Threading: no two threads may use one builder at once.
pub struct mistri_open_options {
    _private: [u8; 0],
}

impl Castable for mistri_open_options {
    type RustType = OpenOptions;
}

/// Makes a builder holding the default options.
///
/// On `MISTRI_OK`, `*out` receives it; free it with
/// `mistri_open_options_free`.
///
/// # Safety
/// `out` is NULL (an error) or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_open_options_new(
    out: *mut *mut mistri_open_options,
) -> mistri_status {
    ffi_boundary!("mistri_open_options_new", {
        try_out!(out).write(to_boxed_mut_ptr(OpenOptions::default()))
    })
}

/// Frees a builder. NULL is ignored.
///
/// # Safety
/// `options` is NULL or a live builder that no other thread is using; it
/// must not be used again.
#[no_mangle]
pub unsafe extern "C" fn mistri_open_options_free(options: *mut mistri_open_options) {
    ffi_boundary_void!("mistri_open_options_free", {
        // SAFETY: per this function's contract, `options` is NULL or a
        // builder given back exactly once.
        unsafe { free_box(options) }
    })
}

/// Sets the namespace every key lives under (Redis and Postgres; Memory
/// and Local have none). NULL: the default, `"mistri:locks"`. Empty or
/// containing `{` or `}` is `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile;
/// `namespace_` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mistri_open_options_set_namespace(
    options: *mut mistri_open_options,
    namespace_: *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_open_options_set_namespace", {
        let options = try_mut_from_ptr!(options);
        let namespace = try_str!(opt namespace_, "namespace");
        if let Some(namespace) = namespace {
            mistri_core::check_namespace(namespace)?;
        }
        options.namespace = namespace.map(str::to_owned);
        Ok(())
    })
}

/// Sets the label the handle's leases and holds describe their holder
/// with. NULL: `host:pid language`. Empty is `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile;
/// `label` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mistri_open_options_set_label(
    options: *mut mistri_open_options,
    label: *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_open_options_set_label", {
        let options = try_mut_from_ptr!(options);
        let label = try_str!(opt label);
        if let Some(label) = label {
            mistri_core::check_label("label", label)?;
        }
        options.label = label.map(str::to_owned);
        Ok(())
    })
}

/// Sets the Postgres schema the tables live in. NULL: the URL's
/// `schema=`, else `mistri_locks`. Checked when a handle opens: a bad name
/// or another backend's URL is `MISTRI_CONFIG`, a URL that names a schema
/// too is `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile;
/// `schema` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mistri_open_options_set_schema(
    options: *mut mistri_open_options,
    schema: *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_open_options_set_schema", {
        let options = try_mut_from_ptr!(options);
        options.schema = try_str!(opt schema).map(str::to_owned);
        Ok(())
    })
}

/// Sets the per-operation I/O timeout in seconds (one-server Redis and
/// Postgres; Cluster and Sentinel keep their own). NaN, infinite, <= 0 or
/// > 1e9 is `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mistri_open_options_set_io_timeout(
    options: *mut mistri_open_options,
    seconds: f64,
) -> mistri_status {
    ffi_boundary!("mistri_open_options_set_io_timeout", {
        let options = try_mut_from_ptr!(options);
        options.io_timeout = Some(secs("io_timeout", seconds)?);
        Ok(())
    })
}

/// Makes a handle on the backend `url` names, any of them: `memory://`, a
/// Local path or `file://PATH`, `redis://`, `rediss://`,
/// `redis+cluster://`, `redis+sentinel://`, `postgres://`, `postgresql://`
/// or a libpq key/value DSN (`host=h dbname=d`). `options` is NULL (every
/// default) or a builder from `mistri_open_options_new`; it is only read.
/// Network backends connect on first use, so an unreachable server shows
/// as `MISTRI_CONNECTION` from the first operation.
///
/// On `MISTRI_OK`, `*out` receives a new handle; free it with
/// `mistri_locks_free`.
///
/// Errors: `MISTRI_CONFIG` (an unknown scheme: the message lists them all;
/// an unparsable URL; a schema for a backend other than Postgres),
/// `MISTRI_INVALID_ARGUMENT` (a schema given in the URL and the options),
/// `MISTRI_NULL_ARGUMENT` (url, out), `MISTRI_INVALID_UTF8`. Messages
/// never contain the password.
///
/// # Safety
/// `url` is NULL or a NUL-terminated string; `options` is NULL or a live
/// builder not being changed meanwhile; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_open(
    url: *const c_char,
    options: *const mistri_open_options,
    out: *mut *mut mistri_locks,
) -> mistri_status {
    ffi_boundary!("mistri_locks_open", {
        let out = try_out!(out);
        let url = try_str!(url);
        let defaults = OpenOptions::default();
        // SAFETY: per this function's contract, `options` is NULL or a live
        // builder nobody changes during the call.
        let options = unsafe { try_ref(options, "options") }.unwrap_or(&defaults);
        out.write(locks_handle(Locks::open_with(url, options)?))
    })
}
