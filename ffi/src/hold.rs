//! `mistri_hold`: a lease renewed on a heartbeat until released, watching a
//! stop flag and tripping a signal.

use crate::args::{arg_opt_str, arg_ref, arg_str, out_ptr, secs, write_out};
use crate::locks::{mistri_locks, MISTRI_HEARTBEAT, MISTRI_LEASE_TTL};
use crate::panic::{ffi_boundary, ffi_boundary_or, ffi_boundary_void};
use crate::signal::{mistri_signal, new_signal_handle};
use crate::status::{mistri_status, Failure};
use mistri_core::{Hold, HoldOptions, ReleaseOutcome};
use std::ffi::{c_char, CStr, CString};

/// How to hold a lease. Start from `mistri_hold_options_default()` and
/// change what you need.
///
/// The struct is only read during `mistri_hold_start*`; the strings and the
/// signal it points at may be freed right after.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mistri_hold_options {
    /// Lease TTL in seconds: how long the lease outlives its last renewal
    /// (how long a crashed holder blocks others). Must be finite and > 0.
    pub ttl: f64,
    /// The longest wait between renewals, in seconds (the engine renews at
    /// least every ttl/3 whatever this says). Capped at 1 s, it is also the
    /// *tick*: how often the stop flag is read. Must be finite and > 0;
    /// below 0.001 it counts as 0.001. A hold's ttl must be at least 0.01.
    /// C holds use the default safety margin (see `mistri_hold`).
    pub heartbeat: f64,
    /// A flag that, once raised by anyone (`mistri_locks_set_flag`, in any
    /// process or language), trips the signal within a tick. NULL: none.
    /// Must not be empty.
    pub stop_key: *const c_char,
    /// The signal to trip on stop or loss. The hold shares the signal (the
    /// caller keeps its handle). NULL: the hold makes a fresh one
    /// (`mistri_hold_signal` gives a handle to it).
    pub signal: *const mistri_signal,
}

/// The contract's defaults: ttl `MISTRI_LEASE_TTL` (180 s), heartbeat
/// `MISTRI_HEARTBEAT` (60 s), no stop key, no signal (a fresh one).
#[no_mangle]
pub extern "C" fn mistri_hold_options_default() -> mistri_hold_options {
    const DEFAULTS: mistri_hold_options = mistri_hold_options {
        ttl: MISTRI_LEASE_TTL,
        heartbeat: MISTRI_HEARTBEAT,
        stop_key: std::ptr::null(),
        signal: std::ptr::null(),
    };
    ffi_boundary_or!("mistri_hold_options_default", DEFAULTS, { DEFAULTS })
}

/// What `mistri_hold_release` did. Every value is a normal outcome, not an
/// error.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum mistri_release_outcome {
    /// The lease was still ours and is deleted.
    MISTRI_RELEASE_RELEASED = 1,
    /// The hold was renewing, but the lease was gone (expired or taken) by
    /// the time of the delete; nothing was deleted.
    MISTRI_RELEASE_NOT_HELD = 2,
    /// The hold had been lost before (its signal tripped saying so); nothing
    /// was deleted.
    MISTRI_RELEASE_LOST = 3,
    /// An earlier release already ran.
    MISTRI_RELEASE_ALREADY_RELEASED = 4,
    /// This is a forked child's copy of its parent's hold: the parent's lease
    /// was left alone.
    MISTRI_RELEASE_OTHER_PROCESS = 5,
}

fn outcome_of(outcome: ReleaseOutcome) -> mistri_release_outcome {
    use mistri_release_outcome::*;
    match outcome {
        ReleaseOutcome::Released => MISTRI_RELEASE_RELEASED,
        ReleaseOutcome::NotHeld => MISTRI_RELEASE_NOT_HELD,
        ReleaseOutcome::Lost => MISTRI_RELEASE_LOST,
        ReleaseOutcome::AlreadyReleased => MISTRI_RELEASE_ALREADY_RELEASED,
        ReleaseOutcome::OtherProcess => MISTRI_RELEASE_OTHER_PROCESS,
    }
}

