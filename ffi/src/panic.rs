//! The panic boundary. Every exported function runs its body through
//! [`ffi_boundary!`]: a panic is caught with `catch_unwind` and becomes
//! `MISTRI_PANIC` plus a last-error message, so no unwind ever crosses into
//! C (which would be undefined behaviour) and nothing aborts the host.

use crate::status::{mistri_status, set_last_error, Failure};
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs an exported function's body (a block evaluating to
/// `Result<(), Failure>`) behind the panic boundary and turns the outcome
/// into a [`mistri_status`], recording failures as the thread's last error.
///
/// `ffi_boundary!("mistri_x", { ...; Ok(()) })`
macro_rules! ffi_boundary {
    ($name:literal, $body:block) => {
        $crate::panic::guard($name, move || -> Result<(), $crate::status::Failure> {
            $body
        })
    };
}
pub(crate) use ffi_boundary;

/// Like [`ffi_boundary!`] for functions that return nothing (`_free`): a
/// panic is recorded as the last error and otherwise swallowed.
macro_rules! ffi_boundary_void {
    ($name:literal, $body:block) => {
        $crate::panic::guard_void($name, move || $body)
    };
}
pub(crate) use ffi_boundary_void;

/// Like [`ffi_boundary!`] for the few functions that return a value rather
/// than a status (`mistri_version`, `mistri_last_error`, ...): a panic is
/// recorded as the last error and `$fallback` is returned instead.
macro_rules! ffi_boundary_or {
    ($name:literal, $fallback:expr, $body:block) => {
        $crate::panic::guard_or($name, move || $body, move || $fallback)
    };
}
pub(crate) use ffi_boundary_or;

/// The function behind [`ffi_boundary!`].
pub(crate) fn guard<F>(name: &str, body: F) -> mistri_status
where
    F: FnOnce() -> Result<(), Failure>,
{
    // AssertUnwindSafe: after a panic nothing of the body's state is used
    // again; the core's own state is behind locks that do not poison
    // (parking_lot) and stays consistent.
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return mistri_status::MISTRI_OK,
        Ok(Err(failure)) => failure,
        Err(payload) => Failure::Panic(panic_message(payload.as_ref())),
    };
    set_last_error(name, &failure);
    failure.status()
}

/// The function behind [`ffi_boundary_void!`].
pub(crate) fn guard_void<F: FnOnce()>(name: &str, body: F) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(body)) {
        set_last_error(name, &Failure::Panic(panic_message(payload.as_ref())));
    }
}

/// The function behind [`ffi_boundary_or!`].
pub(crate) fn guard_or<T, F, G>(name: &str, body: F, fallback: G) -> T
where
    F: FnOnce() -> T,
    G: FnOnce() -> T,
{
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(payload) => {
            set_last_error(name, &Failure::Panic(panic_message(payload.as_ref())));
            fallback()
        }
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let status = ffi_boundary!("mistri_test", {
            if std::hint::black_box(true) {
                panic!("boom");
            }
            Ok(())
        });
        assert_eq!(status, mistri_status::MISTRI_PANIC);
        // SAFETY: never NULL; read before any other call on this thread.
        let msg = unsafe { CStr::from_ptr(crate::status::mistri_last_error()) };
        let msg = msg.to_str().unwrap();
        assert!(msg.starts_with("mistri_test: panic"), "{msg}");
        assert!(msg.ends_with("boom"), "{msg}");
        ffi_boundary_void!("mistri_test_void", {
            panic!("void boom");
        });
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(crate::status::mistri_last_error()) };
        assert!(msg.to_str().unwrap().ends_with("void boom"));
        let value = ffi_boundary_or!("mistri_test_or", 7, {
            if std::hint::black_box(true) {
                panic!("value boom");
            }
            1
        });
        assert_eq!(value, 7);
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(crate::status::mistri_last_error()) };
        assert!(msg.to_str().unwrap().ends_with("value boom"));
    }
}
