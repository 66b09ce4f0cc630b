//! The engine's clock against the host's suspends (issue 28 §3b).
//!
//! The engine's deadlines run on the monotonic clock (`Instant`:
//! `CLOCK_MONOTONIC` on Linux), which stops while the host is suspended;
//! the server keeps counting, and so does Local, which expires leases on
//! `CLOCK_BOOTTIME`. So after a suspend a holder's safe deadline is late by
//! the time suspended. `CLOCK_BOOTTIME − CLOCK_MONOTONIC` is the time the
//! host spent suspended since boot: the scheduler reads it at every wake
//! (at least once per [`super::MAX_TICK`] while it has holds; two or three
//! `clock_gettime` calls, no I/O) and when it grew by more than
//! [`SUSPEND_NOISE`], moves every safe deadline earlier by as much
//! ([`super::state::State::suspended`]): a hold whose deadline is then past
//! is told lost at once (its reason names the suspend), and one whose
//! deadline moved by its safety margin or more is told `at_risk`.
//!
//! Every deadline in the queues is expressed at the offset the watch last
//! saw ([`SuspendWatch::seen`]); a renewal's new deadline, computed from
//! its send time, is moved by the growth between its send and that offset
//! (so a suspend while it was in flight is counted once, whether the
//! scheduler saw it before or after the answer). Elsewhere than Linux the
//! offset reads 0: nothing is detected.
//!
//! Server clock steps (§3c): expiry on the server is absolute wall time
//! (Redis 7 replicates `PX` as `PXAT`; Postgres compares with
//! `clock_timestamp()`), so a server clock that jumps ahead by δ (a step,
//! or a promoted replica whose clock is ahead) expires every lease δ
//! early. Each beat's answer carries the server's clock
//! ([`crate::contract::adapter::Beat::server_clock`]); [`ServerClock`]
//! compares how far it moved since the last beat with how far this host's
//! clock (monotonic + suspended) moved between the two round trips, and a
//! jump ahead by more than a hold's safety margin tells it `at_risk`.

use super::status::ns;
#[cfg(target_os = "linux")]
use crate::runtime::clock::clock_ns as read;
use std::time::Duration;

/// Growth of the offset below this is read noise, not a suspend (the two
/// clocks are read a few nanoseconds apart; a read pair interrupted for
/// longer is read again).
pub(crate) const SUSPEND_NOISE: Duration = Duration::from_millis(2);

/// The time the host was suspended since boot, in nanoseconds:
/// `CLOCK_BOOTTIME − CLOCK_MONOTONIC` (Linux; 0 elsewhere). Read as
/// monotonic, boottime, monotonic, keeping the pair least apart of three
/// tries, so a preemption between the reads does not count as a suspend.
pub(crate) fn suspended_ns() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut best: Option<(u64, u64)> = None; // (spread, offset)
        for _ in 0..3 {
            let before = read(libc::CLOCK_MONOTONIC);
            let boot = read(libc::CLOCK_BOOTTIME);
            let after = read(libc::CLOCK_MONOTONIC);
            let spread = after.saturating_sub(before);
            let offset = boot.saturating_sub(after);
            if best.is_none_or(|(s, _)| spread < s) {
                best = Some((spread, offset));
            }
            if spread < 100_000 {
                break;
            }
        }
        best.map_or(0, |(_, offset)| offset)
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// The suspended time the engine has accounted for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SuspendWatch {
    /// The offset ([`suspended_ns`]) every queued deadline is expressed at.
    pub(crate) seen: u64,
}

impl Default for SuspendWatch {
    fn default() -> Self {
        SuspendWatch {
            seen: suspended_ns(),
        }
    }
}

impl SuspendWatch {
    /// A reading of [`suspended_ns`]: how long the host was suspended since
    /// the last suspend reported, if longer than [`SUSPEND_NOISE`] (smaller
    /// growths add up until they are).
    pub(crate) fn observe(&mut self, reading: u64) -> Option<Duration> {
        let grew = reading.saturating_sub(self.seen);
        if grew > ns(SUSPEND_NOISE) {
            self.seen = reading;
            return Some(Duration::from_nanos(grew));
        }
        None
    }

    /// How much earlier (nanoseconds; negative: later) a deadline computed
    /// from a send at offset `at_send` must be to be expressed at
    /// [`SuspendWatch::seen`]: earlier by a suspend the watch saw since the
    /// send; later by one before the send that it has not seen yet (it
    /// will move every deadline by that when it does). Growth within
    /// [`SUSPEND_NOISE`] moves nothing.
    pub(crate) fn since(&self, at_send: u64) -> i128 {
        let moved = i128::from(self.seen) - i128::from(at_send);
        if moved < -i128::from(ns(SUSPEND_NOISE)) {
            moved
        } else {
            moved.max(0)
        }
    }
}

/// One reading of the server's clock: this host's clock (monotonic +
/// suspended, nanoseconds) when the beat was sent and when it was
/// answered, and the server's wall clock read in between.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClockReading {
    pub(crate) sent: u64,
    pub(crate) done: u64,
    pub(crate) server: Duration,
}

/// The server's clock as the beats saw it last.
#[derive(Debug, Default)]
pub(crate) struct ServerClock {
    last: Option<ClockReading>,
}