/// A held lease, renewed in the background by the adapter's heartbeat
/// thread until released or lost.
///
/// States: renewing -> released (`mistri_hold_release`/`mistri_hold_free`)
/// or renewing -> lost (a renewal found the lease gone or taken, or no
/// renewal was confirmed by its safe deadline — send time of the last
/// confirmed renewal + ttl − a safety margin of
/// min(ttl/4, max(tick + the adapter's I/O timeout, 0.025 s)) — so the
/// holder hears it before anyone else can take the lease: the signal trips
/// with a reason starting "lease lost"). A stop flag trips the signal too
/// but is not a loss: the hold keeps renewing until released.
///
/// Ownership: made by `mistri_hold_start` or `mistri_hold_start_configured`;
/// freed by `mistri_hold_free` (which releases first if needed). The hold
/// keeps its adapter alive.
///
/// Threading: thread-safe. Getters and `mistri_hold_release` may be called
/// from any thread, concurrently; `mistri_hold_free` must be the last call.
/// After `fork()`, the child's copy neither renews nor releases (release
/// says `MISTRI_RELEASE_OTHER_PROCESS`).
pub struct mistri_hold {
    hold: Hold,
    key: CString,
}

/// Converts the C options (NULL: defaults).
///
/// # Safety
/// `opts` is NULL or points to a readable struct whose pointers are NULL
/// or valid (a C string, a live signal handle).
unsafe fn hold_options(opts: *const mistri_hold_options) -> Result<HoldOptions, Failure> {
    // SAFETY: forwarded from this function's contract.
    let opts = unsafe { opts.as_ref() }
        .copied()
        .unwrap_or_else(|| mistri_hold_options_default());
    // SAFETY: forwarded from this function's contract.
    let stop_key = unsafe { arg_opt_str(opts.stop_key, "stop_key") }?;
    // SAFETY: forwarded from this function's contract.
    let signal = unsafe { opts.signal.as_ref() }.map(|s| s.signal.clone());
    Ok(HoldOptions {
        ttl: secs("ttl", opts.ttl)?,
        heartbeat: secs("heartbeat", opts.heartbeat)?,
        stop_key: stop_key.map(str::to_owned),
        signal,
        // The struct has no room for more fields without breaking callers
        // built against it: C holds use the default margin (see the header).
        safety_margin: None,
        ..HoldOptions::default()
    })
}

fn new_hold_handle(hold: Option<Hold>) -> *mut mistri_hold {
    match hold {
        Some(hold) => {
            let key = CString::new(hold.key()).unwrap_or_default();
            Box::into_raw(Box::new(mistri_hold { hold, key }))
        }
        None => std::ptr::null_mut(),
    }
}

/// Acquires `key` through `locks` and keeps it renewed on the adapter's
/// heartbeat thread until released; watches `opts->stop_key` every tick.
/// `opts` NULL means `mistri_hold_options_default()`.
///
/// On `MISTRI_OK`, `*out` receives the new hold (free it with
/// `mistri_hold_free`), or NULL if a live lease on `key` exists: a
/// refusal, not an error (a refused caller holds nothing and never touches
/// the holder's lease).
///
/// Errors: `MISTRI_INVALID_ARGUMENT` (empty key or stop key; ttl or
/// heartbeat NaN, infinite, <= 0 or > 1e9), `MISTRI_INVALID_UTF8`, the
/// backend's errors on acquire, `MISTRI_SYSTEM` (no heartbeat thread).
///
/// # Safety
/// `locks` is NULL or a live handle; `key` is NULL or a NUL-terminated
/// string; `opts` is NULL or a readable options struct; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_start(
    locks: *const mistri_locks,
    key: *const c_char,
    opts: *const mistri_hold_options,
    out: *mut *mut mistri_hold,
) -> mistri_status {
    ffi_boundary!("mistri_hold_start", {
        let out = out_ptr(out, "out")?;
        // SAFETY: pointers per this function's contract.
        let (locks, key, opts) = unsafe {
            (
                arg_ref(locks, "locks")?,
                arg_str(key, "key")?,
                hold_options(opts)?,
            )
        };
        let hold = locks.locks.hold(key, opts)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, new_hold_handle(hold)) };
        Ok(())
    })
}

/// `mistri_hold_start` on the process-wide adapter (`mistri_configure`).
///
/// On `MISTRI_OK`, `*out` receives the new hold, or NULL if no adapter is
/// configured or the lease is held elsewhere (both refusals, not errors).
/// Arguments are checked even when no adapter is configured.
///
/// # Safety
/// As `mistri_hold_start`, without `locks`.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_start_configured(
    key: *const c_char,
    opts: *const mistri_hold_options,
    out: *mut *mut mistri_hold,
) -> mistri_status {
    ffi_boundary!("mistri_hold_start_configured", {
        let out = out_ptr(out, "out")?;
        // SAFETY: pointers per this function's contract.
        let (key, opts) = unsafe { (arg_str(key, "key")?, hold_options(opts)?) };
        let hold = mistri_core::hold(key, opts)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, new_hold_handle(hold)) };
        Ok(())
    })
}

