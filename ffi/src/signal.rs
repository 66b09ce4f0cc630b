//! `mistri_signal`: the AbortSignal, with C callbacks.
//!
//! Callbacks: a C callback is boxed with its `userdata` and optional
//! finalizer into a [`CCallback`]; the finalizer runs when that box is
//! dropped (after the callback ran, when it is removed, or when the signal
//! dies unaborted). The core never runs or drops a callback under its
//! signal lock (`core/src/signal.rs`), and runs the callbacks of signals
//! the heartbeat engine trips on its notifier thread (`mistri-notifier`,
//! `core/src/notify.rs`), never on a heartbeat thread; so no C code runs
//! under a library lock or can delay a renewal.

use crate::args::{c_string_lossy, try_out, try_str, wait_timeout};
use crate::handle::{free_box, to_boxed_mut_ptr, try_ref_from_ptr, Castable};
use crate::panic::{ffi_boundary, ffi_boundary_void};
use crate::status::{mistri_status, Failure};
use mistri_core::{AbortSignal, CallbackHandle};
use std::ffi::{c_char, c_void, CString};

/// A one-way "please stop" latch with a reason, that work loops check
/// cooperatively (`mistri_signal_aborted`, `mistri_signal_wait`).
///
/// A handle points at a signal; several handles (`mistri_signal_clone`,
/// `mistri_hold_signal`) may point at the same one. Aborting through any of
/// them aborts the signal. The signal lives while any handle or hold uses
/// it.
///
/// Ownership: made by `mistri_signal_new`, `mistri_signal_clone`,
/// `mistri_signal_derive` or `mistri_hold_signal`; each handle is freed by
/// `mistri_signal_free`.
///
/// Threading: thread-safe. Any number of threads may call any function on
/// the same handle at once (abort from one, wait in others), except
/// `mistri_signal_free`, which must be the last call on that handle.
pub struct mistri_signal {
    _private: [u8; 0],
}

impl Castable for mistri_signal {
    type RustType = AbortSignal;
}

/// A callback run once when a signal is aborted.
///
/// `userdata` is the pointer given to `mistri_signal_on_abort`; `reason` is
/// the abort reason, or NULL if it was aborted without one. `reason` is
/// valid only during the call (copy it to keep it).
///
/// It runs on the thread that aborts the signal: a thread calling
/// `mistri_signal_abort`; the library's notifier thread
/// (`mistri-notifier`) when a hold's stop flag is seen or its lease is lost
/// (never the heartbeat thread: the signal itself is already aborted, and
/// its waiters woken, before the callback runs); or the registering thread
/// if the signal was already aborted. No library lock is held while it
/// runs, so it may call any `mistri_*` function (including on this signal,
/// or `mistri_hold_release` on the hold that tripped it). A slow callback
/// delays other callbacks, never renewals.
pub type mistri_abort_callback =
    Option<unsafe extern "C" fn(userdata: *mut c_void, reason: *const c_char)>;

/// Releases a callback's `userdata` once the library no longer needs it.
/// Runs exactly once per successful `mistri_signal_on_abort`: right after
/// the callback ran, when the callback is removed, or when the signal is
/// destroyed (its last handle freed) without having been aborted. It runs
/// with no library lock held, on whichever thread caused one of those.
pub type mistri_userdata_finalizer = Option<unsafe extern "C" fn(userdata: *mut c_void)>;

/// A registered C callback. Dropping it runs the finalizer.
struct CCallback {
    callback: unsafe extern "C" fn(*mut c_void, *const c_char),
    finalizer: mistri_userdata_finalizer,
    /// The caller's `userdata`, kept as an address: this library never
    /// dereferences it, only hands it back to the caller's functions, and
    /// `mistri_signal_on_abort` documents that they may be called from
    /// another thread (the C side of the `Send` the core asks for).
    userdata: usize,
}

impl CCallback {
    fn run(self, reason: Option<&str>) {
        let reason = reason.map(c_string_lossy);
        let reason_ptr = reason.as_ref().map_or(std::ptr::null(), |r| r.as_ptr());
        // SAFETY: the caller of mistri_signal_on_abort gave a valid function
        // for this userdata; `reason_ptr` is NULL or a C string that lives
        // until after the call.
        unsafe { (self.callback)(self.userdata as *mut c_void, reason_ptr) };
        // `self` drops here: the finalizer runs right after the callback.
    }
}

impl Drop for CCallback {
    fn drop(&mut self) {
        if let Some(finalizer) = self.finalizer {
            // SAFETY: the finalizer the caller registered for this userdata;
            // it runs exactly once (this is the only drop of the callback).
            unsafe { finalizer(self.userdata as *mut c_void) };
        }
    }
}

