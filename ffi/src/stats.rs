//! Counters of a `mistri_locks` handle, for C, in two forms over the core's
//! one `StatsSnapshot` (`core/src/stats.rs`; the names are the contract in
//! every face):
//!
//! - `mistri_locks_stats(locks, &stats)` fills a caller-visible struct,
//!   `mistri_stats`, with every counter taken at one instant (Python's and
//!   Ruby's `stats()`). It is a plain struct because that is what a C
//!   caller reads most easily (`stats.holds_acquired`, no getter per
//!   counter, no allocation, nothing to free), and it carries its own size
//!   as its first field (set by the caller to `sizeof(mistri_stats)`), so
//!   counters can be appended later without an ABI break: a program built
//!   against an older header passes a smaller size and gets the fields it
//!   knows; fields are only ever appended, never reordered or removed.
//! - `mistri_locks_stat(locks, name, &value)` reads one counter by name, and
//!   `mistri_stat_name(i)` enumerates the names: for a tool that reads
//!   counters its header does not know yet (names from a config file, a
//!   metrics exporter dumping everything). Both stay: the two forms
//!   serve different callers.

use crate::args::{try_out, try_str};
use crate::handle::try_ref_from_ptr;
use crate::locks::mistri_locks;
use crate::panic::{ffi_boundary, ffi_boundary_or};
use crate::status::{mistri_status, Failure};
use mistri_core::{Error, StatValue, StatsSnapshot};
use std::ffi::{c_char, CString};
use std::mem::{offset_of, size_of};
use std::sync::OnceLock;

/// Every counter of a `mistri_locks` handle at one instant
/// (`mistri_locks_stats`). Counts are since the handle's owner was made
/// (exact; `uint64_t`); round-trip times are seconds, NaN before the first
/// beat.
///
/// Set `size` to `sizeof(mistri_stats)` before the call:
///
/// ```c
/// mistri_stats stats = {.size = sizeof stats};
/// if (mistri_locks_stats(locks, &stats) == MISTRI_OK)
///     printf("%llu holds\n", (unsigned long long)stats.holds_active);
/// ```
///
/// The library writes every field that fits in `size` bytes and leaves
/// `size` (and any bytes past the fields it knows) alone. Fields are only
/// ever appended, so a program built against an older header keeps
/// working with a newer library, and the reverse leaves the newer fields
/// untouched (zero, if the struct was initialised as above).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct mistri_stats {
    /// In: `sizeof(mistri_stats)` as the caller compiled it.
    pub size: usize,
    /// Holds being renewed now.
    pub holds_active: u64,
    /// Holds made (`acquired` events).
    pub holds_acquired: u64,
    /// Holds refused because the lease was held elsewhere.
    pub holds_refused: u64,
    /// Holds released before being lost.
    pub holds_released: u64,
    /// Renewals handed to the backend.
    pub renewals_sent: u64,
    /// Renewals confirmed.
    pub renewals_confirmed: u64,
    /// Renewal attempts that failed (error or no answer) and were retried.
    pub renewals_failed: u64,
    /// Renewals confirmed after failed attempts (`renewed_late` events).
    pub renewals_late: u64,
    /// Batches (renewals and stop-flag reads) sent to the backend.
    pub beats: u64,
    /// Batches that failed as a whole.
    pub beats_failed: u64,
    /// Median round trip of the last 128 beats, in seconds; NaN before the
    /// first.
    pub beat_rtt_p50: f64,
    /// 99th percentile of the same window, in seconds; NaN before the first.
    pub beat_rtt_p99: f64,
    /// Holds lost because a renewal found the lease gone or taken.
    pub lost_not_held: u64,
    /// Holds lost because a renewal arrived with too little life left.
    pub lost_too_late: u64,
    /// Holds lost because their safe deadline passed.
    pub lost_deadline: u64,
    /// Holds whose renewals `max_hold` ended (hung-holder guard).
    pub lost_max_hold: u64,
    /// Holds whose work stopped calling `mistri_hold_touch` (hung-holder
    /// guard).
    pub lost_stalled: u64,
    /// Stop flags seen raised (holds stopped).
    pub stop_flags_seen: u64,
    /// Stop-flag pushes received from the backend's listener.
    pub pushes_received: u64,
    /// The smallest margin a confirmed renewal had left to its hold's safe
    /// deadline over the last minute (30 to 60 s), in seconds; NaN without
    /// a confirmed renewal then.
    pub safe_margin_min: f64,
    /// Run-time settings checks (Redis's memory policy) that failed or
    /// could not be read: each told the holds `at_risk`.
    pub settings_checks_failed: u64,
    // New counters go here, at the end, and nowhere else.
}

