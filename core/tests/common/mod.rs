//! Helpers shared by the core's integration tests.

#![allow(dead_code)] // each test binary uses its own subset

use mistri_locks::HoldOptions;
use std::time::Duration;

/// Seconds as a `Duration`.
pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// Hold options with this ttl and heartbeat (seconds), the rest default.
pub fn opts(ttl: f64, heartbeat: f64) -> HoldOptions {
    HoldOptions {
        ttl: secs(ttl),
        heartbeat: secs(heartbeat),
        ..HoldOptions::default()
    }
}
