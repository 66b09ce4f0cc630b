//! The one way this extension blocks: without the GVL, interruptibly.
//!
//! [`nogvl`] runs a closure with the GVL released, so other Ruby threads run
//! meanwhile. Ruby may want the thread back (`Thread#raise`, `Thread#kill`,
//! `Timeout.timeout`, a signal such as SIGINT, VM shutdown): it then calls
//! the *unblock function* from another thread, which must make the closure
//! return soon. [`wait`] is the one loop that does this (signal waits, the
//! delivery thread's wait); [`nogvl`] runs bounded work with no unblock
//! function at all (a Redis round trip is bounded by the core's 5 s socket
//! timeout, after which the interrupt is processed).
//!
//! Rules for closures: they run without the GVL, so they must not touch
//! any Ruby object or allocate Ruby memory. Convert arguments first. Panics
//! in the closure or in the unblock function are caught (unwinding into
//! Ruby's C frames would be undefined behaviour) and reported as
//! `MistriLocks::Error`.

use crate::error;
use magnus::{Error, Ruby};
use mistri_locks::WakeToken;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;

struct Call<F, R> {
    work: Option<F>,
    result: Option<std::thread::Result<R>>,
}

unsafe extern "C" fn run_work<F: FnOnce() -> R, R>(data: *mut c_void) -> *mut c_void {
    // SAFETY: `data` is the `&mut Call<F, R>` that `call` passed, alive on
    // its stack until `rb_thread_call_without_gvl2` returns; only this
    // function touches it meanwhile.
    let call = unsafe { &mut *data.cast::<Call<F, R>>() };
    if let Some(work) = call.work.take() {
        call.result = Some(catch_unwind(AssertUnwindSafe(work)));
    }
    null_mut()
}

unsafe extern "C" fn run_unblock<U: Fn()>(data: *mut c_void) {
    // SAFETY: `data` is the `&U` that `call` passed, alive on its stack
    // until `rb_thread_call_without_gvl2` returns (Ruby calls the unblock
    // function only while the blocking region is active); `U: Fn` is only
    // read.
    let unblock = unsafe { &*data.cast::<U>() };
    let _ = catch_unwind(AssertUnwindSafe(unblock));
}

/// Runs `work` without the GVL and with no unblock function: for bounded
/// work that can't be cut short (a Redis round trip, bounded by the socket
/// timeout; an SQLite transaction, by the busy timeout). An interrupt that
/// arrives meanwhile is raised when `work` returns.
///
/// No unblock function on purpose: with one, Ruby 3.1's main thread starts
/// and stops a helper thread around every call (about 14 context switches),
/// which would double the cost of a round trip.
///
/// # Errors
/// A pending interrupt's exception; `MistriLocks::Error` if `work`
/// panicked.
pub fn nogvl<F, R>(ruby: &Ruby, work: F) -> Result<R, Error>
where
    F: FnOnce() -> R,
{
    call(ruby, work, None::<&fn()>)
}

/// The one interruptible wait of this extension: loops until `wait`
/// returns `Some`, running it without the GVL with `wake` as the unblock
/// function, and processing interrupts (`Thread#raise`, `Timeout.timeout`,
/// Ctrl-C, `Thread#kill`) between rounds.
///
/// `token` is read with the GVL held, *before* the GVL is released, and
/// `wait(token)` returns `None` once `wake` has run since that read (the
/// core's wake tokens: `AbortSignal::wake_token`,
/// `mistri_locks::delivery::wake_token`). Ruby may call the unblock
/// function the moment it releases the GVL, before `wait` starts: a wake
/// counted after the token was read is still seen, so no interrupt is lost.
///
/// # Errors
/// A pending interrupt's exception; `MistriLocks::Error` on a panic.
pub fn wait<T>(
    ruby: &Ruby,
    token: impl Fn() -> WakeToken,
    wait: impl Fn(WakeToken) -> Option<T>,
    wake: impl Fn(),
) -> Result<T, Error> {
    loop {
        let since = token();
        if let Some(done) = call(ruby, || wait(since), Some(&wake))? {
            return Ok(done);
        }
        ruby.thread_check_ints()?;
    }
}

fn call<F, R, U>(ruby: &Ruby, work: F, unblock: Option<&U>) -> Result<R, Error>
where
    F: FnOnce() -> R,
    U: Fn(),
{
    let mut call = Call {
        work: Some(work),
        result: None,
    };
    let (ubf, ubf_data) = match unblock {
        Some(u) => (
            Some(run_unblock::<U> as unsafe extern "C" fn(*mut c_void)),
            (u as *const U).cast_mut().cast(),
        ),
        None => (None, null_mut()),
    };
    loop {
        // SAFETY: both pointers point at locals (or a borrow) that outlive
        // the call; the function pointers are instantiated for exactly
        // their types. We hold the GVL here, as
        // rb_thread_call_without_gvl2 requires, and `work` does not touch
        // Ruby (see the module's rules).
        unsafe {
            rb_sys::rb_thread_call_without_gvl2(
                Some(run_work::<F, R>),
                (&mut call as *mut Call<F, R>).cast(),
                ubf,
                ubf_data,
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
