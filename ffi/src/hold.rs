//! `mistri_hold`: a lease renewed on a heartbeat until released, watching a
//! stop flag and tripping a signal.

use crate::args::{try_out, try_str};
use crate::handle::{free_box, to_boxed_mut_ptr, try_ref_from_ptr, Castable};
use crate::locks::mistri_locks;
use crate::options::mistri_hold_options_builder;
use crate::panic::{ffi_boundary, ffi_boundary_void};
use crate::signal::mistri_signal;
use crate::status::{mistri_status, Failure};
use mistri_core::{Hold, HoldOptions, Interruption, ReleaseOutcome};
use std::ffi::{c_char, CString};

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
    /// No answer to the delete came before the lease's end (the arrival of
    /// the answer to its last confirmed renewal, or to the acquire, + ttl:
    /// the latest instant it can be alive on the backend), and no renewal
    /// of it was left unanswered: it has lapsed by expiry. Nothing is left
    /// to retry.
    MISTRI_RELEASE_EXPIRED = 6,
}

fn outcome_of(outcome: ReleaseOutcome) -> mistri_release_outcome {
    use mistri_release_outcome::*;
    match outcome {
        ReleaseOutcome::Released => MISTRI_RELEASE_RELEASED,
        ReleaseOutcome::NotHeld => MISTRI_RELEASE_NOT_HELD,
        ReleaseOutcome::Lost => MISTRI_RELEASE_LOST,
        ReleaseOutcome::AlreadyReleased => MISTRI_RELEASE_ALREADY_RELEASED,
        ReleaseOutcome::OtherProcess => MISTRI_RELEASE_OTHER_PROCESS,
        ReleaseOutcome::Expired => MISTRI_RELEASE_EXPIRED,
    }
}

/// A held lease, renewed in the background by its handle's heartbeat
/// thread until released or lost.
///
/// States: renewing -> released (`mistri_hold_release`/`mistri_hold_free`)
/// or renewing -> lost (a renewal found the lease gone or taken, or no
/// renewal was confirmed by its safe deadline — send time of the last
/// confirmed renewal + ttl − a safety margin of
/// min(ttl/4, max(tick + the backend's I/O timeout, 0.025 s)) — so the
/// holder hears it before anyone else can take the lease: the signal trips
/// with a reason starting "lease lost"). A stop flag trips the signal too
/// but is not a loss: the hold keeps renewing until released.
///
/// Ownership: made by `mistri_hold_start` or `mistri_hold_start_configured`;
/// freed by `mistri_hold_free` (which releases first if needed). The hold
/// keeps what it needs of its `mistri_locks` handle alive (the handle may
/// be freed first).
///
/// Threading: thread-safe. Getters and `mistri_hold_release` may be called
/// from any thread, concurrently; `mistri_hold_free` must be the last call.
/// After `fork()`, the child's copy neither renews nor releases (release
/// says `MISTRI_RELEASE_OTHER_PROCESS`).
pub struct mistri_hold {
    _private: [u8; 0],
}

/// What a `mistri_hold` points at: the hold, and its key as C reads it.
pub(crate) struct HeldLease {
    hold: Hold,
    key: CString,
}

impl Castable for mistri_hold {
    type RustType = HeldLease;
}

/// The out-value for a hold: a new handle, or NULL for a refusal.
fn hold_handle(hold: Option<Hold>) -> *mut mistri_hold {
    hold.map_or(std::ptr::null_mut(), |hold| {
        let key = CString::new(hold.key()).unwrap_or_default();
        to_boxed_mut_ptr(HeldLease { hold, key })
    })
}

/// Starts a hold on `locks`, or on the configured handle if `None`.
fn start(
    locks: Option<&mistri_core::Locks>,
    key: &str,
    opts: HoldOptions,
) -> Result<*mut mistri_hold, Failure> {
    let Some(waiting) = mistri_core::start_hold(locks, key, opts)? else {
        return Ok(std::ptr::null_mut()); // nothing configured
    };
    // The hold's own signal ends its wait (the core wires it in): no
    // callback of ours, and none at all for a single try.
    Ok(hold_handle(waiting.wait()?))
}

/// Acquires `key` through `locks` and keeps it renewed on the handle's
/// heartbeat thread until released; watches the stop flag every tick.
/// `options` (required) is read during the call only; the same builder may
/// start more holds.
///
/// On `MISTRI_OK`, `*out` receives the new hold (free it with
/// `mistri_hold_free`), or NULL if a live lease on `key` exists: a
/// refusal, not an error (a refused caller holds nothing and never touches
/// the holder's lease).
///
/// Errors: `MISTRI_NULL_ARGUMENT` (locks, key, options, out),
/// `MISTRI_INVALID_ARGUMENT` (empty key; a ttl below 0.01; a safety margin
/// not below half the ttl), `MISTRI_INVALID_UTF8`, the backend's errors on
/// acquire, `MISTRI_SYSTEM` (no heartbeat thread).
///
/// # Safety
/// `locks` is NULL or a live handle; `key` is NULL or a NUL-terminated
/// string; `options` is NULL or a live builder that no other thread changes
/// during the call; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_start_with(
    locks: *const mistri_locks,
    key: *const c_char,
    options: *const mistri_hold_options_builder,
    out: *mut *mut mistri_hold,
) -> mistri_status {
    ffi_boundary!("mistri_hold_start_with", {
        let out = try_out!(out);
        let (locks, key) = (try_ref_from_ptr!(locks), try_str!(key));
        out.write(start(Some(locks), key, try_ref_from_ptr!(options).clone())?)
    })
}

