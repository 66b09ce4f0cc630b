//! The state document: one JSON rendering of [`Locks::list`] that the
//! page, `mistri-locks serve`, the Rack and WSGI apps and scripts all read
//! (`GET /api/state`) and `mistri-locks list --json` prints; [`keys_json`]
//! is its form for named keys (`mistri-locks status KEY… --json`).
//!
//! ```text
//! { "now_ms": 1764660000123, "prefix": "report:",
//!   "leases": [ { "key": "report:42", "held": true, "time_left_s": 9.2, "limit": 1,
//!                 "waiting": 2, "oldest_wait_s": 4.5,
//!                 "holder": "build-7:4120 python", "fence": 17,   // exclusive only
//!                 "holders": [ { "holder": …, "fence": 17, "acquired_at_ms": …,
//!                                "renewed_at_ms": …, "held_for_s": 3.1,
//!                                "renewed_ago_s": 0.4, "ttl_s": 10, "heartbeat_s": 1,
//!                                "stuck": false } ] } ],
//!   "flags": [ { "key": "report:stop", "time_left_s": 290.5 } ],
//!   "waiting": [ { "key": "report:42", "waiting": 2, "oldest_wait_s": 4.5 } ] }
//! ```
//!
//! `waiting` counts the key's live waiting lines (one per waiting process
//! and handle; each waiter on Memory: [`crate::WaitingInfo`]) and
//! `oldest_wait_s` is how long the head line has waited (`null` with
//! none). The top-level `waiting` lists every key with waiting lines, also
//! one whose lease was just released and not yet taken by the head line.
//!
//! `stuck` is true when the holder's last renewal is older than twice its
//! heartbeat (a plain acquire, heartbeat 0, is never stuck): the page draws
//! such a row so it stands out without reading numbers.

use super::json;
use crate::contract::info::{unix_millis, HolderInfo, LeaseInfo, Listing, WaitingInfo};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

/// Is this holder silent past twice its heartbeat at `now`?
pub fn holder_is_stuck(h: &HolderInfo, now: SystemTime) -> bool {
    !h.heartbeat.is_zero() && age(h.renewed_at, now) > h.heartbeat * 2
}

fn age(t: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(t).unwrap_or_default()
}

fn holder(out: &mut String, h: &HolderInfo, now: SystemTime) {
    out.push_str("\"holder\":");
    json::string(out, &h.label);
    let _ = write!(
        out,
        ",\"fence\":{},\"acquired_at_ms\":{},\"renewed_at_ms\":{},\"held_for_s\":",
        h.fence,
        unix_millis(h.acquired_at),
        unix_millis(h.renewed_at)
    );
    json::seconds(out, Some(age(h.acquired_at, now).as_secs_f64()));
    out.push_str(",\"renewed_ago_s\":");
    json::seconds(out, Some(age(h.renewed_at, now).as_secs_f64()));
    out.push_str(",\"ttl_s\":");
    json::seconds(out, Some(h.ttl.as_secs_f64()));
    out.push_str(",\"heartbeat_s\":");
    json::seconds(out, Some(h.heartbeat.as_secs_f64()));
    out.push_str(",\"stop_key\":");
    match stop_key(h) {
        Some(k) => json::string(out, k),
        None => out.push_str("null"),
    }
    let _ = write!(out, ",\"stuck\":{}", holder_is_stuck(h, now));
}

/// The stop key the holder watches, when its description carries one.
pub(crate) fn stop_key(h: &HolderInfo) -> Option<&str> {
    h.stop_key.as_deref()
}

/// Renders `listing` (as [`Locks::list`] returned it for `prefix`) at
/// wall-clock `now`.
///
/// # Examples
/// ```
/// use mistri_locks::{operator, HoldOptions, Locks};
///
/// let locks = Locks::memory();
/// let _hold = locks.hold("report:42", HoldOptions::default())?.expect("free");
/// let doc = operator::state_json(&locks.list("report:")?, "report:", std::time::SystemTime::now());
/// assert!(doc.contains(r#""key":"report:42""#));
/// # Ok::<(), mistri_locks::Error>(())
/// ```
pub fn state_json(listing: &Listing, prefix: &str, now: SystemTime) -> String {
    let leases = listing.leases.iter().map(|l| (l.key.as_str(), Some(l)));
    document(Some(prefix), leases, listing, now)
}