/// The smallest `size` accepted: the end of the last field of the first
/// version of the struct. It names that field, so it stays right when
/// fields are appended.
const FIRST_VERSION_SIZE: usize = offset_of!(mistri_stats, pushes_received) + size_of::<u64>();

/// Where the counters start (after `size`).
const FIRST_FIELD: usize = offset_of!(mistri_stats, holds_active);

/// Every field after `size` is 8 bytes wide.
const FIELD_WIDTH: usize = 8;

/// Sets the field of `stats` named `name` to `value`; false for a name
/// this struct has no field for.
fn set_field(stats: &mut mistri_stats, name: &str, value: StatValue) -> bool {
    let slot: &mut u64 = match name {
        "holds_active" => &mut stats.holds_active,
        "holds_acquired" => &mut stats.holds_acquired,
        "holds_refused" => &mut stats.holds_refused,
        "holds_released" => &mut stats.holds_released,
        "renewals_sent" => &mut stats.renewals_sent,
        "renewals_confirmed" => &mut stats.renewals_confirmed,
        "renewals_failed" => &mut stats.renewals_failed,
        "renewals_late" => &mut stats.renewals_late,
        "beats" => &mut stats.beats,
        "beats_failed" => &mut stats.beats_failed,
        "lost_not_held" => &mut stats.lost_not_held,
        "lost_too_late" => &mut stats.lost_too_late,
        "lost_deadline" => &mut stats.lost_deadline,
        "lost_max_hold" => &mut stats.lost_max_hold,
        "lost_stalled" => &mut stats.lost_stalled,
        "stop_flags_seen" => &mut stats.stop_flags_seen,
        "pushes_received" => &mut stats.pushes_received,
        "settings_checks_failed" => &mut stats.settings_checks_failed,
        "beat_rtt_p50" | "beat_rtt_p99" | "safe_margin_min" => {
            let slot = match name {
                "beat_rtt_p50" => &mut stats.beat_rtt_p50,
                "beat_rtt_p99" => &mut stats.beat_rtt_p99,
                _ => &mut stats.safe_margin_min,
            };
            *slot = seconds(value);
            return true;
        }
        _ => return false,
    };
    *slot = count(value);
    true
}

fn count(value: StatValue) -> u64 {
    match value {
        StatValue::Count(n) => n,
        StatValue::Seconds(s) => s.map_or(0, |s| s as u64),
    }
}

fn seconds(value: StatValue) -> f64 {
    match value {
        StatValue::Count(n) => n as f64,
        StatValue::Seconds(s) => s.unwrap_or(f64::NAN),
    }
}

/// The C struct of a core snapshot, field by field from its names.
fn c_stats(snapshot: &StatsSnapshot) -> mistri_stats {
    let mut stats = mistri_stats {
        size: size_of::<mistri_stats>(),
        ..mistri_stats::default()
    };
    for (name, value) in snapshot.entries() {
        // A counter the core added after this struct was last extended is
        // still readable by name (`mistri_locks_stat`); the unit test
        // below fails until it has a field here.
        set_field(&mut stats, name, value);
    }
    stats
}

/// Fills `*stats` with every counter of `locks`, taken at one instant.
///
/// `stats->size` must be set by the caller to `sizeof(mistri_stats)` (see
/// `mistri_stats`); on `MISTRI_OK` every field that fits in it is written,
/// `size` is left as it is. Nothing is allocated; there is nothing to free.
///
/// Errors: `MISTRI_NULL_ARGUMENT` (locks, stats), `MISTRI_INVALID_ARGUMENT`
/// (`stats->size` smaller than the first version of the struct: not set).
///
/// # Safety
/// `locks` is NULL or a live handle; `stats` is NULL or points to a
/// writable, aligned `mistri_stats` of at least `stats->size` bytes (its
/// `size` field initialised).
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_stats(
    locks: *const mistri_locks,
    stats: *mut mistri_stats,
) -> mistri_status {
    ffi_boundary!("mistri_locks_stats", {
        let dest = std::ptr::NonNull::new(stats).ok_or(Failure::Null("stats"))?;
        let locks = try_ref_from_ptr!(locks);
        // SAFETY: non-NULL, aligned and initialised in its first field per
        // this function's contract; only `size` is read.
        let size = unsafe { std::ptr::addr_of!((*dest.as_ptr()).size).read() };
        if size < FIRST_VERSION_SIZE {
            return Err(Failure::Core(Error::InvalidArgument(format!(
                "stats->size is {size}: set it to sizeof(mistri_stats) ({}) before the call",
                size_of::<mistri_stats>()
            ))));
        }
        let full = c_stats(&locks.stats());
        // Whole fields only, up to what both sides know.
        let known = size.min(size_of::<mistri_stats>());
        let len = (known - FIRST_FIELD) / FIELD_WIDTH * FIELD_WIDTH;
        let src: *const u8 = (&full as *const mistri_stats).cast();
        // SAFETY: `src + FIRST_FIELD .. + len` lies inside `full`; the same
        // range of `dest` lies inside the caller's `size` bytes (len ≤
        // size − FIRST_FIELD), which the contract makes writable; the two
        // do not overlap (`full` is our local).
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.add(FIRST_FIELD),
                dest.as_ptr().cast::<u8>().add(FIRST_FIELD),
                len,
            );
        }
        Ok(())
    })
}

