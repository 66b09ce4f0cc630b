//! Fencing numbers: strictly increasing per key, also after a backend lost
//! its data.
//!
//! Every backend keeps a counter and issues `max(counter + 1, floor)`, where
//! `floor` is a realtime clock read in **microseconds since the Unix epoch**
//! (Redis: the server's `TIME`, inside the acquire script; Local and Memory:
//! this host's `CLOCK_REALTIME`, [`floor_now`]). When the floor wins, the
//! counter is set to it. So:
//!
//! - while the counter lives, fences rise by at least one per acquire
//!   whatever the clock does (a clock stepped back just lets the counter win);
//! - when the counter is lost (Redis restarted without persistence,
//!   `FLUSHALL`, a failover to a replica that missed the write, eviction, a
//!   Local database file deleted or recreated), the next fence is the clock
//!   reading, which is above every fence issued before **as long as the clock
//!   did not step back by more than the time between the last acquire before
//!   the loss and the first one after it**. A fence only runs ahead of its
//!   clock when one key is acquired more than once per microsecond, which no
//!   backend here can do.
//!
//! The numbers fit an `i64` until the year 294 000 and stay below 2^53 (exact
//! in a Lua double, which Redis scripts compute with) until the year 2255.
//! They are large (about 1.8 × 10^15 in 2026): compare them, never count
//! with them.

use std::time::{SystemTime, UNIX_EPOCH};

/// The clock floor for a fence issued now: microseconds since the Unix epoch
/// on this host's realtime clock, at least 1 (a clock set before 1970 floors
/// nothing, and the counter alone decides).
pub fn floor_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(i64::MAX as u64))
        .unwrap_or(0)
        .clamp(1, i64::MAX as u64)
}

/// The fence after `last` (the counter's value, 0 for none): `max(last + 1,
/// floor)`, capped at `i64::MAX` so it fits every face's integer type.
pub fn next(last: u64, floor: u64) -> u64 {
    last.saturating_add(1).max(floor).min(i64::MAX as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_microseconds_since_the_epoch() {
        let floor = floor_now();
        // 2025-01-01 .. 2255 (below 2^53, exact in a Lua double)
        assert!(floor > 1_735_689_600_000_000, "{floor}");
        assert!(floor < 1 << 53, "{floor}");
    }

    #[test]
    fn next_takes_the_larger_and_always_rises() {
        assert_eq!(next(0, 1_000), 1_000);
        assert_eq!(next(5_000, 1_000), 5_001);
        assert_eq!(next(999, 1_000), 1_000);
        assert_eq!(next(1_000, 1_000), 1_001);
        assert_eq!(next(i64::MAX as u64, 1), i64::MAX as u64);
    }
}
