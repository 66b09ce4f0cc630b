//! The Prometheus text of a `mistri_locks` handle's counters, for C: the
//! core's `operator::stats_prometheus` (the same text every face serves),
//! copied into a caller's buffer the way `snprintf` sizes its output.

use crate::args::try_out;
use crate::handle::try_ref_from_ptr;
use crate::locks::mistri_locks;
use crate::panic::ffi_boundary;
use crate::status::{mistri_status, Failure};
use std::ffi::c_char;

/// Writes this handle's counters in the Prometheus text format (version
/// 0.0.4: `# HELP`, `# TYPE` and samples named `mistri_locks_…`, see
/// docs/OPERATING.md) into `buf` as a NUL-terminated string.
///
/// `*needed` is set to the text's length plus one (the NUL) on every
/// `MISTRI_OK`. The text is written only when it fits (`len >= *needed`);
/// otherwise `buf` is left alone, so a first call with `buf = NULL, len =
/// 0` sizes the buffer:
///
/// ```c
/// size_t needed = 0;
/// mistri_locks_stats_prometheus(locks, NULL, 0, &needed);
/// char *text = malloc(needed);
/// mistri_locks_stats_prometheus(locks, text, needed, &needed);
/// ```
///
/// The counters move between two calls, so the second call may need a few
/// bytes more: compare `*needed` with `len` again (or give some slack).
///
/// Errors: `MISTRI_NULL_ARGUMENT` for a NULL `locks` or `needed`, or a
/// NULL `buf` with `len > 0`. Threading: any thread.
///
/// # Safety
/// `locks` is a live handle; `buf` is NULL or writable for `len` bytes;
/// `needed` is writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_stats_prometheus(
    locks: *const mistri_locks,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> mistri_status {
    ffi_boundary!("mistri_locks_stats_prometheus", {
        let needed = try_out!(needed);
        let locks = try_ref_from_ptr!(locks);
        if buf.is_null() && len > 0 {
            return Err(Failure::Null("buf"));
        }
        let text = mistri_core::operator::stats_prometheus(&locks.stats());
        let size = text.len() + 1;
        if len >= size {
            // SAFETY: `buf` is non-NULL (len > 0) and writable for `len >=
            // size` bytes per the contract; `text` is our own string, so the
            // two do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
                buf.add(text.len()).write(0);
            }
        }
        needed.write(size)
    })
}
