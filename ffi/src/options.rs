//! How to hold a lease: [`mistri_hold_options_builder`], a handle with one
//! setter per option (rustls-ffi's builder pattern), for
//! `mistri_hold_start_with`. Options can be added in any release without
//! breaking a caller: there is no struct layout for C to know.

use crate::args::{secs, try_str};
use crate::handle::{free_box, to_boxed_mut_ptr, try_mut_from_ptr, Castable};
use crate::panic::{ffi_boundary, ffi_boundary_void};
use crate::signal::mistri_signal;
use crate::status::mistri_status;
use mistri_core::HoldOptions;
use std::ffi::c_char;

/// Options for `mistri_hold_start_with` / `mistri_hold_start_configured_with`,
/// set one at a time. Made by `mistri_hold_options_new` with the contract's
/// defaults: ttl `MISTRI_LEASE_TTL` (180 s), heartbeat `MISTRI_HEARTBEAT`
/// (60 s), no stop key, a fresh signal per hold, the default safety margin.
///
/// Each setter checks its value at once (a bad value is
/// `MISTRI_INVALID_ARGUMENT` and leaves the option as it was); rules that
/// tie two options together (the safety margin must be below half the ttl)
/// are checked when a hold starts. One builder may start any number of
/// holds; it copies what it is given (strings, a share of the signal), so
/// the caller's strings and signal handle may be freed right after a
/// setter.
///
/// Ownership: made by `mistri_hold_options_new`, freed by
/// `mistri_hold_options_free` (holds started from it do not need it).
///
/// Threading: not thread-safe: no two threads may use one builder at once
/// (a setter while another thread starts a hold from it is a data race).
/// Different builders are independent.
pub struct mistri_hold_options_builder {
    _private: [u8; 0],
}

impl Castable for mistri_hold_options_builder {
    type RustType = HoldOptions;
}

/// Makes a builder holding the default options.
///
/// On `MISTRI_OK`, `*out` receives it; free it with
/// `mistri_hold_options_free`.
///
/// # Safety
/// `out` is NULL (an error) or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_options_new(
    out: *mut *mut mistri_hold_options_builder,
) -> mistri_status {
    ffi_boundary!("mistri_hold_options_new", {
        crate::args::try_out!(out).write(to_boxed_mut_ptr(HoldOptions::default()))
    })
}

/// Frees a builder. NULL is ignored. Holds started from it keep running.
///
/// # Safety
/// `options` is NULL or a live builder that no other thread is using; it
/// must not be used again.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_options_free(options: *mut mistri_hold_options_builder) {
    ffi_boundary_void!("mistri_hold_options_free", {
        // SAFETY: per this function's contract, `options` is NULL or a
        // builder given back exactly once.
        unsafe { free_box(options) }
    })
}

/// Sets the lease TTL in seconds: how long the lease outlives its last
/// renewal (how long a crashed holder blocks others). At least 0.01 for a
/// hold; NaN, infinite, <= 0 or > 1e9 is `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_options_set_ttl(
    options: *mut mistri_hold_options_builder,
    ttl: f64,
) -> mistri_status {
    ffi_boundary!("mistri_hold_options_set_ttl", {
        let options = try_mut_from_ptr!(options);
        options.ttl = secs("ttl", ttl)?;
        Ok(())
    })
}

/// Sets the heartbeat in seconds: the longest wait between renewals (the
/// engine renews at least every ttl/3 whatever this says). Capped at 1 s,
/// it is also the *tick*: how often the stop flag is read. Below 0.001 it
/// counts as 0.001. NaN, infinite, <= 0 or > 1e9 is
/// `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_options_set_heartbeat(
    options: *mut mistri_hold_options_builder,
    heartbeat: f64,
) -> mistri_status {
    ffi_boundary!("mistri_hold_options_set_heartbeat", {
        let options = try_mut_from_ptr!(options);
        options.heartbeat = secs("heartbeat", heartbeat)?;
        Ok(())
    })
}

/// Sets the stop flag: once anyone raises it (`mistri_locks_set_flag`, in
/// any process or language) the hold's signal trips within a tick. The
/// string is copied. NULL: no stop flag. Empty is
/// `MISTRI_INVALID_ARGUMENT`; not UTF-8 is `MISTRI_INVALID_UTF8`.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile;
/// `stop_key` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_options_set_stop_key(
    options: *mut mistri_hold_options_builder,
    stop_key: *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_hold_options_set_stop_key", {
        let options = try_mut_from_ptr!(options);
        let stop_key = try_str!(opt stop_key);
        if let Some(key) = stop_key {
            mistri_core::check_key("stop_key", key)?;
        }
        options.stop_key = stop_key.map(str::to_owned);
        Ok(())
    })
}

