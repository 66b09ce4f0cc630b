//! The status enum, the internal failure type, and the per-thread message of
//! the last error. A leaf: it uses nothing else of this crate.
//!
//! Every core error is mapped to a status in ONE function,
//! [`status_of_core`]; argument failures detected by this layer (NULL,
//! non-UTF-8) have their own statuses. The exported readers
//! (`mistri_last_error`, `mistri_status_name`) live in `lib.rs`, behind the
//! panic boundary.

use mistri_core::Error;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};

/// What a call did. Every fallible function returns one.
///
/// `MISTRI_OK` (0) is success. Errors count up from 7000; a number is never
/// reused for another meaning, and new errors get new numbers.
///
/// A *refusal* is not an error: when a lease is held elsewhere, or a renew or
/// release finds the lease is not this owner's, the call returns `MISTRI_OK`
/// and says so through its out-param (`false`, or a NULL hold).
///
/// After an error, `mistri_last_error()` describes it in words, and the
/// call's out-params are left untouched.
#[repr(C)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum mistri_status {
    /// Success. Out-params are written (a refusal is a success too).
    MISTRI_OK = 0,
    /// A required pointer argument (handle, string or out-param) was NULL.
    MISTRI_NULL_ARGUMENT = 7000,
    /// A string argument was not valid UTF-8.
    MISTRI_INVALID_UTF8 = 7001,
    /// An argument broke the contract: an empty key; a ttl, heartbeat or
    /// safety margin that is NaN, infinite, zero, negative or larger than
    /// 1e9 seconds; a NaN or negative timeout; a safety margin not below
    /// half the ttl; a bad namespace.
    MISTRI_INVALID_ARGUMENT = 7002,
    /// The handle could not be set up as asked: an unparsable Redis URL,
    /// TLS setup, an authentication refusal.
    MISTRI_CONFIG = 7003,
    /// The backend could not be reached or stopped answering (connection
    /// refused, reset, timed out). Retrying later may succeed.
    MISTRI_CONNECTION = 7004,
    /// The backend answered with an error.
    MISTRI_BACKEND = 7005,
    /// The operating system refused something the library needs (a thread,
    /// random bytes).
    MISTRI_SYSTEM = 7006,
    /// A bug: Rust code panicked inside the call. The panic was stopped at
    /// the boundary; the message says where. Please report it.
    MISTRI_PANIC = 7007,
    /// An error kind added to the core after this library was built.
    MISTRI_OTHER_ERROR = 7008,
}

/// Every status with its name, in number order.
const NAMES: [(mistri_status, &[u8]); 10] = {
    use mistri_status::*;
    [
        (MISTRI_OK, b"MISTRI_OK\0"),
        (MISTRI_NULL_ARGUMENT, b"MISTRI_NULL_ARGUMENT\0"),
        (MISTRI_INVALID_UTF8, b"MISTRI_INVALID_UTF8\0"),
        (MISTRI_INVALID_ARGUMENT, b"MISTRI_INVALID_ARGUMENT\0"),
        (MISTRI_CONFIG, b"MISTRI_CONFIG\0"),
        (MISTRI_CONNECTION, b"MISTRI_CONNECTION\0"),
        (MISTRI_BACKEND, b"MISTRI_BACKEND\0"),
        (MISTRI_SYSTEM, b"MISTRI_SYSTEM\0"),
        (MISTRI_PANIC, b"MISTRI_PANIC\0"),
        (MISTRI_OTHER_ERROR, b"MISTRI_OTHER_ERROR\0"),
    ]
};

/// The NUL-terminated name of a status number. Compared as numbers: C may
/// pass any int, and turning an arbitrary int into a Rust enum would be
/// undefined behaviour.
pub(crate) fn status_name(status: c_int) -> &'static [u8] {
    NAMES
        .iter()
        .find(|(s, _)| *s as c_int == status)
        .map_or(b"MISTRI_UNKNOWN_STATUS\0", |(_, name)| name)
}