/// Reads one counter of `locks` by name (the by-name form of
/// `mistri_locks_stats`, for counters a caller's header may not know).
///
/// Names (`mistri_stat_name` lists them): `holds_active`,
/// `holds_acquired`, `holds_refused`, `holds_released`, `renewals_sent`,
/// `renewals_confirmed`, `renewals_failed`, `renewals_late`, `beats`,
/// `beats_failed`, `lost_not_held`, `lost_too_late`, `lost_deadline`,
/// `lost_max_hold`, `lost_stalled`, `stop_flags_seen`, `pushes_received`
/// (counts since the handle was made; exact below 2^53), and
/// `beat_rtt_p50`, `beat_rtt_p99` (seconds, over the last 128 beats; NaN
/// before the first), `safe_margin_min` (seconds: the smallest margin a
/// confirmed renewal had left to its safe deadline over the last minute;
/// NaN without one), `settings_checks_failed` (a count). More may be added.
///
/// On `MISTRI_OK`, `*value` receives it.
///
/// Errors: `MISTRI_NULL_ARGUMENT` (locks, name, value),
/// `MISTRI_INVALID_UTF8`, `MISTRI_INVALID_ARGUMENT` (an unknown name).
///
/// # Safety
/// `locks` is NULL or a live handle; `name` is NULL or a NUL-terminated
/// string; `value` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_stat(
    locks: *const mistri_locks,
    name: *const c_char,
    value: *mut f64,
) -> mistri_status {
    ffi_boundary!("mistri_locks_stat", {
        let out = try_out!(value);
        let locks = try_ref_from_ptr!(locks);
        let name = try_str!(name);
        let got = locks
            .stats()
            .get(name)
            .ok_or_else(|| Error::InvalidArgument(format!("no counter named {name:?}")))?;
        out.write(match got {
            StatValue::Count(n) => n as f64,
            StatValue::Seconds(s) => s.unwrap_or(f64::NAN),
        })
    })
}

/// The counter names, as C strings, in the core's stable order.
fn stat_names() -> &'static [CString] {
    static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
    NAMES.get_or_init(|| {
        (StatsSnapshot::default().entries().into_iter())
            .filter_map(|(name, _)| CString::new(name).ok())
            .collect()
    })
}

/// The name of counter `index` for `mistri_locks_stat` (static; never free
/// it), or NULL when `index` is past the last: `for (size_t i = 0; (name =
/// mistri_stat_name(i)) != NULL; i++)` visits every counter this library
/// has, in a stable order.
///
/// Threading: any thread.
#[no_mangle]
pub extern "C" fn mistri_stat_name(index: usize) -> *const c_char {
    ffi_boundary_or!("mistri_stat_name", std::ptr::null(), {
        stat_names()
            .get(index)
            .map_or(std::ptr::null(), |n| n.as_ptr())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_counter_has_a_field() {
        let mut stats = mistri_stats::default();
        let entries = StatsSnapshot::default().entries();
        for (name, value) in &entries {
            assert!(
                set_field(&mut stats, name, *value),
                "the core counter {name:?} has no field in mistri_stats: append one"
            );
        }
        // And no field without a counter: `size` plus one per entry.
        assert_eq!(
            size_of::<mistri_stats>(),
            FIRST_FIELD + entries.len() * FIELD_WIDTH
        );
        assert_eq!(stat_names().len(), entries.len());
    }

    #[test]
    fn the_first_version_is_a_prefix_of_the_struct() {
        // `safe_margin_min` was appended after the first version: a caller
        // compiled against that header (size ends at `pushes_received`)
        // is still served, its fields only.
        assert!(FIRST_VERSION_SIZE < size_of::<mistri_stats>());
        assert_eq!(
            FIRST_VERSION_SIZE,
            offset_of!(mistri_stats, safe_margin_min)
        );
    }

    #[test]
    fn a_fresh_snapshot_says_nan_for_times() {
        let stats = c_stats(&StatsSnapshot::default());
        assert!(stats.beat_rtt_p50.is_nan() && stats.beat_rtt_p99.is_nan());
        assert!(stats.safe_margin_min.is_nan());
        assert_eq!(stats.size, size_of::<mistri_stats>());
    }
}
