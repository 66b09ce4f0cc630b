//! `mistri_lease_info`: who holds a lease — the label its holder stored,
//! the fence, when it was acquired and last renewed, its ttl, heartbeat and
//! time left — read with `mistri_locks_info`, or as each lease of a
//! `mistri_listing` (`listing.rs`, borrowed from the listing). Labels:
//! `mistri_locks_set_label` and `mistri_hold_options_set_label`.

use crate::args::{c_string_lossy, try_out, try_str};
use crate::handle::{free_box, to_boxed_mut_ptr, try_mut_from_ptr, try_ref_from_ptr, Castable};
use crate::locks::mistri_locks;
use crate::options::mistri_hold_options_builder;
use crate::panic::{ffi_boundary, ffi_boundary_void};
use crate::status::mistri_status;
use mistri_core::LeaseInfo;
use std::ffi::{c_char, CString};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What `mistri_locks_info` found about a live lease: a snapshot, not kept
/// up to date. Free it with `mistri_lease_info_free`. The leases of a
/// listing (`mistri_listing_lease`) are read with the same getters but
/// belong to the listing (a `const mistri_lease_info *`: never free them).
///
/// The holder's description may be missing (a lease taken by a client that
/// stores none): then `mistri_lease_info_described` says false, the label
/// is NULL and the numeric getters give 0. Time left comes from the
/// backend's clock; acquired/renewed times are Unix seconds (wall clock,
/// for display).
///
/// Threading: immutable; any thread may read it, one frees it.
pub struct mistri_lease_info {
    _private: [u8; 0],
}

pub(crate) struct InfoSnapshot {
    info: LeaseInfo,
    /// `info.key` as C reads it (cut at a NUL byte, as event keys are).
    key: CString,
    label: Option<CString>,
    /// The holder's stop key, as C reads it.
    stop_key: Option<CString>,
    /// Each of `info.holders`' labels, as C reads them.
    labels: Vec<CString>,
}

impl InfoSnapshot {
    pub(crate) fn new(info: LeaseInfo) -> Self {
        InfoSnapshot {
            key: c_string_lossy(&info.key),
            label: info.holder.as_ref().map(|h| c_label(&h.label)),
            stop_key: (info.holder.as_ref())
                .and_then(|h| h.stop_key.as_deref())
                .map(c_string_lossy),
            labels: info.holders.iter().map(|h| c_label(&h.label)).collect(),
            info,
        }
    }
}

fn c_label(label: &str) -> CString {
    CString::new(label.replace('\0', "\u{fffd}")).unwrap_or_default()
}

impl Castable for mistri_lease_info {
    type RustType = InfoSnapshot;
}

fn unix_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d: Duration| d.as_secs_f64())
}

/// Reads who holds `key`.
///
/// On `MISTRI_OK`, `*info` receives a new snapshot (free it with
/// `mistri_lease_info_free`), or NULL when no live lease is on `key`.
///
/// Errors: `MISTRI_INVALID_ARGUMENT` (empty key), the backend's errors.
///
/// # Safety
/// `locks` is NULL or a live handle; `key` is NULL or a NUL-terminated
/// string; `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_info(
    locks: *const mistri_locks,
    key: *const c_char,
    info: *mut *mut mistri_lease_info,
) -> mistri_status {
    ffi_boundary!("mistri_locks_info", {
        let out = try_out!(info);
        let found = try_ref_from_ptr!(locks).info(try_str!(key))?;
        out.write(found.map_or(std::ptr::null_mut(), |info| {
            to_boxed_mut_ptr(InfoSnapshot::new(info))
        }))
    })
}

/// Frees a snapshot. NULL is ignored. Only for snapshots from
/// `mistri_locks_info`: a lease of a listing is freed with its listing.
///
/// # Safety
/// `info` is NULL or a snapshot from `mistri_locks_info` not used again.
#[no_mangle]
pub unsafe extern "C" fn mistri_lease_info_free(info: *mut mistri_lease_info) {
    ffi_boundary_void!("mistri_lease_info_free", {
        // SAFETY: per this function's contract.
        unsafe { free_box(info) }
    })
}

