//! The one way this extension blocks: without the GVL, interruptibly.
//!
//! [`nogvl`] runs a closure with the GVL released, so other Ruby threads run
//! meanwhile. Ruby may want the thread back (`Thread#raise`, `Thread#kill`,
//! `Timeout.timeout`, a signal such as SIGINT, VM shutdown): it then calls
//! the *unblock function* from another thread, which must make the closure
//! return soon (for signal waits: `AbortSignal::wake_waiters`). Callers that
//! wait in a loop then call `ruby.thread_check_ints()` (raising whatever is
//! pending) and wait again.
//!
//! A Redis round trip cannot be cut short this way (its unblock function
//! does nothing); it is bounded by the core's 5 s socket timeout, after
//! which the interrupt is processed.
//!
//! Rules for closures: they run without the GVL, so they must not touch
//! any Ruby object or allocate Ruby memory. Convert arguments first. Panics
//! in the closure or in the unblock function are caught (unwinding into
//! Ruby's C frames would be undefined behaviour) and reported as
//! `MistriLocks::Error`.

use crate::error;
use magnus::{Error, Ruby};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;

struct Call<F, R> {
    work: Option<F>,
    result: Option<std::thread::Result<R>>,
}

unsafe extern "C" fn run_work<F: FnOnce() -> R, R>(data: *mut c_void) -> *mut c_void {
    // SAFETY: `data` is the `&mut Call<F, R>` that `nogvl` passed, alive on
    // its stack until `rb_thread_call_without_gvl2` returns; only this
    // function touches it meanwhile.
    let call = unsafe { &mut *data.cast::<Call<F, R>>() };
    if let Some(work) = call.work.take() {
        call.result = Some(catch_unwind(AssertUnwindSafe(work)));
    }
    null_mut()
}

unsafe extern "C" fn run_unblock<U: Fn()>(data: *mut c_void) {
    // SAFETY: `data` is the `&U` that `nogvl` passed, alive on its stack
    // until `rb_thread_call_without_gvl2` returns (Ruby calls the unblock
    // function only while the blocking region is active); `U: Fn` is only
    // read.
    let unblock = unsafe { &*data.cast::<U>() };
    let _ = catch_unwind(AssertUnwindSafe(unblock));
}

/// Runs `work` without the GVL; `unblock` (called from another thread, with
/// or without the GVL, never touching Ruby) must make `work` return soon.
///
/// Ruby skips `work` when an interrupt is already pending: then the
/// interrupt is processed (raising if it is an exception, a kill or a
/// signal's exception) and `work` is tried again.
///
/// # Errors
/// A pending interrupt's exception; `MistriLocks::Error` if `work`
/// panicked.
pub fn nogvl<F, R, U>(ruby: &Ruby, work: F, unblock: U) -> Result<R, Error>
where
    F: FnOnce() -> R,
    U: Fn(),
{
    let mut call = Call {
        work: Some(work),
        result: None,
    };
    loop {
        // SAFETY: both pointers point at locals that outlive the call; the
        // function pointers are instantiated for exactly their types. We
        // hold the GVL here, as rb_thread_call_without_gvl2 requires, and
        // `work` does not touch Ruby (see the module's rules).
        unsafe {
            rb_sys::rb_thread_call_without_gvl2(
                Some(run_work::<F, R>),
                (&mut call as *mut Call<F, R>).cast(),
                Some(run_unblock::<U>),
                (&unblock as *const U).cast_mut().cast(),
            );
        }
        match call.result.take() {
            Some(Ok(r)) => return Ok(r),
            Some(Err(panic)) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_owned());
                return Err(error::base(
                    ruby,
                    format!("mistri_locks internal error (panic): {what}"),
                ));
            }
            // Not run: an interrupt was pending. Process it, then retry.
            None => ruby.thread_check_ints()?,
        }
    }
}

/// An unblock function for work that can't be interrupted (a Redis round
/// trip, bounded by the socket timeout).
pub fn uninterruptible() {}
