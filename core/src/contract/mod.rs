//! What a backend is: the [`adapter::Adapter`] trait and the values it
//! trades in (leases, renewals, beats), the descriptions `info` and `list`
//! return, the fence rule, the push registry a backend's listener feeds
//! and the one listener lifecycle that feeds it,
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

/// How long a waiting line's queue entry outlives its last try:
/// 3 x [`SAFETY_POLL`], so a line that tries on the safety poll keeps its
/// place, and a crashed process's place frees itself.
pub const QUEUE_ENTRY_TTL: Duration = Duration::from_secs(3 * SAFETY_POLL.as_secs());