/// Stops renewing and deletes the lease if it is still ours. Idempotent.
/// Does not wait for the heartbeat (a renewal in flight can't outlive the
/// delete: renewals compare the owner token); the delete is bounded by the
/// adapter's I/O timeout (Redis: 5 s unless set; Local: 5 s of lock wait).
/// Does not free the hold (its getters keep working).
///
/// On `MISTRI_OK`, if `outcome` is not NULL, `*outcome` says what happened.
///
/// Errors: the backend's errors if the delete could not be confirmed (e.g.
/// Redis unreachable); the hold has stopped renewing regardless, so the
/// lease expires on its own within its ttl, and calling release again
/// retries the delete.
///
/// # Safety
/// `hold` is NULL or a live hold; `outcome` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_release(
    hold: *mut mistri_hold,
    outcome: *mut mistri_release_outcome,
) -> mistri_status {
    ffi_boundary!("mistri_hold_release", {
        // SAFETY: a live hold per this function's contract.
        let hold = unsafe { arg_ref(hold.cast_const(), "hold") }?;
        let got = outcome_of(hold.hold.release()?);
        if let Some(out) = std::ptr::NonNull::new(outcome) {
            // SAFETY: non-NULL; the caller promises it is writable.
            unsafe { write_out(out, got) };
        }
        Ok(())
    })
}

/// Releases (if not done yet, ignoring errors: call `mistri_hold_release`
/// first to see them) and frees the hold. NULL is ignored.
///
/// # Safety
/// `hold` is NULL or a live hold that no other thread is using; it must not
/// be used again.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_free(hold: *mut mistri_hold) {
    ffi_boundary_void!("mistri_hold_free", {
        if !hold.is_null() {
            // SAFETY: made by Box::into_raw in this module; the caller gives
            // it back exactly once.
            drop(unsafe { Box::from_raw(hold) });
        }
    })
}

/// The key held.
///
/// On `MISTRI_OK`, `*key` points at the key, owned by the hold: valid until
/// `mistri_hold_free`; do not free it.
///
/// # Safety
/// `hold` is NULL or a live hold; `key` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_key(
    hold: *const mistri_hold,
    key: *mut *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_hold_key", {
        let out = out_ptr(key, "key")?;
        // SAFETY: a live hold per this function's contract.
        let hold = unsafe { arg_ref(hold, "hold") }?;
        let ptr = CStr::as_ptr(&hold.key);
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, ptr) };
        Ok(())
    })
}

/// The fencing number of this acquisition: strictly greater than that of
/// every earlier acquisition of the key, on every backend, so storage can
/// reject writes from a stale holder.
///
/// On `MISTRI_OK`, `*fence` receives it (>= 1).
///
/// # Safety
/// `hold` is NULL or a live hold; `fence` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_fence(
    hold: *const mistri_hold,
    fence: *mut u64,
) -> mistri_status {
    ffi_boundary!("mistri_hold_fence", {
        let out = out_ptr(fence, "fence")?;
        // SAFETY: a live hold per this function's contract.
        let hold = unsafe { arg_ref(hold, "hold") }?;
        let got = hold.hold.fence();
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, got) };
        Ok(())
    })
}

/// Has the lease been lost (gone or taken at a renewal, or renewals failed
/// past its deadline)? A lost hold's signal is tripped with a reason
/// starting "lease lost". A stop flag does not make a hold lost.
///
/// On `MISTRI_OK`, `*lost` says so.
///
/// # Safety
/// `hold` is NULL or a live hold; `lost` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_lost(
    hold: *const mistri_hold,
    lost: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_hold_lost", {
        let out = out_ptr(lost, "lost")?;
        // SAFETY: a live hold per this function's contract.
        let hold = unsafe { arg_ref(hold, "hold") }?;
        let got = hold.hold.is_lost();
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, got) };
        Ok(())
    })
}

/// The signal this hold trips on stop or loss (the one passed in its
/// options, or the fresh one it made).
///
/// On `MISTRI_OK`, `*signal` receives a new handle to it, to be freed with
/// `mistri_signal_free` (it may outlive the hold).
///
/// # Safety
/// `hold` is NULL or a live hold; `signal` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_signal(
    hold: *const mistri_hold,
    signal: *mut *mut mistri_signal,
) -> mistri_status {
    ffi_boundary!("mistri_hold_signal", {
        let out = out_ptr(signal, "signal")?;
        // SAFETY: a live hold per this function's contract.
        let hold = unsafe { arg_ref(hold, "hold") }?;
        let handle = new_signal_handle(hold.hold.signal().clone());
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, handle) };
        Ok(())
    })
}
