//! What a backend is: the [`adapter::Adapter`] trait and the values it
//! trades in (leases, renewals, beats), the descriptions `info` and `list`
//! return, the fence rule, the push registry a backend's listener feeds
//! (`push`) and the listener side that feeds it (`listen`: its
//! subscriptions, its thread, the one lifecycle),
//! and the constants of the waiting queue every backend keeps.

pub(crate) mod adapter;
pub(crate) mod fence;
pub(crate) mod info;
pub(crate) mod listen;
pub(crate) mod push;

use std::time::Duration;

/// How often a waiting line tries while nothing tells it the lease went
/// (push lost, a release announced to another line, clock skew).
pub const SAFETY_POLL: Duration = Duration::from_secs(2);

/// How long a waiting line's queue entry outlives its last try (or
/// refresh): 3 x [`QUEUE_REFRESH`], so a line keeps its place through two
/// refreshes lost or late, and an unreachable line (cut off, frozen,
/// killed) holds a free lease back at most this long after its last try,
/// plus [`QUEUE_REFRESH`] until the next line's head tries again
/// (`docs/PROTOCOL.md`, "Waiting").
pub const QUEUE_ENTRY_TTL: Duration = Duration::from_millis(3 * QUEUE_REFRESH_MS);

/// How long after its line's last try a waiting line's head tries again
/// while the line is queued, whatever else it waits for: the try that
/// refreshes its queue entry ([`QUEUE_ENTRY_TTL`]); it is also the longest
/// a queued head sleeps while the lease is free and another line heads the
/// queue.
pub const QUEUE_REFRESH: Duration = Duration::from_millis(QUEUE_REFRESH_MS);

const QUEUE_REFRESH_MS: u64 = 500;
