//! Ruby values to core arguments. Everything is converted to Rust values
//! before any work runs without the GVL.

use crate::error;
use magnus::{prelude::*, Error, Fixnum, Float, Integer, RString, Ruby, Symbol, Value};
use mistri_locks::{duration_from_secs, wait_timeout_from_secs, AbortSignal, HoldOptions};
use std::time::Duration;

fn class_name(v: Value) -> String {
    // SAFETY: `classname` reads the class's name; `v` is a live value
    // passed to us by Ruby, and the name is copied before Ruby runs again.
    unsafe { v.classname() }.into_owned()
}

/// A lease or flag key: a String (valid in its encoding, converted to UTF-8)
/// or a Symbol (its name). Emptiness is the core's check.
pub fn key(ruby: &Ruby, what: &str, v: Value) -> Result<String, Error> {
    if let Some(s) = RString::from_value(v) {
        return s.to_string().map_err(|_| {
            Error::new(
                ruby.exception_arg_error(),
                format!("{what} must be valid text (UTF-8 convertible)"),
            )
        });
    }
    if let Some(sym) = Symbol::from_value(v) {
        return Ok(sym.name()?.into_owned());
    }
    Err(Error::new(
        ruby.exception_type_error(),
        format!("{what} must be a String or Symbol, got {}", class_name(v)),
    ))
}

/// Calls `f` with the key as a `&str`, borrowing a UTF-8 String's bytes
/// instead of copying them when it can. Only for work that keeps the GVL
/// and never calls back into Ruby (Memory operations): with the GVL held
/// and no Ruby code running, nothing can modify or free the string, and the
/// `Value` on our stack keeps it alive.
pub fn with_key<R>(
    ruby: &Ruby,
    what: &str,
    v: Value,
    f: impl FnOnce(&str) -> R,
) -> Result<R, Error> {
    if let Some(s) = RString::from_value(v) {
        // SAFETY: see above; the borrow ends when `f` returns.
        if let Some(borrowed) = unsafe { s.test_as_str() } {
            return Ok(f(borrowed));
        }
    }
    let owned = key(ruby, what, v)?;
    Ok(f(&owned))
}

/// Seconds as a Ruby number (Integer, Float, or another Numeric such as a
/// Rational), as a plain `f64`. Anything else is a TypeError.
pub fn seconds(ruby: &Ruby, what: &str, v: Value) -> Result<f64, Error> {
    // The common cases first, without a call into Ruby: a small Integer
    // (`ttl: 30`) or a Float.
    if let Some(i) = Fixnum::from_value(v) {
        return Ok(i.to_i64() as f64);
    }
    if let Some(f) = Float::from_value(v) {
        return Ok(f.to_f64());
    }
    if Integer::from_value(v).is_some() || v.is_kind_of(ruby.class_numeric()) {
        return f64::try_convert(v);
    }
    Err(Error::new(
        ruby.exception_type_error(),
        format!(
            "{what} must be a number of seconds (Integer or Float), got {}",
            class_name(v)
        ),
    ))
}

/// A positive duration (NaN, infinite, zero, negative or huge values are an
/// ArgumentError from the core's one validator).
pub fn duration(ruby: &Ruby, what: &str, v: Value) -> Result<Duration, Error> {
    let secs = seconds(ruby, what, v)?;
    duration_from_secs(what, secs).map_err(|e| error::to_ruby(ruby, e))
}

/// A wait's timeout, by the core's one rule for every face
/// (`mistri_locks::wait_timeout_from_secs`): nil, +Infinity or more than
/// 1e9 seconds wait forever; zero just looks; negative or NaN is an
/// ArgumentError.
pub fn timeout(ruby: &Ruby, v: Option<Value>) -> Result<Option<Duration>, Error> {
    let Some(v) = v else { return Ok(None) };
    let secs = seconds(ruby, "timeout", v)?;
    wait_timeout_from_secs("timeout", secs).map_err(|e| error::to_ruby(ruby, e))
}

/// Hold options from Ruby values (the signal is already a core signal).
pub fn hold_options(
    ruby: &Ruby,
    ttl: Value,
    heartbeat: Value,
    stop_key: Option<Value>,
    signal: Option<AbortSignal>,
    safety_margin: Option<Value>,
    label: Option<Value>,
) -> Result<HoldOptions, Error> {
    Ok(HoldOptions {
        ttl: duration(ruby, "ttl", ttl)?,
        heartbeat: duration(ruby, "heartbeat", heartbeat)?,
        stop_key: stop_key.map(|k| key(ruby, "stop_key", k)).transpose()?,
        signal,
        safety_margin: safety_margin
            .map(|m| duration(ruby, "safety_margin", m))
            .transpose()?,
        label: label.map(|l| key(ruby, "label", l)).transpose()?,
        ..HoldOptions::default()
    })
}
