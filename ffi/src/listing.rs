//! `mistri_listing`: the live leases and raised flags under a key prefix,
//! read with `mistri_locks_list` (the core's `Locks::list`, what Python's
//! and Ruby's `list(prefix)` return as dicts and Hashes).
//!
//! A listing is one snapshot, taken by one call. Its leases are
//! `mistri_lease_info` values owned by the listing, handed to C as borrowed
//! `const` pointers and read with the getters of `info.rs`, so a lease
//! reads the same whether it came from `mistri_locks_info` or a listing.
//! Its flags are a key and a time left each. Everything a listing hands
//! out lives until `mistri_listing_free`; the listing is never changed
//! after it is made, so the borrowed pointers stay put.

use crate::args::{c_string_lossy, try_out, try_str};
use crate::handle::{free_box, to_boxed_mut_ptr, to_const_ptr, try_ref_from_ptr, Castable};
use crate::info::{mistri_lease_info, InfoSnapshot};
use crate::locks::mistri_locks;
use crate::panic::{ffi_boundary, ffi_boundary_void};
use crate::status::{mistri_status, Failure};
use mistri_core::{Error, Listing};
use std::ffi::{c_char, CString};
use std::time::Duration;

/// What `mistri_locks_list` found: the live leases and the raised flags
/// whose keys start with a prefix, each sorted by key. A snapshot, not
/// kept up to date. Free it with `mistri_listing_free`.
///
/// Leases: `mistri_listing_lease_count`, then `mistri_listing_lease(listing,
/// i, &info)` gives a `const mistri_lease_info *` read with the
/// `mistri_lease_info_*` getters (`mistri_lease_info_key` for its key); it
/// belongs to the listing (do not pass it to `mistri_lease_info_free`).
/// Flags: `mistri_listing_flag_count` and `mistri_listing_flag(listing, i,
/// &key, &time_left)`. Keys with waiting lines: `mistri_listing_waiting_count`
/// and `mistri_listing_waiting(listing, i, &key, &lines, &oldest_wait)`.
///
/// Threading: immutable; any thread may read it, one frees it (last).
pub struct mistri_listing {
    _private: [u8; 0],
}

pub(crate) struct ListingSnapshot {
    leases: Vec<InfoSnapshot>,
    flags: Vec<FlagSnapshot>,
    waiting: Vec<WaitingSnapshot>,
}

struct WaitingSnapshot {
    key: CString,
    lines: u32,
    oldest_wait: Duration,
}

struct FlagSnapshot {
    key: CString,
    time_left: Option<Duration>,
}

impl Castable for mistri_listing {
    type RustType = ListingSnapshot;
}

impl ListingSnapshot {
    fn new(listing: Listing) -> Self {
        ListingSnapshot {
            leases: listing.leases.into_iter().map(InfoSnapshot::new).collect(),
            flags: (listing.flags.into_iter())
                .map(|f| FlagSnapshot {
                    key: c_string_lossy(&f.key),
                    time_left: f.time_left,
                })
                .collect(),
            waiting: (listing.waiting.into_iter())
                .map(|w| WaitingSnapshot {
                    key: c_string_lossy(&w.key),
                    lines: w.lines,
                    oldest_wait: w.oldest_wait,
                })
                .collect(),
        }
    }
}

fn out_of_range(what: &str, index: usize, count: usize) -> Failure {
    Failure::Core(Error::InvalidArgument(format!(
        "{what} index {index} is out of range: the listing has {count} {what}s"
    )))
}

/// Lists the live leases and raised flags whose keys start with `prefix`
/// (NULL or `""`: all of them in this handle's namespace or file), as the
/// other faces' `list(prefix)`.
///
/// On `MISTRI_OK`, `*listing` receives a new listing (free it with
/// `mistri_listing_free`); an empty one when nothing matches.
///
/// Errors: `MISTRI_NULL_ARGUMENT` (locks, listing), `MISTRI_INVALID_UTF8`
/// (prefix), the backend's errors.
///
/// # Safety
/// `locks` is NULL or a live handle; `prefix` is NULL or a NUL-terminated
/// string; `listing` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_list(
    locks: *const mistri_locks,
    prefix: *const c_char,
    listing: *mut *mut mistri_listing,
) -> mistri_status {
    ffi_boundary!("mistri_locks_list", {
        let out = try_out!(listing);
        let locks = try_ref_from_ptr!(locks);
        let found = locks.list(try_str!(opt prefix).unwrap_or(""))?;
        out.write(to_boxed_mut_ptr(ListingSnapshot::new(found)))
    })
}

