//! Turning C arguments into Rust values, with a [`Failure`] instead of a
//! crash for every bad input: NULL pointers, non-UTF-8 strings, bad seconds.
//! Out-params are checked for NULL up front and written only at the end of a
//! successful call.

use crate::status::Failure;
use mistri_core::{duration_from_secs, Error};
use std::ffi::{c_char, CStr, CString};
use std::ptr::NonNull;
use std::time::Duration;

/// Borrows the handle behind `ptr`, or fails if it is NULL.
///
/// # Safety
/// `ptr` is NULL or points to a live `T` that outlives `'a` and that no one
/// mutates meanwhile (the C caller's side of the handle contract).
pub(crate) unsafe fn arg_ref<'a, T>(ptr: *const T, what: &'static str) -> Result<&'a T, Failure> {
    // SAFETY: forwarded from this function's contract.
    unsafe { ptr.as_ref() }.ok_or(Failure::Null(what))
}

/// Borrows a required NUL-terminated UTF-8 string.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn arg_str<'a>(
    ptr: *const c_char,
    what: &'static str,
) -> Result<&'a str, Failure> {
    // SAFETY: forwarded from this function's contract.
    unsafe { arg_opt_str(ptr, what) }?.ok_or(Failure::Null(what))
}

/// Borrows an optional NUL-terminated UTF-8 string (NULL gives `None`).
///
/// # Safety
/// As [`arg_str`].
pub(crate) unsafe fn arg_opt_str<'a>(
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

/// A required out-param, checked before any work is done.
pub(crate) fn out_ptr<T>(ptr: *mut T, what: &'static str) -> Result<NonNull<T>, Failure> {
    NonNull::new(ptr).ok_or(Failure::Null(what))
}

/// Writes a result into a checked out-param.
///
/// # Safety
/// `out` points to writable, aligned memory for a `T` (the C caller's
/// promise for every out-param).
pub(crate) unsafe fn write_out<T>(out: NonNull<T>, value: T) {
    // SAFETY: forwarded from this function's contract; `write` does not
    // drop the (possibly uninitialised) old contents.
    unsafe { out.as_ptr().write(value) }
}

/// Seconds from C as a ttl or heartbeat, validated by the core's
/// `duration_from_secs` (NaN, infinite, zero, negative, huge: an error).
pub(crate) fn secs(what: &str, value: f64) -> Result<Duration, Failure> {
    Ok(duration_from_secs(what, value)?)
}

/// Seconds from C as a wait timeout: like [`secs`], except that zero is
/// allowed and means "just look".
pub(crate) fn timeout_secs(value: f64) -> Result<Duration, Failure> {
    if value == 0.0 {
        return Ok(Duration::ZERO);
    }
    if value.is_infinite() && value > 0.0 {
        return Err(Error::InvalidArgument(
            "timeout must be finite; use mistri_signal_wait_forever to wait without one".into(),
        )
        .into());
    }
    secs("timeout", value)
}

/// A C string from Rust text, cutting at an interior NUL if there is one (C
/// could not see past it anyway).
pub(crate) fn c_string_lossy(text: &str) -> CString {
    let end = text.find('\0').unwrap_or(text.len());
    CString::new(&text[..end]).unwrap_or_default()
}

/// A C string from a message, showing interior NULs as `\0`.
pub(crate) fn sanitize_nul(text: String) -> CString {
    CString::new(text).unwrap_or_else(|e| {
        let text = String::from_utf8_lossy(&e.into_vec()).replace('\0', "\\0");
        CString::new(text).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_allow_zero_but_not_nan_negative_or_infinite() {
        assert_eq!(timeout_secs(0.0).unwrap(), Duration::ZERO);
        assert_eq!(timeout_secs(-0.0).unwrap(), Duration::ZERO);
        assert_eq!(timeout_secs(0.25).unwrap(), Duration::from_millis(250));
        for bad in [f64::NAN, -1.0, f64::INFINITY, f64::NEG_INFINITY, 2e9] {
            let err = timeout_secs(bad).unwrap_err();
            assert!(
                matches!(err, Failure::Core(Error::InvalidArgument(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn strings_with_nul_stay_readable() {
        assert_eq!(c_string_lossy("ab\0cd").as_bytes(), b"ab");
        assert_eq!(sanitize_nul("a\0b".into()).as_bytes(), b"a\\0b");
    }
}
