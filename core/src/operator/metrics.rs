//! Prometheus text exposition (format 0.0.4) of one owner's counters
//! ([`StatsSnapshot`]) and of the fleet a listing shows.
//!
//! Names follow prometheus.io "Metric and label naming": the prefix
//! `mistri_locks_`, base units (seconds), `_total` on counters, and no key
//! label (a fleet can have millions of keys; a label per key would make a
//! series per key). The table with meanings is in docs/OPERATING.md.

use super::state::holder_is_stuck;
use crate::contract::info::Listing;
use crate::stats::StatsSnapshot;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

/// The media type of the text this module writes.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP mistri_locks_{name} {help}");
    let _ = writeln!(out, "# TYPE mistri_locks_{name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &str, value: impl std::fmt::Display) {
    if labels.is_empty() {
        let _ = writeln!(out, "mistri_locks_{name} {value}");
    } else {
        let _ = writeln!(out, "mistri_locks_{name}{{{labels}}} {value}");
    }
}

fn one(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    family(out, name, kind, help);
    sample(out, name, "", value);
}

/// The per-owner metrics of `stats` (one [`crate::Locks`] handle), in the
/// Prometheus text format.
///
/// # Examples
/// ```
/// use mistri_locks::{operator, Locks};
///
/// let text = operator::stats_prometheus(&Locks::memory().stats());
/// assert!(text.contains("mistri_locks_holds_active 0\n"));
/// ```
pub fn stats_prometheus(stats: &StatsSnapshot) -> String {
    let mut out = String::with_capacity(4096);
    let o = &mut out;
    one(
        o,
        "holds_active",
        "gauge",
        "Holds this handle is renewing now.",
        stats.holds_active,
    );
    family(
        o,
        "acquisitions_total",
        "counter",
        "Hold attempts by outcome: acquired (the hold took its lease) or refused (held elsewhere).",
    );
    sample(
        o,
        "acquisitions_total",
        "outcome=\"acquired\"",
        stats.holds_acquired,
    );
    sample(
        o,
        "acquisitions_total",
        "outcome=\"refused\"",
        stats.holds_refused,
    );
    one(
        o,
        "holds_released_total",
        "counter",
        "Holds released before being lost.",
        stats.holds_released,
    );
    one(
        o,
        "renewals_sent_total",
        "counter",
        "Renewals handed to the backend.",
        stats.renewals_sent,
    );
    one(
        o,
        "renewals_confirmed_total",
        "counter",
        "Renewals the backend confirmed.",
        stats.renewals_confirmed,
    );
    one(
        o,
        "renewal_attempts_failed_total",
        "counter",
        "Renewal attempts that failed (an error or no answer) and were retried.",
        stats.renewals_failed,
    );
    one(
        o,
        "renewals_late_total",
        "counter",
        "Renewals confirmed only after failed attempts: the hold came close to its safe deadline.",
        stats.renewals_late,
    );
    one(
        o,
        "beats_total",
        "counter",
        "Batches of renewals and stop-flag reads sent to the backend.",
        stats.beats,
    );
    one(
        o,
        "beats_failed_total",
        "counter",
        "Batches that failed as a whole.",
        stats.beats_failed,
    );
    for (name, quantile, value) in [
        ("beat_rtt_p50_seconds", "median", stats.beat_rtt_p50),
        (
            "beat_rtt_p99_seconds",
            "99th percentile",
            stats.beat_rtt_p99,
        ),
    ] {
        family(
            o,
            name,
            "gauge",
            &format!(
                "The {quantile} round-trip time of the last 128 beats (absent before the first)."
            ),
        );
        if let Some(d) = value {
            sample(o, name, "", d.as_secs_f64());
        }
    }
    family(
        o,
        "safe_margin_min_seconds",
        "gauge",
        "The smallest margin a confirmed renewal had left to its hold's safe deadline, over the last minute (30 to 60 s; absent without a confirmed renewal then).",
    );
    if let Some(d) = stats.safe_margin_min {
        sample(o, "safe_margin_min_seconds", "", d.as_secs_f64());
    }
    family(o, "holds_lost_total", "counter", "Holds lost, by cause: not_held (the lease was gone or taken), too_late (a renewal arrived with too little life left), deadline (no renewal confirmed by the safe deadline), max_hold, stalled (the hung-holder guard).");
    for (cause, n) in [
        ("not_held", stats.lost_not_held),
        ("too_late", stats.lost_too_late),
        ("deadline", stats.lost_deadline),
        ("max_hold", stats.lost_max_hold),
        ("stalled", stats.lost_stalled),
    ] {
        sample(o, "holds_lost_total", &format!("cause=\"{cause}\""), n);
    }
    one(
        o,
        "stops_received_total",
        "counter",
        "Stop flags seen raised by this handle's holds (holds stopped).",
        stats.stop_flags_seen,
    );
    one(
        o,
        "stop_pushes_received_total",
        "counter",
        "Stop-flag announcements received from the backend's listener.",
        stats.pushes_received,
    );
    one(
        o,
        "settings_checks_failed_total",
        "counter",
        "Run-time settings checks (the Redis memory policy) that could not be made; the holds were told at_risk.",
        stats.settings_checks_failed,
    );
    out
}