/// The lease's key (without the namespace), owned by the snapshot (valid
/// until it is freed, with its listing for a listed lease). A key
/// containing a NUL byte is cut there.
///
/// # Safety
/// `info` is NULL or a live snapshot; `key` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_lease_info_key(
    info: *const mistri_lease_info,
    key: *mut *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_lease_info_key", {
        let out = try_out!(key);
        out.write(try_ref_from_ptr!(info).key.as_ptr())
    })
}

/// Did the holder store a description (label, fence, times)?
///
/// # Safety
/// `info` is NULL or a live snapshot; `described` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_lease_info_described(
    info: *const mistri_lease_info,
    described: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_lease_info_described", {
        let out = try_out!(described);
        out.write(try_ref_from_ptr!(info).info.holder.is_some())
    })
}

/// The holder's label (e.g. `"build-7:4120 python"`), owned by the snapshot
/// (valid until the snapshot is freed); NULL when not described.
///
/// # Safety
/// `info` is NULL or a live snapshot; `label` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_lease_info_label(
    info: *const mistri_lease_info,
    label: *mut *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_lease_info_label", {
        let out = try_out!(label);
        let snap = try_ref_from_ptr!(info);
        out.write(snap.label.as_ref().map_or(std::ptr::null(), |l| l.as_ptr()))
    })
}

/// The stop key the holder's hold watches (the flag that stops it), owned
/// by the snapshot (valid until the snapshot is freed); NULL when the
/// holder has none or is not described.
///
/// # Safety
/// `info` is NULL or a live snapshot; `stop_key` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_lease_info_stop_key(
    info: *const mistri_lease_info,
    stop_key: *mut *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_lease_info_stop_key", {
        let out = try_out!(stop_key);
        let snap = try_ref_from_ptr!(info);
        out.write((snap.stop_key.as_ref()).map_or(std::ptr::null(), |k| k.as_ptr()))
    })
}

/// The fencing number of the holder's acquisition (0 when not described).
///
/// # Safety
/// `info` is NULL or a live snapshot; `fence` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_lease_info_fence(
    info: *const mistri_lease_info,
    fence: *mut u64,
) -> mistri_status {
    ffi_boundary!("mistri_lease_info_fence", {
        let out = try_out!(fence);
        out.write(
            try_ref_from_ptr!(info)
                .info
                .holder
                .as_ref()
                .map_or(0, |h| h.fence),
        )
    })
}

/// Seconds the lease lives unless renewed (the backend's clock);
/// `INFINITY` for a lease with no expiry.
///
/// # Safety
/// `info` is NULL or a live snapshot; `seconds` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_lease_info_time_left(
    info: *const mistri_lease_info,
    seconds: *mut f64,
) -> mistri_status {
    ffi_boundary!("mistri_lease_info_time_left", {
        let out = try_out!(seconds);
        let left = try_ref_from_ptr!(info).info.time_left;
        out.write(left.map_or(f64::INFINITY, |d| d.as_secs_f64()))
    })
}

/// The holder's times and settings, each in seconds: when it acquired and
/// last renewed the lease (Unix time, wall clock), its ttl and heartbeat
/// (0 for a plain acquire). All 0 when not described. Any out-param may be
/// NULL (not wanted).
///
/// # Safety
/// `info` is NULL or a live snapshot; each out-param is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_lease_info_times(
    info: *const mistri_lease_info,
    acquired_at: *mut f64,
    renewed_at: *mut f64,
    ttl: *mut f64,
    heartbeat: *mut f64,
) -> mistri_status {
    ffi_boundary!("mistri_lease_info_times", {
        let holder = try_ref_from_ptr!(info).info.holder.as_ref();
        let values = [
            holder.map_or(0.0, |h| unix_secs(h.acquired_at)),
            holder.map_or(0.0, |h| unix_secs(h.renewed_at)),
            holder.map_or(0.0, |h| h.ttl.as_secs_f64()),
            holder.map_or(0.0, |h| h.heartbeat.as_secs_f64()),
        ];
        for (ptr, value) in [acquired_at, renewed_at, ttl, heartbeat]
            .into_iter()
            .zip(values)
        {
            if let Some(out) = std::ptr::NonNull::new(ptr) {
                // SAFETY: non-NULL; the caller promises it is writable.
                unsafe { out.as_ptr().write(value) };
            }
        }
        Ok(())
    })
}