/// What two clocks may drift apart without a step: 1,000 ppm (NTP slews
/// at most 500) of the time between the readings, plus a millisecond
/// (`TIME` and `clock_timestamp()` are microseconds).
fn slack(interval: u64) -> u64 {
    1_000_000 + interval / 1000
}

impl ServerClock {
    /// A new reading: how far (nanoseconds) the server's clock moved beyond
    /// what this host's clock allows since the last reading, ahead
    /// (positive) or back (negative); `None` within the round trips and
    /// [`slack`], or at the first reading.
    pub(crate) fn observe(&mut self, r: ClockReading) -> Option<i128> {
        let prev = self.last.replace(r)?;
        let server = i128::try_from(r.server.as_nanos()).ok()?
            - i128::try_from(prev.server.as_nanos()).ok()?;
        // The host's clock moved at least from the last answer to this
        // send, at most from the last send to this answer.
        let least = i128::from(r.sent) - i128::from(prev.done);
        let most = i128::from(r.done) - i128::from(prev.sent);
        let slack = i128::from(slack(r.done.saturating_sub(prev.sent)));
        if server > most + slack {
            Some(server - most)
        } else if server < least - slack {
            Some(server - least)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn read(sent_ms: u64, rtt_ms: u64, server_ms: u64) -> ClockReading {
        ClockReading {
            sent: sent_ms * MS,
            done: (sent_ms + rtt_ms) * MS,
            server: Duration::from_millis(server_ms),
        }
    }

    #[test]
    fn a_server_clock_that_moves_with_the_hosts_is_no_step() {
        let mut c = ServerClock::default();
        let base = 1_700_000_000_000;
        assert_eq!(c.observe(read(1_000, 2, base)), None, "the first reading");
        // A second later, read anywhere within the round trips.
        assert_eq!(c.observe(read(2_000, 2, base + 1_001)), None);
        assert_eq!(c.observe(read(3_000, 40, base + 2_030)), None);
        // A minute later, 0.5 ms apart per second (NTP's worst slew).
        assert_eq!(c.observe(read(63_000, 2, base + 62_030 + 30)), None);
    }

    #[test]
    fn a_jump_ahead_or_back_is_found_by_its_size() {
        let mut c = ServerClock::default();
        let base = 1_700_000_000_000;
        c.observe(read(1_000, 2, base));
        // A second later the server says 6 s later: ahead by about 5 s.
        let ahead = c.observe(read(2_000, 2, base + 6_000)).expect("a step");
        assert!(
            (4_990 * MS as i128..=5_000 * MS as i128).contains(&ahead),
            "{ahead}"
        );
        // The next second is normal again: no new step.
        assert_eq!(c.observe(read(3_000, 2, base + 7_000)), None);
        // Stepped back by 3 s.
        let back = c.observe(read(4_000, 2, base + 5_000)).expect("a step");
        assert!(
            (-3_002 * MS as i128..=-2_990 * MS as i128).contains(&back),
            "{back}"
        );
    }

    #[test]
    fn a_growth_beyond_the_noise_is_a_suspend_and_is_reported_once() {
        let mut w = SuspendWatch { seen: 5_000 * MS };
        assert_eq!(w.observe(5_000 * MS), None);
        assert_eq!(w.observe(5_001 * MS), None, "below the noise");
        // A 12.5 s suspend since the last report.
        assert_eq!(w.observe(17_500 * MS), Some(Duration::from_millis(12_500)));
        assert_eq!(w.seen, 17_500 * MS);
        assert_eq!(w.observe(17_500 * MS), None, "reported once");
        // Never negative (the clocks never make the offset shrink; a bad
        // read must not count as one).
        assert_eq!(w.observe(0), None);
        assert_eq!(w.seen, 17_500 * MS);
    }

    #[test]
    fn small_growths_add_up_until_they_pass_the_noise() {
        let mut w = SuspendWatch { seen: 0 };
        assert_eq!(w.observe(MS), None);
        assert_eq!(w.observe(2 * MS), None);
        assert_eq!(w.observe(3 * MS), Some(Duration::from_millis(3)));
    }

    #[test]
    fn a_deadline_from_before_a_suspend_the_watch_saw_is_moved_by_it() {
        let w = SuspendWatch { seen: 10_000 * MS };
        // Sent before a 4 s suspend the watch has accounted for: earlier.
        assert_eq!(w.since(6_000 * MS), 4_000 * i128::from(MS));
        // Sent after it: nothing to move.
        assert_eq!(w.since(10_000 * MS), 0);
        // Sent after a 1 s suspend the watch has not seen yet: later by it
        // (the watch moves every deadline 1 s earlier when it sees it).
        assert_eq!(w.since(11_000 * MS), -1_000 * i128::from(MS));
        // Read noise moves nothing.
        assert_eq!(w.since(10_000 * MS + 1), 0);
    }

    #[test]
    fn the_host_offset_reads_and_does_not_shrink() {
        let a = suspended_ns();
        let b = suspended_ns();
        // Read noise only (no suspend between two reads in a test).
        assert!(b + ns(SUSPEND_NOISE) >= a, "{a} then {b}");
    }
}
