//! Reading the replies of the protocol's scripts and commands (the
//! Cluster reads them the same way).

use crate::args::millis_ceil;
use crate::contract::adapter::Renewed;
use crate::contract::info::{from_unix_millis, unpack_label, HolderInfo};
use crate::error::{Error, Result};
use ::redis::Value;
use std::time::Duration;

/// The holder description in a lease's value (`TOKEN TTL_MS FENCE
/// ACQUIRED_MS HEARTBEAT_MS LABEL`, written by [`ACQUIRE_LUA`]), read when
/// the lease had `time_left` and the server's clock said `now_ms`; `None`
/// for a bare token (a client that stores no description). The token is
/// dropped here and never leaves.
///
/// The last renewal is not stored (a renewal writes only the expiry): it is
pub(crate) fn holder_from(
    value: &[u8],
    time_left: Option<Duration>,
    now_ms: u64,
) -> Option<HolderInfo> {
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.splitn(6, ' ');
    let _token = parts.next()?;
    let mut num = || parts.next()?.parse::<u64>().ok();
    let (ttl_ms, fence, acquired_ms, heartbeat_ms) = (num()?, num()?, num()?, num()?);
    let label = parts.next()?;
    let renewed_ms = match time_left {
        Some(left) => now_ms
            .saturating_sub(ttl_ms.saturating_sub(left.as_millis() as u64))
            .clamp(acquired_ms.min(now_ms), now_ms),
        None => acquired_ms,
    };
    let (label, stop_key) = unpack_label(label.to_owned());
    Some(HolderInfo {
        label,
        stop_key,
        fence,
        acquired_at: from_unix_millis(acquired_ms),
        renewed_at: from_unix_millis(renewed_ms),
        ttl: Duration::from_millis(ttl_ms),
        heartbeat: Duration::from_millis(heartbeat_ms),
    })
}

/// `text` with Redis glob metacharacters escaped, for `SCAN MATCH`.
pub(crate) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `ARGV[3]` of the renew script: at least `d`, in whole milliseconds
/// (rounded up, so the condition is never weaker than asked); 0 for none.
pub(crate) fn min_left_ms(d: Duration) -> u64 {
    if d.is_zero() {
        0
    } else {
        millis_ceil(d)
    }
}

/// What a renew script's reply means; anything else is an error.
pub(crate) fn renewed_from(value: &Value, addr: &str) -> Result<Renewed> {
    match value {
        Value::Int(1) => Ok(Renewed::Yes),
        Value::Int(0) => Ok(Renewed::NotHeld),
        Value::Int(-1) => Ok(Renewed::TooLate),
        other => Err(item_error(other, addr)),
    }
}

/// What an EXISTS reply means; anything else is an error.
pub(crate) fn flag_from(value: &Value, addr: &str) -> Result<bool> {
    match value {
        Value::Int(n @ (0 | 1)) => Ok(*n == 1),
        other => Err(item_error(other, addr)),
    }
}

pub(crate) fn item_error(value: &Value, addr: &str) -> Error {
    match value {
        Value::ServerError(e) => {
            Error::Backend(format!("Redis at {addr} answered with an error: {e:?}"))
        }
        other => Error::Backend(format!(
            "Redis at {addr} sent an unexpected reply: {other:?}"
        )),
    }
}

pub(crate) fn is_noscript(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

/// Takes a password out of an error message that quotes the URL.
pub(crate) fn redact(message: &str, url: &str) -> String {
    match url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
    {
        Some((userinfo, _)) if !userinfo.is_empty() => message.replace(userinfo, "***"),
        _ => message.to_owned(),
    }
}