/// The lease's holder limit: 1 for an exclusive lease; for an N-holder
/// lease (`..._set_limit`), the limit its newest holder acquired with.
///
/// # Safety
/// `info` is NULL or a live snapshot; `limit` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_lease_info_limit(
    info: *const mistri_lease_info,
    limit: *mut u32,
) -> mistri_status {
    ffi_boundary!("mistri_lease_info_limit", {
        let out = try_out!(limit);
        out.write(try_ref_from_ptr!(info).info.limit)
    })
}

/// How many holders have described themselves: 0 or 1 for an exclusive
/// lease, up to its limit for an N-holder lease (whose holders are read
/// with `mistri_lease_info_holder`; the single-holder getters above then
/// say "not described").
///
/// # Safety
/// `info` is NULL or a live snapshot; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_lease_info_holder_count(
    info: *const mistri_lease_info,
    count: *mut usize,
) -> mistri_status {
    ffi_boundary!("mistri_lease_info_holder_count", {
        let out = try_out!(count);
        out.write(try_ref_from_ptr!(info).info.holders.len())
    })
}

/// Holder `index` (0 ≤ index < `mistri_lease_info_holder_count`, by
/// fence): its label (owned by the snapshot, valid until it is freed),
/// fence, and when it acquired and last renewed
/// (Unix seconds). Any out-param may be NULL (not wanted). An index out of
/// range is `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `info` is NULL or a live snapshot; each out-param is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_lease_info_holder(
    info: *const mistri_lease_info,
    index: usize,
    label: *mut *const c_char,
    fence: *mut u64,
    acquired_at: *mut f64,
    renewed_at: *mut f64,
) -> mistri_status {
    ffi_boundary!("mistri_lease_info_holder", {
        let snap = try_ref_from_ptr!(info);
        let (Some(holder), Some(name)) = (snap.info.holders.get(index), snap.labels.get(index))
        else {
            return Err(crate::status::Failure::Core(
                mistri_core::Error::InvalidArgument(format!(
                    "holder index {index} is out of range: the lease has {} described holders",
                    snap.info.holders.len()
                )),
            ));
        };
        if let Some(out) = try_out!(opt label) {
            out.write(name.as_ptr())?;
        }
        if let Some(out) = try_out!(opt fence) {
            out.write(holder.fence)?;
        }
        if let Some(out) = try_out!(opt acquired_at) {
            out.write(unix_secs(holder.acquired_at))?;
        }
        if let Some(out) = try_out!(opt renewed_at) {
            out.write(unix_secs(holder.renewed_at))?;
        }
        Ok(())
    })
}

/// Sets the label this handle's next leases and holds store as their holder
/// (copied); NULL restores the default, `host:pid c`. Empty is
/// `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `locks` is NULL or a live handle; `label` is NULL or a NUL-terminated
/// string.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_set_label(
    locks: *const mistri_locks,
    label: *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_locks_set_label", {
        let locks = try_ref_from_ptr!(locks);
        let label = try_str!(opt label);
        locks.set_label(label)?;
        Ok(())
    })
}

/// Sets the label holds started from this builder store (copied); NULL:
/// the handle's label. Empty is `MISTRI_INVALID_ARGUMENT`.
///
/// # Safety
/// `options` is NULL or a live builder used by no other thread meanwhile;
/// `label` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mistri_hold_options_set_label(
    options: *mut mistri_hold_options_builder,
    label: *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_hold_options_set_label", {
        let options = try_mut_from_ptr!(options);
        let label = try_str!(opt label);
        if let Some(l) = label {
            mistri_core::check_key("label", l)?;
        }
        options.label = label.map(str::to_owned);
        Ok(())
    })
}
