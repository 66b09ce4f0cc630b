//! A Cluster beat's server clock (issue 28 §3c). Each master has its own
//! clock, and a beat reaches every master that owns one of its renewals,
//! so the beat pipelines one `TIME` per such master (routed by one of its
//! renewals' slots) and [`ClusterClock`] folds the answers into the one
//! server clock the engine's detector reads ([`crate::contract::adapter::Beat::server_clock`]):
//! a clock that runs with this host's, plus the largest jump ahead any
//! master made since its own last reading. The detector then sees a
//! master's step as the server clock's step. A step back is left out (it
//! makes expiry late, not early), as the detector leaves it out.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The per-master readings behind a Cluster adapter's server clock.
#[derive(Default)]
pub(crate) struct ClusterClock {
    /// Per master: its last `TIME` and when it was received.
    last: HashMap<String, (Duration, Instant)>,
    /// The folded clock, as of `at`.
    folded: Option<(Duration, Instant)>,
}

impl ClusterClock {
    /// Folds one beat's readings (`(master, TIME)`, all received by `now`)
    /// into the server clock, or `None` with no reading.
    pub(crate) fn read(
        &mut self,
        readings: &[(String, Duration)],
        now: Instant,
    ) -> Option<Duration> {
        let first = readings.first()?.1;
        let mut ahead = Duration::ZERO;
        for (master, server) in readings {
            if let Some((was, at)) = self.last.get(master) {
                // How far this master's clock moved beyond this host's.
                let host = now.saturating_duration_since(*at);
                ahead = ahead.max(server.saturating_sub(*was).saturating_sub(host));
            }
            self.last.insert(master.clone(), (*server, now));
        }
        let clock = match self.folded {
            Some((clock, at)) => clock + now.saturating_duration_since(at) + ahead,
            None => first,
        };
        self.folded = Some((clock, now));
        Some(clock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn steady_masters_give_a_clock_that_runs_with_the_hosts() {
        let mut clock = ClusterClock::default();
        let t0 = Instant::now();
        let read = |c: &mut ClusterClock, at: u64, a: u64, b: u64| {
            c.read(&[("a".into(), s(a)), ("b".into(), s(b))], t0 + s(at))
        };
        assert_eq!(read(&mut clock, 0, 100, 100), Some(s(100)));
        assert_eq!(read(&mut clock, 1, 101, 101), Some(s(101)));
        assert_eq!(read(&mut clock, 3, 103, 103), Some(s(103)));
        assert_eq!(clock.read(&[], t0 + s(4)), None);
    }

    #[test]
    fn one_master_jumping_ahead_moves_the_clock_by_its_jump_once() {
        let mut clock = ClusterClock::default();
        let t0 = Instant::now();
        let read = |c: &mut ClusterClock, at: u64, a: u64, b: u64| {
            c.read(&[("a".into(), s(a)), ("b".into(), s(b))], t0 + s(at))
        };
        assert_eq!(read(&mut clock, 0, 100, 200), Some(s(100)));
        // b steps 5 s ahead: the clock moves 1 s + 5 s.
        assert_eq!(read(&mut clock, 1, 101, 206), Some(s(106)));
        // and then runs on with the host's.
        assert_eq!(read(&mut clock, 2, 102, 207), Some(s(107)));
        // A step back tells nothing.
        assert_eq!(read(&mut clock, 3, 90, 208), Some(s(108)));
        // A master seen for the first time only starts its own readings.
        let c = clock.read(&[("c".into(), s(900))], t0 + s(4));
        assert_eq!(c, Some(s(109)));
    }
}