/// Makes a new signal, not aborted.
///
/// On `MISTRI_OK`, `*out` receives a new handle; free it with
/// `mistri_signal_free`.
///
/// # Safety
/// `out` is NULL (an error) or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_signal_new(out: *mut *mut mistri_signal) -> mistri_status {
    ffi_boundary!("mistri_signal_new", {
        try_out!(out).write(to_boxed_mut_ptr(AbortSignal::new()))
    })
}

/// Makes another handle to the same signal (e.g. to give one to another
/// thread that frees it on its own schedule).
///
/// On `MISTRI_OK`, `*out` receives a new handle; free it with
/// `mistri_signal_free`.
///
/// # Safety
/// `signal` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_signal_clone(
    signal: *const mistri_signal,
    out: *mut *mut mistri_signal,
) -> mistri_status {
    ffi_boundary!("mistri_signal_clone", {
        let out = try_out!(out);
        out.write(to_boxed_mut_ptr(try_ref_from_ptr!(signal).clone()))
    })
}

/// Makes a child signal: it is aborted (with the parent's reason) when
/// `parent` is, but aborting the child leaves the parent alone. A child
/// made from an aborted parent starts aborted.
///
/// On `MISTRI_OK`, `*out` receives a new handle; free it with
/// `mistri_signal_free`.
///
/// # Safety
/// `parent` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_signal_derive(
    parent: *const mistri_signal,
    out: *mut *mut mistri_signal,
) -> mistri_status {
    ffi_boundary!("mistri_signal_derive", {
        let out = try_out!(out);
        out.write(to_boxed_mut_ptr(try_ref_from_ptr!(parent).derive()))
    })
}

/// Frees a signal handle. NULL is ignored.
///
/// The signal itself lives on while other handles or holds use it. When
/// the last one goes and the signal was never aborted, the finalizers of
/// its pending callbacks run (on this thread); the callbacks do not.
///
/// # Safety
/// `signal` is NULL or a live handle that no other thread is using; it must
/// not be used again.
#[no_mangle]
pub unsafe extern "C" fn mistri_signal_free(signal: *mut mistri_signal) {
    ffi_boundary_void!("mistri_signal_free", {
        // SAFETY: per this function's contract, `signal` is NULL or a handle
        // given back exactly once.
        unsafe { free_box(signal) }
    })
}

/// Aborts the signal with `reason` (NULL: no reason). The first abort wins:
/// later aborts change nothing, not even the reason.
///
/// Callbacks run on this thread before this returns, then derived children
/// are aborted with the same reason.
///
/// On `MISTRI_OK`, if `tripped` is not NULL, `*tripped` is `true` if this
/// call aborted the signal, `false` if it was aborted already.
///
/// Errors: `MISTRI_INVALID_UTF8` (reason).
///
/// # Safety
/// `signal` is NULL or a live handle; `reason` is NULL or a NUL-terminated
/// string; `tripped` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_signal_abort(
    signal: *const mistri_signal,
    reason: *const c_char,
    tripped: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_signal_abort", {
        let tripped_out = try_out!(opt tripped);
        let did = try_ref_from_ptr!(signal).abort(try_str!(opt reason));
        tripped_out.map_or(Ok(()), |out| out.write(did))
    })
}

/// Has the signal been aborted?
///
/// On `MISTRI_OK`, `*aborted` says so.
///
/// # Safety
/// `signal` is NULL or a live handle; `aborted` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_signal_aborted(
    signal: *const mistri_signal,
    aborted: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_signal_aborted", {
        let out = try_out!(aborted);
        out.write(try_ref_from_ptr!(signal).is_aborted())
    })
}

/// The reason given to the first abort.
///
/// On `MISTRI_OK`, `*reason` receives a new NUL-terminated copy that the
/// caller owns and frees with `mistri_string_free`, or NULL if the signal
/// is not aborted or was aborted without a reason. (A reason containing a
/// NUL byte is cut there.)
///
/// # Safety
/// `signal` is NULL or a live handle; `reason` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_signal_reason(
    signal: *const mistri_signal,
    reason: *mut *mut c_char,
) -> mistri_status {
    ffi_boundary!("mistri_signal_reason", {
        let out = try_out!(reason);
        let got = try_ref_from_ptr!(signal).reason();
        out.write(got.map_or(std::ptr::null_mut(), |r| c_string_lossy(&r).into_raw()))
    })
}

/// Frees a string returned by this library (`mistri_signal_reason`). NULL
/// is ignored.
///
/// # Safety
/// `string` is NULL or a string returned by this library and not freed yet;
/// never pass memory from `malloc` or a string literal.
#[no_mangle]
pub unsafe extern "C" fn mistri_string_free(string: *mut c_char) {
    ffi_boundary_void!("mistri_string_free", {
        if !string.is_null() {
            // SAFETY: made by CString::into_raw in this crate; given back
            // exactly once.
            drop(unsafe { CString::from_raw(string) });
        }
    })
}

