//! The panic boundary. Every exported function runs its body through one of
//! the macros below: a panic is caught with `catch_unwind` and becomes
//! `MISTRI_PANIC` (or the function's fallback value) plus a last-error
//! message, so no unwind ever crosses into C (undefined behaviour) and
//! nothing aborts the host.
//!
//! Why `AssertUnwindSafe` is sound here: after a panic nothing of the body's
//! state is used again, and the core's shared state is behind locks that
//! either ignore poisoning (`core/src/sync.rs`, whose critical sections leave
//! the state consistent before anything that could panic) or never poison
//! (parking_lot).

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
        $crate::panic::guard_or($name, move || $body, || ())
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
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return mistri_status::MISTRI_OK,
        Ok(Err(failure)) => failure,
        Err(payload) => Failure::Panic(panic_message(payload.as_ref())),
    };
    set_last_error(name, &failure);
    failure.status()
}

/// The function behind [`ffi_boundary_or!`] and [`ffi_boundary_void!`].
pub(crate) fn guard_or<T, F, G>(name: &str, body: F, fallback: G) -> T
where
    F: FnOnce() -> T,
    G: FnOnce() -> T,
{
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        set_last_error(name, &Failure::Panic(panic_message(payload.as_ref())));
        fallback()
    })
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

    fn last_error() -> String {
        // SAFETY: mistri_last_error never returns NULL; read before any
        // other call on this thread.
        unsafe { CStr::from_ptr(crate::mistri_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let status = ffi_boundary!("mistri_test", {
            if std::hint::black_box(true) {
                panic!("boom");
            }
            Ok(())
        });
        assert_eq!(status, mistri_status::MISTRI_PANIC);
        let msg = last_error();
        assert!(msg.starts_with("mistri_test: panic"), "{msg}");
        assert!(msg.ends_with("boom"), "{msg}");
        ffi_boundary_void!("mistri_test_void", {
            panic!("void boom");
        });
        assert!(last_error().ends_with("void boom"));
        let value = ffi_boundary_or!("mistri_test_or", 7, {
            if std::hint::black_box(true) {
                panic!("value boom");
            }
            1
        });
        assert_eq!(value, 7);
        assert!(last_error().ends_with("value boom"));
    }
}
