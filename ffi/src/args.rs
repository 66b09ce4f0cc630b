//! Turning C arguments into Rust values, with a [`Failure`] instead of a
//! crash for every bad input: NULL pointers, non-UTF-8 strings, bad seconds.
//! Out-params are checked for NULL up front ([`Out`]) and written only at the
//! end of a successful call.

use crate::status::Failure;
use std::ffi::{c_char, CStr, CString};
use std::ptr::NonNull;
use std::time::Duration;

/// Borrows an optional NUL-terminated UTF-8 string (NULL gives `None`).
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn opt_str<'a>(
    ptr: *const c_char,
    what: &'static str,
) -> Result<Option<&'a str>, Failure> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL, and NUL-terminated and live per the contract.
    let cstr = unsafe { CStr::from_ptr(ptr) };
    cstr.to_str()
        .map(Some)
        .map_err(|e| Failure::Utf8(what, e.valid_up_to()))
}

/// `try_str!(arg)`: the `&str` in the required C string argument `arg`
/// (NULL: `MISTRI_NULL_ARGUMENT`; not UTF-8: `MISTRI_INVALID_UTF8`).
/// `try_str!(arg, "name")` names it differently in messages.
/// `try_str!(opt arg)` makes NULL `None` instead of an error.
macro_rules! try_str {
    (opt $ptr:ident) => {
        $crate::args::try_str!(opt $ptr, stringify!($ptr))
    };
    (opt $ptr:ident, $what:expr) => {{
        let ptr = $ptr;
        // SAFETY: the exported function's contract: `ptr` is NULL or a
        // NUL-terminated string that lives through the call.
        unsafe { $crate::args::opt_str(ptr, $what) }?
    }};
    ($ptr:ident) => {
        $crate::args::try_str!(opt $ptr)
            .ok_or($crate::status::Failure::Null(stringify!($ptr)))?
    };
}
pub(crate) use try_str;

/// A checked out-param: written once, at the end of a successful call.
pub(crate) struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    /// A required out-param (NULL: a failure naming `what`).
    ///
    /// # Safety
    /// `ptr` is NULL or points to writable, aligned memory for a `T` that
    /// stays so until [`Out::write`] (the C caller's promise for every
    /// out-param, for the length of the call).
    pub(crate) unsafe fn required(ptr: *mut T, what: &'static str) -> Result<Self, Failure> {
        NonNull::new(ptr).map(Out).ok_or(Failure::Null(what))
    }

    /// An out-param documented "if not NULL".
    ///
    /// # Safety
    /// As [`Out::required`].
    pub(crate) unsafe fn optional(ptr: *mut T) -> Option<Self> {
        NonNull::new(ptr).map(Out)
    }

    /// Writes the result; the call then succeeds.
    pub(crate) fn write(self, value: T) -> Result<(), Failure> {
        // SAFETY: writable and aligned, promised when this was made;
        // `write` does not drop the (possibly uninitialised) old contents.
        unsafe { self.0.as_ptr().write(value) };
        Ok(())
    }
}

/// `try_out!(arg)`: the required out-param `arg` as an [`Out`], or
/// `return`s `MISTRI_NULL_ARGUMENT`; `try_out!(opt arg)`: an
/// `Option<Out>` for an out-param that may be NULL.
macro_rules! try_out {
    (opt $ptr:ident) => {{
        let ptr = $ptr;
        // SAFETY: the exported function's contract: `ptr` is NULL or
        // writable for the call.
        unsafe { $crate::args::Out::optional(ptr) }
    }};
    ($ptr:ident) => {{
        let ptr = $ptr;
        // SAFETY: as above.
        unsafe { $crate::args::Out::required(ptr, stringify!($ptr)) }?
    }};
}
pub(crate) use try_out;

/// Seconds from C as a ttl, heartbeat or margin, by the core's one rule
/// (`duration_from_secs`: NaN, infinite, zero, negative, huge: an error).
pub(crate) fn secs(what: &str, value: f64) -> Result<Duration, Failure> {
    Ok(mistri_core::duration_from_secs(what, value)?)
}

/// Seconds from C as a wait timeout, by the core's one rule for every face
/// (`wait_timeout_from_secs`): NaN or negative is an error, 0 just looks,
/// up to 1e9 is that long, above 1e9 or +inf is `None` (no timeout).
pub(crate) fn wait_timeout(value: f64) -> Result<Option<Duration>, Failure> {
    Ok(mistri_core::wait_timeout_from_secs("timeout", value)?)
}

/// Seconds from C as how long an acquire or hold waits for a lease held
/// elsewhere, by the wait-timeout rule (named `wait`): 0 tries once, up to
/// 1e9 is that long, above 1e9 or +inf waits without limit
/// (`Duration::MAX`); NaN or negative is an error.
pub(crate) fn wait(value: f64) -> Result<Duration, Failure> {
    Ok(mistri_core::wait_timeout_from_secs("wait", value)?.unwrap_or(Duration::MAX))
}

/// The number of holders of an N-holder lease: 1 to `MISTRI_MAX_LIMIT`,
/// with the message every face gives.
pub(crate) fn limit(value: u32) -> Result<u32, Failure> {
    if value == 0 || value > mistri_core::MAX_LIMIT {
        return Err(Failure::Core(mistri_core::Error::InvalidArgument(format!(
            "limit must be between 1 and {}, got {value}",
            mistri_core::MAX_LIMIT
        ))));
    }
    Ok(value)
}

/// A C string from Rust text, cutting at an interior NUL if there is one (C
/// could not see past it anyway).
pub(crate) fn c_string_lossy(text: &str) -> CString {
    let end = text.find('\0').unwrap_or(text.len());
    CString::new(&text[..end]).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mistri_core::Error;

    #[test]
    fn timeouts_follow_the_core_rule() {
        assert_eq!(wait_timeout(0.0).unwrap(), Some(Duration::ZERO));
        assert_eq!(wait_timeout(-0.0).unwrap(), Some(Duration::ZERO));
        assert_eq!(
            wait_timeout(0.25).unwrap(),
            Some(Duration::from_millis(250))
        );
        assert_eq!(wait_timeout(f64::INFINITY).unwrap(), None);
        assert_eq!(wait_timeout(2e9).unwrap(), None);
        for bad in [f64::NAN, -1.0, f64::NEG_INFINITY] {
            let err = wait_timeout(bad).unwrap_err();
            assert!(
                matches!(err, Failure::Core(Error::InvalidArgument(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn strings_with_nul_are_cut() {
        assert_eq!(c_string_lossy("ab\0cd").as_bytes(), b"ab");
    }
}
