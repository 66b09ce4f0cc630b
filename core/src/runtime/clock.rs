//! The host's clocks, read directly with `clock_gettime`: the Local
//! store's expiry clock (`CLOCK_BOOTTIME`) and the heartbeat engine's
//! suspend check (boottime against monotonic) read them through here.

/// Nanoseconds on `clock`, or 0 if it cannot be read (only an invalid
/// clock id fails, which the callers' constants are not).
pub(crate) fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime writes only
    // it.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}
