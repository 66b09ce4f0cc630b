//! Acquire with options: `mistri_acquire_options` (a builder: wait, limit,
//! signal) and `mistri_locks_acquire_with`; and [`drive`], the one blocking
//! wait of this layer (waiting acquires and holds).
//!
//! A C waiter is interrupted by aborting the signal it was given, from any
//! thread: the abort wakes the wait at once (a core callback rings the
//! waiter's bell) and the call reports a refusal.

use crate::args::{secs, try_out, try_str};
use crate::handle::{free_box, to_boxed_mut_ptr, try_mut_from_ptr, try_ref_from_ptr, Castable};
use crate::locks::mistri_locks;
use crate::panic::{ffi_boundary, ffi_boundary_void};
use crate::signal::mistri_signal;
use crate::status::{mistri_status, Failure};
use mistri_core::{AbortSignal, AcquireOptions, Waiting};
use std::ffi::c_char;

/// The largest number of holders of an N-holder lease
/// (`mistri_acquire_options_set_limit`, `mistri_hold_options_set_limit`).
pub const MISTRI_MAX_LIMIT: u32 = 1_000_000;
const _: () = assert!(MISTRI_MAX_LIMIT == mistri_core::MAX_LIMIT);

/// Waits for `waiting` to finish; an abort of `signal` wakes it at once
/// (the core then reports a refusal).
pub(crate) fn drive<T>(waiting: Waiting<T>, signal: Option<&AbortSignal>) -> Result<T, Failure> {
    let wake = signal.map(|signal| {
        let waker = waiting.waker();
        (signal, signal.on_abort(move |_| waker.wake()))
    });
    let done = waiting.wait();
    if let Some((signal, handle)) = wake {
        signal.remove_callback(handle);
    }
    Ok(done?)
}

/// Options for `mistri_locks_acquire_with`, set one at a time. Made by
/// `mistri_acquire_options_new` with the defaults: no wait, limit 1, no
/// signal. Each setter checks its value at once (a bad value is
/// `MISTRI_INVALID_ARGUMENT` and leaves the option as it was). The builder
/// copies what it is given (a share of the signal).
///
/// Ownership: made by `mistri_acquire_options_new`, freed by
/// `mistri_acquire_options_free`.
///
/// Threading: no two threads may use one builder at once; acquires started
/// from it may run on any threads afterwards (they copy it).
pub struct mistri_acquire_options {
    _private: [u8; 0],
}

impl Castable for mistri_acquire_options {
    type RustType = AcquireOptions;
}

/// Makes an acquire options builder holding the defaults.
///
/// On `MISTRI_OK`, `*out` receives it; free it with
/// `mistri_acquire_options_free`.
///
/// # Safety
/// `out` is NULL (an error) or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_acquire_options_new(
    out: *mut *mut mistri_acquire_options,
) -> mistri_status {
    ffi_boundary!("mistri_acquire_options_new", {
        try_out!(out).write(to_boxed_mut_ptr(AcquireOptions::default()))
    })
}

/// Frees an acquire options builder. NULL is ignored.
///
/// # Safety
/// `options` is NULL or a live builder that no other thread is using; it
/// must not be used again.
#[no_mangle]
pub unsafe extern "C" fn mistri_acquire_options_free(options: *mut mistri_acquire_options) {
    ffi_boundary_void!("mistri_acquire_options_free", {
        // SAFETY: per this function's contract, `options` is NULL or a
        // builder given back exactly once.
        unsafe { free_box(options) }
    })
}

/// Sets how long `mistri_locks_acquire_with` waits, in seconds, when the
/// lease is held elsewhere: it blocks until the lease is released or
/// expires (woken by that, not by polling) or the wait runs out, then
/// reports `false`. 0 tries once; `INFINITY` (or more than 1e9) waits
/// without limit. Unset: no wait. NaN or negative is
/// `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mistri_acquire_options_set_wait(
    options: *mut mistri_acquire_options,
    wait: f64,
) -> mistri_status {
    ffi_boundary!("mistri_acquire_options_set_wait", {
        let options = try_mut_from_ptr!(options);
        options.wait = Some(crate::args::wait(wait)?);
        Ok(())
    })
}

/// Sets how many holders the lease may have at once (an N-holder lease):
/// the acquire takes one of `limit` slots. 1 (the default) is exclusive.
/// 0 or more than `MISTRI_MAX_LIMIT` is `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mistri_acquire_options_set_limit(
    options: *mut mistri_acquire_options,
    limit: u32,
) -> mistri_status {
    ffi_boundary!("mistri_acquire_options_set_limit", {
        let options = try_mut_from_ptr!(options);
        options.limit = crate::args::limit(limit)?;
        Ok(())
    })
}

/// Sets the signal that ends a wait: aborting it (from any thread) makes a
/// waiting `mistri_locks_acquire_with` return at once with `false`. The
/// builder shares the signal (the caller keeps, and may free, its handle).
/// NULL: no signal.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile;
/// `signal` is NULL or a live signal handle.
#[no_mangle]
pub unsafe extern "C" fn mistri_acquire_options_set_signal(
    options: *mut mistri_acquire_options,
    signal: *const mistri_signal,
) -> mistri_status {
    ffi_boundary!("mistri_acquire_options_set_signal", {
        let options = try_mut_from_ptr!(options);
        // SAFETY: per this function's contract, `signal` is NULL or a live
        // signal handle.
        let signal = unsafe { crate::handle::try_ref(signal, "signal") }.ok();
        options.signal = signal.cloned();
        Ok(())
    })
}

/// `mistri_locks_acquire` with options (`options` NULL: the defaults, which
/// is exactly `mistri_locks_acquire`): wait for a lease held elsewhere,
/// take one of N slots. Blocks for at most the wait; aborting the options'
/// signal ends the wait.
///
/// On `MISTRI_OK`, `*acquired` is `true` if this handle now holds the
/// lease (or a slot of it), `false` if refused at the end of the wait or
/// when the signal was aborted (a refusal, not an error). One handle holds
/// at most one lease or slot per key: while it does, this says `false`.
///
/// Errors: `MISTRI_NULL_ARGUMENT` (locks, key, acquired),
/// `MISTRI_INVALID_ARGUMENT` (empty key; ttl NaN, infinite, <= 0 or > 1e9),
/// `MISTRI_INVALID_UTF8`, the backend's errors.
///
/// # Safety
/// `locks` is NULL or a live handle; `key` is NULL or a NUL-terminated
/// string; `options` is NULL or a live builder that no other thread changes
/// during the call; `acquired` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_acquire_with(
    locks: *const mistri_locks,
    key: *const c_char,
    ttl: f64,
    options: *const mistri_acquire_options,
    acquired: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_locks_acquire_with", {
        let out = try_out!(acquired);
        let (locks, key, ttl) = (try_ref_from_ptr!(locks), try_str!(key), secs("ttl", ttl)?);
        let opts = if options.is_null() {
            AcquireOptions::default()
        } else {
            try_ref_from_ptr!(options).clone()
        };
        if opts.wait.is_none() && opts.limit == 1 {
            // One attempt at the exclusive lease: `mistri_locks_acquire`, exactly.
            return out.write(locks.acquire(key, ttl)?);
        }
        let waiting = locks.start_acquire(key, ttl, &opts)?;
        out.write(drive(waiting, opts.signal.as_ref())?)
    })
}