/// The state document for named keys (`mistri-locks status KEY… --json`):
/// [`state_json`]'s fields without `prefix`, one entry of `leases` per key
/// of `keys` in their order, a free key as `{"key":…,"held":false,
/// "waiting":…,"oldest_wait_s":…}`. `listing` gives the flags and the
/// waiting lines to show (its `leases` are not read; `waiting` sorted).
///
/// # Examples
/// ```
/// use mistri_locks::{operator, Listing, Locks};
///
/// let locks = Locks::memory();
/// let keys = vec![("report:42".to_string(), locks.info("report:42")?)];
/// let doc = operator::keys_json(&keys, &Listing::default(), std::time::SystemTime::now());
/// assert!(doc.contains(r#"{"key":"report:42","held":false,"waiting":0"#));
/// # Ok::<(), mistri_locks::Error>(())
/// ```
pub fn keys_json(
    keys: &[(String, Option<LeaseInfo>)],
    listing: &Listing,
    now: SystemTime,
) -> String {
    let leases = keys.iter().map(|(k, l)| (k.as_str(), l.as_ref()));
    document(None, leases, listing, now)
}

/// The document: `now_ms`, `prefix` (when given), `leases` (a `None`
/// lease is a free key), then `listing`'s `flags` and `waiting`.
fn document<'a>(
    prefix: Option<&str>,
    leases: impl ExactSizeIterator<Item = (&'a str, Option<&'a LeaseInfo>)>,
    listing: &Listing,
    now: SystemTime,
) -> String {
    // ~400 bytes a lease: one allocation for the usual page.
    let mut out = String::with_capacity(64 + leases.len() * 400 + listing.flags.len() * 64);
    let _ = write!(out, "{{\"now_ms\":{}", unix_millis(now));
    if let Some(prefix) = prefix {
        out.push_str(",\"prefix\":");
        json::string(&mut out, prefix);
    }
    out.push_str(",\"leases\":[");
    for (i, (key, lease)) in leases.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"key\":");
        json::string(&mut out, key);
        let Some(lease) = lease else {
            out.push_str(",\"held\":false");
            waiting(&mut out, listing.waiting_for(key));
            out.push('}');
            continue;
        };
        out.push_str(",\"held\":true,\"time_left_s\":");
        json::seconds(&mut out, lease.time_left.map(|d| d.as_secs_f64()));
        let _ = write!(out, ",\"limit\":{}", lease.limit);
        waiting(&mut out, listing.waiting_for(key));
        match &lease.holder {
            Some(h) => {
                out.push(',');
                holder(&mut out, h, now);
            }
            None => out.push_str(",\"holder\":null,\"fence\":null"),
        }
        out.push_str(",\"holders\":[");
        for (j, h) in lease.holders.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            out.push('{');
            holder(&mut out, h, now);
            out.push('}');
        }
        out.push_str("]}");
    }
    out.push_str("],\"flags\":[");
    for (i, flag) in listing.flags.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"key\":");
        json::string(&mut out, &flag.key);
        out.push_str(",\"time_left_s\":");
        json::seconds(&mut out, flag.time_left.map(|d| d.as_secs_f64()));
        out.push('}');
    }
    out.push_str("],\"waiting\":[");
    for (i, w) in listing.waiting.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"key\":");
        json::string(&mut out, &w.key);
        waiting(&mut out, Some(w));
        out.push('}');
    }
    out.push_str("]}");
    out
}

/// `,"waiting":N,"oldest_wait_s":S` (0 and null with no waiting line).
fn waiting(out: &mut String, w: Option<&WaitingInfo>) {
    let _ = write!(out, ",\"waiting\":{}", w.map_or(0, |w| w.lines));
    out.push_str(",\"oldest_wait_s\":");
    json::seconds(out, w.map(|w| w.oldest_wait.as_secs_f64()));
}