/// `mistri_hold_start_with` on the process-wide handle
/// (`mistri_configure`).
///
/// On `MISTRI_OK`, `*out` receives the new hold, or NULL if no handle is
/// configured or the lease is held elsewhere (both refusals, not errors).
/// Arguments are checked even when no handle is configured.
///
/// # Safety
/// As `mistri_hold_start_with`, without `locks`.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_start_configured_with(
    key: *const c_char,
    options: *const mistri_hold_options_builder,
    out: *mut *mut mistri_hold,
) -> mistri_status {
    ffi_boundary!("mistri_hold_start_configured_with", {
        let out = try_out!(out);
        let key = try_str!(key);
        out.write(start(None, key, try_ref_from_ptr!(options).clone())?)
    })
}

/// Stops renewing and deletes the lease if it is still ours. Idempotent.
/// Does not wait for the heartbeat (a renewal in flight can't outlive the
/// delete: renewals compare the owner token). The delete is bounded twice:
/// by the backend's I/O timeout (Redis: 5 s unless set; Local: 5 s of lock
/// wait) and by the lease's end (the arrival of the answer to its last
/// confirmed renewal + ttl); reaching the lease's end first is
/// `MISTRI_OK` with `MISTRI_RELEASE_EXPIRED`, not an error.
/// Does not free the hold (its getters keep working).
///
/// On `MISTRI_OK`, if `outcome` is not NULL, `*outcome` says what happened.
///
/// Errors: the backend's errors (`MISTRI_ERR_CONNECTION`, ...) if the
/// delete could not be confirmed before the lease's end (e.g. Redis
/// unreachable, the connection cut), or by then while a renewal of it was
/// unanswered (the backend may have applied it); the hold has stopped
/// renewing regardless, so the lease expires on its own within its ttl,
/// and calling release again retries the delete.
///
/// # Safety
/// `hold` is NULL or a live hold; `outcome` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_release(
    hold: *mut mistri_hold,
    outcome: *mut mistri_release_outcome,
) -> mistri_status {
    ffi_boundary!("mistri_hold_release", {
        let outcome_out = try_out!(opt outcome);
        let got = outcome_of(try_ref_from_ptr!(hold).hold.release()?);
        outcome_out.map_or(Ok(()), |out| out.write(got))
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
        // SAFETY: per this function's contract, `hold` is NULL or a hold given
        // back exactly once.
        unsafe { free_box(hold) }
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
        let out = try_out!(key);
        out.write(try_ref_from_ptr!(hold).key.as_ptr())
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
        let out = try_out!(fence);
        out.write(try_ref_from_ptr!(hold).hold.fence())
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
        let out = try_out!(lost);
        out.write(try_ref_from_ptr!(hold).hold.is_lost())
    })
}

/// Reports progress for the hung-holder guard
/// (`mistri_hold_options_set_progress_timeout`): the work is alive. Cheap
/// (a clock read and an atomic store); a no-op without a progress timeout.
///
/// # Safety
/// `hold` is NULL or a live hold.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_touch(hold: *const mistri_hold) -> mistri_status {
    ffi_boundary!("mistri_hold_touch", {
        try_ref_from_ptr!(hold).hold.touch();
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
        let out = try_out!(signal);
        out.write(to_boxed_mut_ptr(
            try_ref_from_ptr!(hold).hold.signal().clone(),
        ))
    })
}

/// Why a hold's work should stop (`mistri_hold_interruption`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum mistri_interruption {
    /// The signal has not tripped: go on.
    MISTRI_INTERRUPTION_NONE = 0,
    /// Asked to stop (the stop flag, or the caller's own abort of the
    /// signal). The lease is still held.
    MISTRI_INTERRUPTION_STOPPED = 1,
    /// The lease may be anyone's now: stop writing as its holder.
    MISTRI_INTERRUPTION_LOST = 2,
}

/// Why the hold's work should stop, typed: no need to read the signal's
/// reason text. Cheap (atomic loads; no I/O): call it between units of
/// work, as a job's checkpoint.
///
/// On `MISTRI_OK`, `*kind` says whether and why; `*detail` (when `detail`
/// is not NULL) receives a new string the caller frees with
/// `mistri_string_free`, or NULL: for `MISTRI_INTERRUPTION_STOPPED` the
/// stop flag seen raised (NULL: the caller aborted the signal itself), for
/// `MISTRI_INTERRUPTION_LOST` the cause (`"not_held"`, `"too_late"`,
/// `"deadline"`, `"max_hold"`, `"stalled"`; NULL: a forked child's copy of
/// a parent's hold).
///
/// # Safety
/// `hold` is NULL or a live hold; `kind` is NULL or writable; `detail` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_interruption(
    hold: *const mistri_hold,
    kind: *mut mistri_interruption,
    detail: *mut *mut c_char,
) -> mistri_status {
    ffi_boundary!("mistri_hold_interruption", {
        let out = try_out!(kind);
        let detail_out = try_out!(opt detail);
        let (k, text) = match try_ref_from_ptr!(hold).hold.interruption() {
            None => (mistri_interruption::MISTRI_INTERRUPTION_NONE, None),
            Some(Interruption::Stopped { flag }) => {
                (mistri_interruption::MISTRI_INTERRUPTION_STOPPED, flag)
            }
            Some(Interruption::Lost { cause }) => (
                mistri_interruption::MISTRI_INTERRUPTION_LOST,
                cause.map(|c| c.name().to_owned()),
            ),
            // A kind added to the core later reads as a stop.
            Some(_) => (mistri_interruption::MISTRI_INTERRUPTION_STOPPED, None),
        };
        if let Some(d) = detail_out {
            d.write(text.map_or(std::ptr::null_mut(), |t| {
                crate::args::c_string_lossy(&t).into_raw()
            }))?;
        }
        out.write(k)
    })
}
