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

/// A fresh owner token: 128 bits from the operating system's RNG, as 32
/// lowercase hex characters.
pub(crate) fn mint_token() -> Result<String> {
    let mut buf = [0u8; 16];
    getrandom::fill(&mut buf)
        .map_err(|e| Error::System(format!("the OS random number generator failed: {e}")))?;
    let mut s = String::with_capacity(32);
    for b in buf {
        s.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        s.push(char::from_digit(u32::from(b & 15), 16).unwrap_or('0'));
    }
    Ok(s)
}

/// This process's id, to tell a forked child from its parent.
pub(crate) fn current_pid() -> u32 {
    std::process::id()
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
    fn tokens_are_unique_hex() {
        let a = mint_token().unwrap();
        let b = mint_token().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn empty_keys_are_refused() {
        assert!(check_key("key", "").is_err());
        assert!(check_key("key", "a").is_ok());
    }
}
