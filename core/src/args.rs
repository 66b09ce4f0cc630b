//! Argument validation shared by every face, so that an empty key or a NaN
//! TTL gets the same clear error from Rust, C, Python and Ruby.

use crate::error::{Error, Result};
use std::time::Duration;

/// Longest duration accepted anywhere (about 31 years): far beyond any
/// sensible lease, and small enough that milliseconds fit Redis' `PX`.
pub const MAX_SECS: f64 = 1.0e9;

/// Checks that `key` is usable as a lease or flag key: not empty.
///
/// `what` names the argument in the message (`"key"`, `"stop_key"`).
///
/// # Errors
/// [`Error::InvalidArgument`] when `key` is empty.
pub fn check_key(what: &str, key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidArgument(format!("{what} must not be empty")));
    }
    Ok(())
}

/// Checks a holder's label: not empty, no NUL, and not the byte 0x1F that
/// separates a stored label from the hold's stop key
/// ([`crate::Identity::stop_key`]).
///
/// # Errors
/// [`Error::InvalidArgument`] naming `what`.
pub fn check_label(what: &str, label: &str) -> Result<()> {
    check_key(what, label)?;
    if label.contains('\0') || label.contains('\u{1f}') {
        return Err(Error::InvalidArgument(format!(
            "{what} must not contain NUL or the unit separator (0x1F), got {label:?}"
        )));
    }
    Ok(())
}

/// Turns seconds (as Python, Ruby and C pass them) into a [`Duration`].
///
/// # Errors
/// [`Error::InvalidArgument`] when `secs` is NaN, infinite, zero, negative or
/// larger than [`MAX_SECS`].
///
/// # Examples
/// ```
/// use mistri_locks::duration_from_secs;
/// assert_eq!(duration_from_secs("ttl", 0.01).unwrap().as_millis(), 10);
/// assert!(duration_from_secs("ttl", f64::NAN).is_err());
/// assert!(duration_from_secs("ttl", 0.0).is_err());
/// ```
pub fn duration_from_secs(what: &str, secs: f64) -> Result<Duration> {
    if secs.is_nan() {
        return Err(Error::InvalidArgument(format!(
            "{what} must be a number of seconds, got NaN"
        )));
    }
    if secs.is_infinite() || secs > MAX_SECS {
        return Err(Error::InvalidArgument(format!(
            "{what} must be at most {MAX_SECS} seconds, got {secs}"
        )));
    }
    if secs <= 0.0 {
        return Err(Error::InvalidArgument(format!(
            "{what} must be greater than zero seconds, got {secs}"
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Turns a wait timeout in seconds (as Python, Ruby and C pass them) into
/// `Some(duration)`, or `None` for "wait without a timeout". One rule for
/// every face:
///
/// | seconds | means |
/// |---|---|
/// | NaN, negative | [`Error::InvalidArgument`] |
/// | `0` (or `-0.0`) | don't wait: just look |
/// | finite, up to [`MAX_SECS`] | wait that long |
/// | above [`MAX_SECS`], or `+inf` | wait without a timeout |
///
/// (A face's "no timeout" value — `None`, `nil` — also means no timeout.)
///
/// # Errors
/// [`Error::InvalidArgument`] naming `what`.
///
/// # Examples
/// ```
/// use mistri_locks::args::wait_timeout_from_secs;
/// use std::time::Duration;
/// assert_eq!(wait_timeout_from_secs("timeout", 0.0).unwrap(), Some(Duration::ZERO));
/// assert_eq!(wait_timeout_from_secs("timeout", f64::INFINITY).unwrap(), None);
/// assert_eq!(wait_timeout_from_secs("timeout", 2e9).unwrap(), None);
/// assert!(wait_timeout_from_secs("timeout", f64::NAN).is_err());
/// assert!(wait_timeout_from_secs("timeout", -1.0).is_err());
/// ```
pub fn wait_timeout_from_secs(what: &str, secs: f64) -> Result<Option<Duration>> {
    if secs.is_nan() {
        return Err(Error::InvalidArgument(format!(
            "{what} must be a number of seconds, got NaN"
        )));
    }
    if secs < 0.0 {
        return Err(Error::InvalidArgument(format!(
            "{what} must be zero or more seconds, got {secs}"
        )));
    }
    if secs > MAX_SECS {
        return Ok(None);
    }
    Ok(Some(Duration::from_secs_f64(secs)))
}

/// Checks a [`Duration`] passed from Rust: non-zero and at most [`MAX_SECS`].
pub(crate) fn check_duration(what: &str, d: Duration) -> Result<()> {
    if d.is_zero() {
        return Err(Error::InvalidArgument(format!(
            "{what} must be greater than zero"
        )));
    }
    if d.as_secs_f64() > MAX_SECS {
        return Err(Error::InvalidArgument(format!(
            "{what} must be at most {MAX_SECS} seconds, got {}",
            d.as_secs_f64()
        )));
    }
    Ok(())
}

/// Milliseconds for Redis `PX`/`PEXPIRE`, rounded up so that a TTL below one
/// millisecond still means "a moment", never "no expiry".
pub(crate) fn millis_ceil(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    ms.max(1) as u64
}

/// This process's fork generation: a number that differs in every forked
/// child (bumped by a `pthread_atfork` child handler, so reading it is one
/// atomic load, not a `getpid` call). The one fork detector of every face:
/// state that a child must rebuild remembers the generation it was made in.
///
/// # Examples
/// ```
/// let made_in = mistri_locks::fork_generation();
/// assert_eq!(made_in, mistri_locks::fork_generation()); // same process
/// ```
pub fn fork_generation() -> u64 {
    crate::runtime::fork::generation()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_validated() {
        for bad in [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            -1.0,
            2.0e9,
        ] {
            let err = duration_from_secs("ttl", bad).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{bad}: {err}");
            assert!(err.to_string().contains("ttl"), "{err}");
        }
        assert_eq!(
            duration_from_secs("ttl", 0.01).unwrap(),
            Duration::from_millis(10)
        );
        assert!(check_duration("heartbeat", Duration::ZERO).is_err());
    }

    #[test]
    fn millis_round_up() {
        assert_eq!(millis_ceil(Duration::from_micros(1)), 1);
        assert_eq!(millis_ceil(Duration::from_micros(1500)), 2);
        assert_eq!(millis_ceil(Duration::from_millis(10)), 10);
    }

    #[test]
    fn empty_keys_are_refused() {
        assert!(check_key("key", "").is_err());
        assert!(check_key("key", "a").is_ok());
    }
}