/// Maps a core error to its status. The one place that does.
pub(crate) fn status_of_core(err: &Error) -> mistri_status {
    use mistri_status::*;
    match err {
        // C has no type errors: a value of the wrong kind is a bad argument.
        Error::InvalidArgument(_) | Error::WrongType(_) => MISTRI_INVALID_ARGUMENT,
        Error::Config(_) => MISTRI_CONFIG,
        Error::Connection(_) => MISTRI_CONNECTION,
        Error::Backend(_) => MISTRI_BACKEND,
        Error::System(_) => MISTRI_SYSTEM,
        // `Error` is #[non_exhaustive]; a new kind still gets a distinct,
        // documented status instead of being folded into another one.
        _ => MISTRI_OTHER_ERROR,
    }
}

/// Why a call failed, before it becomes a status and a message.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The named pointer argument was NULL.
    Null(&'static str),
    /// The named string argument is not UTF-8 (valid up to this byte).
    Utf8(&'static str, usize),
    /// The core (or this layer, in the core's terms) refused.
    Core(Error),
    /// A panic stopped at the boundary, with its message.
    Panic(String),
}

impl From<Error> for Failure {
    fn from(err: Error) -> Self {
        Failure::Core(err)
    }
}

impl Failure {
    pub(crate) fn status(&self) -> mistri_status {
        match self {
            Failure::Null(_) => mistri_status::MISTRI_NULL_ARGUMENT,
            Failure::Utf8(..) => mistri_status::MISTRI_INVALID_UTF8,
            Failure::Core(err) => status_of_core(err),
            Failure::Panic(_) => mistri_status::MISTRI_PANIC,
        }
    }

    pub(crate) fn message(&self) -> String {
        match self {
            Failure::Null(what) => format!("null argument: {what} must not be NULL"),
            Failure::Utf8(what, at) => {
                format!("invalid UTF-8: {what} is not valid UTF-8 (bad byte at offset {at})")
            }
            Failure::Core(err) => err.to_string(),
            Failure::Panic(msg) => format!("panic (a bug in mistri_locks, please report): {msg}"),
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Records `failure` of `function` as this thread's last error.
pub(crate) fn set_last_error(function: &str, failure: &Failure) {
    let text = sanitize_nul(format!("{function}: {}", failure.message()));
    // During thread teardown the slot may be gone; the status still tells.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = Some(text);
        }
    });
}

/// This thread's last error message, or `None` if there is none (or the
/// slot is gone during thread teardown). The pointer lives until the next
/// failure recorded on this thread.
pub(crate) fn last_error_ptr() -> Option<*const c_char> {
    LAST_ERROR
        .try_with(|slot| match slot.try_borrow() {
            Ok(slot) => slot.as_ref().map(|s| s.as_ptr()),
            Err(_) => None,
        })
        .ok()
        .flatten()
}

/// A C string from a message, showing interior NULs as `\0`.
fn sanitize_nul(text: String) -> CString {
    CString::new(text).unwrap_or_else(|e| {
        let text = String::from_utf8_lossy(&e.into_vec()).replace('\0', "\\0");
        CString::new(text).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn name(status: c_int) -> String {
        CStr::from_bytes_with_nul(status_name(status))
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    fn last() -> String {
        // SAFETY: a NUL-terminated string owned by this thread's slot, read
        // before anything else is recorded on this thread.
        last_error_ptr().map_or(String::new(), |p| {
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        })
    }

    #[test]
    fn every_status_has_its_own_number_and_name() {
        assert_eq!(name(0), "MISTRI_OK");
        assert_eq!(name(7004), "MISTRI_CONNECTION");
        assert_eq!(name(7008), "MISTRI_OTHER_ERROR");
        assert_eq!(name(-1), "MISTRI_UNKNOWN_STATUS");
        assert_eq!(name(7009), "MISTRI_UNKNOWN_STATUS");
        let names: std::collections::HashSet<String> = (7000..7009).map(name).collect();
        assert_eq!(names.len(), 9);
    }

    #[test]
    fn last_error_is_per_thread() {
        set_last_error("f", &Failure::Null("key"));
        std::thread::spawn(|| assert_eq!(last(), ""))
            .join()
            .unwrap();
        assert_eq!(last(), "f: null argument: key must not be NULL");
    }

    #[test]
    fn messages_with_nul_stay_readable() {
        assert_eq!(sanitize_nul("a\0b".into()).as_bytes(), b"a\\0b");
    }
}