/// Sets the signal to trip on stop or loss. The builder shares the signal
/// (the caller keeps, and may free, its handle); every hold started from
/// the builder then trips this one signal. NULL: each hold makes a fresh
/// signal (`mistri_hold_signal` gives a handle to it).
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile;
/// `signal` is NULL or a live signal handle.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_options_set_signal(
    options: *mut mistri_hold_options_builder,
    signal: *const mistri_signal,
) -> mistri_status {
    ffi_boundary!("mistri_hold_options_set_signal", {
        let options = try_mut_from_ptr!(options);
        // SAFETY: per this function's contract, `signal` is NULL or a live
        // signal handle.
        let signal = unsafe { crate::handle::try_ref(signal, "signal") }.ok();
        options.signal = signal.cloned();
        Ok(())
    })
}

/// Sets the safety margin in seconds: how long before the lease could
/// expire the holder is told it may have lost it, when no renewal has been
/// confirmed since. The hold's safe deadline is the send time of its last
/// confirmed renewal + ttl − margin; passing it trips the signal with a
/// reason starting "lease lost". A larger margin tells the holder earlier
/// (more time to stop its work before anyone else can take the lease) at
/// the cost of more false alarms on a slow network.
///
/// Unset, the margin is min(ttl/4, max(tick + the backend's I/O timeout,
/// 0.025 s)). It must be > 0 (NaN, infinite, <= 0 or > 1e9 is
/// `MISTRI_INVALID_ARGUMENT` here) and less than half the ttl (checked when
/// the hold starts, `MISTRI_INVALID_ARGUMENT` naming `safety_margin`).
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_options_set_safety_margin(
    options: *mut mistri_hold_options_builder,
    safety_margin: f64,
) -> mistri_status {
    ffi_boundary!("mistri_hold_options_set_safety_margin", {
        let options = try_mut_from_ptr!(options);
        options.safety_margin = Some(secs("safety_margin", safety_margin)?);
        Ok(())
    })
}

/// Sets how long `mistri_hold_start_with` waits, in seconds, when the lease
/// is held elsewhere: it blocks until the lease is released or expires
/// (woken by that, not by polling) or the wait runs out, then reports a
/// refusal (a NULL hold) as without a wait. 0 tries once; `INFINITY` (or
/// more than 1e9) waits without limit. Aborting the hold's signal
/// (`mistri_hold_options_set_signal`) from another thread ends the wait
/// with a refusal: that is how a C program interrupts a waiter. Unset: no
/// wait. NaN or negative is `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_options_set_wait(
    options: *mut mistri_hold_options_builder,
    wait: f64,
) -> mistri_status {
    ffi_boundary!("mistri_hold_options_set_wait", {
        let options = try_mut_from_ptr!(options);
        options.wait = Some(crate::args::wait(wait)?);
        Ok(())
    })
}

/// Sets how many holders the lease may have at once (an N-holder lease, a
/// semaphore): each hold has its own owner token, renewal, fence and loss
/// detection, and a crashed holder's slot frees itself at its ttl. 1 (the
/// default) is the exclusive lease. 0 or more than `MISTRI_MAX_LIMIT` is
/// `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_options_set_limit(
    options: *mut mistri_hold_options_builder,
    limit: u32,
) -> mistri_status {
    ffi_boundary!("mistri_hold_options_set_limit", {
        let options = try_mut_from_ptr!(options);
        options.limit = crate::args::limit(limit)?;
        Ok(())
    })
}

/// Hung-holder guard: never renew the lease past this total age, in
/// seconds from the acquire. The signal then trips with a reason saying
/// so, before the lease lapses. Unset: no limit. NaN, infinite, <= 0 or
/// > 1e9 is `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_options_set_max_hold(
    options: *mut mistri_hold_options_builder,
    max_hold: f64,
) -> mistri_status {
    ffi_boundary!("mistri_hold_options_set_max_hold", {
        let options = try_mut_from_ptr!(options);
        options.max_hold = Some(secs("max_hold", max_hold)?);
        Ok(())
    })
}

/// Hung-holder guard, progress mode: the work calls `mistri_hold_touch` at
/// least every `progress_timeout` seconds; when no touch came for that
/// long, renewals stop and the signal trips with a reason saying the work
/// stalled. Unset: off. NaN, infinite, <= 0 or > 1e9 is
/// `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_options_set_progress_timeout(
    options: *mut mistri_hold_options_builder,
    progress_timeout: f64,
) -> mistri_status {
    ffi_boundary!("mistri_hold_options_set_progress_timeout", {
        let options = try_mut_from_ptr!(options);
        options.progress_timeout = Some(secs("progress_timeout", progress_timeout)?);
        Ok(())
    })
}