/// Frees a listing and every lease and key it handed out. NULL is ignored.
///
/// # Safety
/// `listing` is NULL or a listing no other thread is using; neither it nor
/// anything it handed out is used again.
#[no_mangle]
pub unsafe extern "C" fn mistri_listing_free(listing: *mut mistri_listing) {
    ffi_boundary_void!("mistri_listing_free", {
        // SAFETY: per this function's contract, `listing` is NULL or a
        // listing given back exactly once.
        unsafe { free_box(listing) }
    })
}

/// How many live leases the listing has.
///
/// # Safety
/// `listing` is NULL or a live listing; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_listing_lease_count(
    listing: *const mistri_listing,
    count: *mut usize,
) -> mistri_status {
    ffi_boundary!("mistri_listing_lease_count", {
        let out = try_out!(count);
        out.write(try_ref_from_ptr!(listing).leases.len())
    })
}

/// Lease `index` (0 ≤ index < `mistri_listing_lease_count`, by key).
///
/// On `MISTRI_OK`, `*info` points at it: read it with the
/// `mistri_lease_info_*` getters; it belongs to the listing (valid until
/// `mistri_listing_free`; never free it). An index out of range is
/// `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `listing` is NULL or a live listing; `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_listing_lease(
    listing: *const mistri_listing,
    index: usize,
    info: *mut *const mistri_lease_info,
) -> mistri_status {
    ffi_boundary!("mistri_listing_lease", {
        let out = try_out!(info);
        let leases = &try_ref_from_ptr!(listing).leases;
        let lease =
            (leases.get(index)).ok_or_else(|| out_of_range("lease", index, leases.len()))?;
        out.write(to_const_ptr(lease))
    })
}

/// How many raised flags the listing has.
///
/// # Safety
/// `listing` is NULL or a live listing; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_listing_flag_count(
    listing: *const mistri_listing,
    count: *mut usize,
) -> mistri_status {
    ffi_boundary!("mistri_listing_flag_count", {
        let out = try_out!(count);
        out.write(try_ref_from_ptr!(listing).flags.len())
    })
}

/// Flag `index` (0 ≤ index < `mistri_listing_flag_count`, by key): its key
/// (without the namespace; owned by the listing, valid until
/// `mistri_listing_free`; a key containing a NUL byte is cut there) and the
/// seconds it stays up unless cleared (`INFINITY` for a flag with no
/// expiry). Either out-param may be NULL (not wanted). An index out of
/// range is `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `listing` is NULL or a live listing; each out-param is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_listing_flag(
    listing: *const mistri_listing,
    index: usize,
    key: *mut *const c_char,
    time_left: *mut f64,
) -> mistri_status {
    ffi_boundary!("mistri_listing_flag", {
        let flags = &try_ref_from_ptr!(listing).flags;
        let flag = (flags.get(index)).ok_or_else(|| out_of_range("flag", index, flags.len()))?;
        if let Some(out) = try_out!(opt key) {
            out.write(flag.key.as_ptr())?;
        }
        if let Some(out) = try_out!(opt time_left) {
            out.write(flag.time_left.map_or(f64::INFINITY, |d| d.as_secs_f64()))?;
        }
        Ok(())
    })
}

/// How many keys with waiting lines the listing has (each key's live
/// lines queued for its lease: one per waiting process and handle; on
/// Memory, each waiter).
///
/// # Safety
/// `listing` is NULL or a live listing; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_listing_waiting_count(
    listing: *const mistri_listing,
    count: *mut usize,
) -> mistri_status {
    ffi_boundary!("mistri_listing_waiting_count", {
        let out = try_out!(count);
        out.write(try_ref_from_ptr!(listing).waiting.len())
    })
}

/// Waiting key `index` (0 ≤ index < `mistri_listing_waiting_count`, by
/// key): its key (without the namespace; owned by the listing, valid until
/// `mistri_listing_free`; a key containing a NUL byte is cut there), how
/// many live lines wait for it, and the seconds the first of them has
/// waited. A key may be listed here and not among the leases, for the
/// moment between a release and the first line's acquire. Each out-param
/// may be NULL (not wanted). An index out of range is
/// `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `listing` is NULL or a live listing; each out-param is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_listing_waiting(
    listing: *const mistri_listing,
    index: usize,
    key: *mut *const c_char,
    lines: *mut u32,
    oldest_wait: *mut f64,
) -> mistri_status {
    ffi_boundary!("mistri_listing_waiting", {
        let waiting = &try_ref_from_ptr!(listing).waiting;
        let w = (waiting.get(index))
            .ok_or_else(|| out_of_range("waiting key", index, waiting.len()))?;
        if let Some(out) = try_out!(opt key) {
            out.write(w.key.as_ptr())?;
        }
        if let Some(out) = try_out!(opt lines) {
            out.write(w.lines)?;
        }
        if let Some(out) = try_out!(opt oldest_wait) {
            out.write(w.oldest_wait.as_secs_f64())?;
        }
        Ok(())
    })
}