/// Fleet gauges from a listing (as `mistri-locks serve` sees the backend
/// at `now`): leases held, holders, flags raised, holders silent past
/// twice their heartbeat, the oldest last-renewal age, waiting lines and
/// the oldest wait.
///
/// # Examples
/// ```
/// use mistri_locks::{operator, Locks};
/// use std::time::{Duration, SystemTime};
///
/// let locks = Locks::memory();
/// locks.set_flag("stop:x", Duration::from_secs(60))?;
/// let text = operator::fleet_prometheus(&locks.list("")?, SystemTime::now());
/// assert!(text.contains("mistri_locks_fleet_flags_raised 1\n"));
/// # Ok::<(), mistri_locks::Error>(())
/// ```
pub fn fleet_prometheus(listing: &Listing, now: SystemTime) -> String {
    let holders = listing.leases.iter().flat_map(|l| l.holders.iter());
    let mut silent = 0u64;
    let mut oldest = Duration::ZERO;
    let mut n_holders = 0u64;
    for h in holders {
        n_holders += 1;
        if holder_is_stuck(h, now) {
            silent += 1;
        }
        if !h.heartbeat.is_zero() {
            oldest = oldest.max(now.duration_since(h.renewed_at).unwrap_or_default());
        }
    }
    let mut out = String::with_capacity(1024);
    let o = &mut out;
    one(
        o,
        "fleet_leases_held",
        "gauge",
        "Live leases under the served prefix.",
        listing.leases.len() as u64,
    );
    one(
        o,
        "fleet_holders",
        "gauge",
        "Holders of those leases (an N-holder lease counts each slot).",
        n_holders,
    );
    one(
        o,
        "fleet_flags_raised",
        "gauge",
        "Raised flags under the served prefix.",
        listing.flags.len() as u64,
    );
    one(
        o,
        "fleet_holders_silent",
        "gauge",
        "Holders whose last renewal is older than twice their heartbeat.",
        silent,
    );
    family(
        o,
        "fleet_oldest_renewal_age_seconds",
        "gauge",
        "The oldest last-renewal age among holders that renew on a heartbeat.",
    );
    sample(
        o,
        "fleet_oldest_renewal_age_seconds",
        "",
        oldest.as_secs_f64(),
    );
    let lines: u64 = listing.waiting.iter().map(|w| u64::from(w.lines)).sum();
    let oldest_wait = listing
        .waiting
        .iter()
        .map(|w| w.oldest_wait)
        .max()
        .unwrap_or_default();
    one(
        o,
        "fleet_waiting_lines",
        "gauge",
        "Waiting lines queued for keys under the served prefix (one per waiting process and handle; each waiter on Memory).",
        lines,
    );
    family(
        o,
        "fleet_oldest_wait_seconds",
        "gauge",
        "How long the longest-waiting line has waited (0 with none).",
    );
    sample(
        o,
        "fleet_oldest_wait_seconds",
        "",
        oldest_wait.as_secs_f64(),
    );
    out
}