/// Blocks until the signal is aborted or `timeout` seconds pass.
///
/// `timeout` is seconds as a double, by the rule every face shares: `0`
/// just looks; up to 1e9 waits that long; above 1e9 or `INFINITY` waits
/// without a timeout (as `mistri_signal_wait_forever`); NaN or negative is
/// `MISTRI_INVALID_ARGUMENT`.
///
/// On `MISTRI_OK`, `*aborted` is `true` if the signal is aborted, `false`
/// if the timeout passed first.
///
/// Threading: blocks only the calling thread; any number of threads may
/// wait on one signal. No library lock is held in a way that stops other
/// threads from aborting it.
///
/// # Safety
/// `signal` is NULL or a live handle that is not freed during the wait;
/// `aborted` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_signal_wait(
    signal: *const mistri_signal,
    timeout: f64,
    aborted: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_signal_wait", {
        let out = try_out!(aborted);
        let signal = try_ref_from_ptr!(signal);
        out.write(signal.wait(wait_timeout(timeout)?))
    })
}

/// Blocks until the signal is aborted, however long that takes. Returns
/// `MISTRI_OK` once it is.
///
/// # Safety
/// `signal` is NULL or a live handle that is not freed during the wait.
#[no_mangle]
pub unsafe extern "C" fn mistri_signal_wait_forever(signal: *const mistri_signal) -> mistri_status {
    ffi_boundary!("mistri_signal_wait_forever", {
        try_ref_from_ptr!(signal).wait(None);
        Ok(())
    })
}

/// Do two handles point at the same signal?
///
/// On `MISTRI_OK`, `*same` says so.
///
/// # Safety
/// `a` and `b` are NULL or live handles; `same` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_signal_same(
    a: *const mistri_signal,
    b: *const mistri_signal,
    same: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_signal_same", {
        let out = try_out!(same);
        out.write(try_ref_from_ptr!(a).same_as(try_ref_from_ptr!(b)))
    })
}

/// Registers `callback` to run once, with `userdata`, when the signal is
/// aborted. If it is aborted already, `callback` runs now, on this thread,
/// before this returns.
///
/// `finalizer` (may be NULL) runs exactly once when the library is done with
/// `userdata`: see `mistri_userdata_finalizer`. Ownership of `userdata`
/// passes to the library only on `MISTRI_OK`; on an error neither function
/// is ever called.
///
/// On `MISTRI_OK`, `*handle` receives a number for
/// `mistri_signal_remove_callback` (on a handle to the same signal).
///
/// Threading: `callback` and `finalizer` may run on another thread than
/// this one (see `mistri_abort_callback`): `userdata` must be usable there.
///
/// Errors: `MISTRI_NULL_ARGUMENT` (signal, callback, handle).
///
/// # Safety
/// `signal` is NULL or a live handle; `callback` and `finalizer` are NULL
/// or functions safe to call with `userdata` from any thread; `handle` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_signal_on_abort(
    signal: *const mistri_signal,
    callback: mistri_abort_callback,
    userdata: *mut c_void,
    finalizer: mistri_userdata_finalizer,
    handle: *mut u64,
) -> mistri_status {
    ffi_boundary!("mistri_signal_on_abort", {
        let out = try_out!(handle);
        let signal = try_ref_from_ptr!(signal);
        let registered = CCallback {
            callback: callback.ok_or(Failure::Null("callback"))?,
            finalizer,
            userdata: userdata as usize,
        };
        out.write(
            signal
                .on_abort(move |reason| registered.run(reason))
                .as_u64(),
        )
    })
}

/// Removes a callback that has not run yet; its finalizer runs (on this
/// thread, after the removal, with no library lock held).
///
/// On `MISTRI_OK`, if `removed` is not NULL, `*removed` is `true` if the
/// callback was pending and is now gone, `false` if it already ran, was
/// removed before, or `handle` is unknown. Callbacks already taken out by a
/// concurrent abort still run.
///
/// # Safety
/// `signal` is NULL or a live handle to the signal the callback was
/// registered on; `removed` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_signal_remove_callback(
    signal: *const mistri_signal,
    handle: u64,
    removed: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_signal_remove_callback", {
        let removed_out = try_out!(opt removed);
        // A removed callback is dropped (its finalizer runs) inside this call,
        // after the core let go of its lock.
        let did = try_ref_from_ptr!(signal).remove_callback(CallbackHandle::from_u64(handle));
        removed_out.map_or(Ok(()), |out| out.write(did))
    })
}
