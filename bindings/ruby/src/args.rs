//! Ruby values to core arguments. Everything is converted to Rust values
//! before any work runs without the GVL.

use crate::error;
use magnus::r_hash::ForEach;
use magnus::rb_sys::AsRawValue;
use magnus::{prelude::*, Error, Fixnum, Float, Integer, RHash, RString, Ruby, Symbol, Value};
use mistri_locks::{duration_from_secs, wait_timeout_from_secs, HoldOptions, OptionValue};
use std::sync::OnceLock;
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
        if let Some(borrowed) = unsafe { known_ascii(s).or_else(|| s.test_as_str()) } {
            return Ok(f(borrowed));
        }
    }
    let owned = key(ruby, what, v)?;
    Ok(f(&owned))
}

/// The encodings whose ASCII-only strings are UTF-8 text as they are:
/// UTF-8, US-ASCII and binary.
fn ascii_encodings() -> &'static [i32; 3] {
    static INDEXES: OnceLock<[i32; 3]> = OnceLock::new();
    // SAFETY: plain lookups of Ruby's built-in encoding indexes; we run on
    // a Ruby thread (a method call).
    INDEXES.get_or_init(|| unsafe {
        [
            rb_sys::rb_utf8_encindex(),
            rb_sys::rb_usascii_encindex(),
            rb_sys::rb_ascii8bit_encindex(),
        ]
    })
}

/// The text of a String that Ruby already knows to be ASCII-only (its
/// cached code range, in its flags) in one of [`ascii_encodings`], read
/// without a call into Ruby; `None` otherwise (magnus's check then scans
/// or converts). Half the cost of a Memory release's key is that check.
///
/// # Safety
/// As [`RString::test_as_str`]: the string must not change or be freed
/// while the `&str` lives.
unsafe fn known_ascii<'a>(s: RString) -> Option<&'a str> {
    use rb_sys::{ruby_coderange_type as cr, ruby_encoding_consts as enc, StableApiDefinition};
    let raw = s.as_raw();
    // SAFETY: `raw` is a live String (checked by the caller's
    // `RString::from_value`): its header, pointer and length are readable.
    unsafe {
        let flags = (*(raw as *const rb_sys::RBasic)).flags;
        if flags & cr::RUBY_ENC_CODERANGE_MASK as rb_sys::VALUE
            != cr::RUBY_ENC_CODERANGE_7BIT as rb_sys::VALUE
        {
            return None;
        }
        let index = ((flags & enc::RUBY_ENCODING_MASK as rb_sys::VALUE)
            >> enc::RUBY_ENCODING_SHIFT as rb_sys::VALUE) as i32;
        if !ascii_encodings().contains(&index) {
            return None;
        }
        let api = rb_sys::stable_api::get_default();
        let bytes = std::slice::from_raw_parts(
            api.rstring_ptr(raw).cast::<u8>(),
            usize::try_from(api.rstring_len(raw)).ok()?,
        );
        // ASCII bytes are valid UTF-8.
        Some(std::str::from_utf8_unchecked(bytes))
    }
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

/// How long an acquire or hold waits for a lease held elsewhere, by the
/// timeout rule: nil does not wait, zero tries once, +Infinity or more than
/// 1e9 seconds wait without limit (`Duration::MAX`); negative or NaN is an
/// ArgumentError naming `wait`.
pub fn wait(ruby: &Ruby, v: Option<Value>) -> Result<Option<Duration>, Error> {
    let Some(v) = v else { return Ok(None) };
    let secs = seconds(ruby, "wait", v)?;
    let wait = wait_timeout_from_secs("wait", secs).map_err(|e| error::to_ruby(ruby, e))?;
    Ok(Some(wait.unwrap_or(Duration::MAX)))
}

/// The `limit` of an N-holder lease: an Integer (anything else is a
/// TypeError). In u32's range the core checks it (1 to
/// `mistri_locks::MAX_LIMIT`, the message every face gives); out of it, the
/// same ArgumentError here.
pub fn limit(ruby: &Ruby, v: Value) -> Result<u32, Error> {
    let Some(n) = Integer::from_value(v) else {
        return Err(Error::new(
            ruby.exception_type_error(),
            format!("limit must be an Integer, got {}", class_name(v)),
        ));
    };
    n.to_i64()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            Error::new(
                ruby.exception_arg_error(),
                format!(
                    "limit must be between 1 and {}, got {}",
                    mistri_locks::MAX_LIMIT,
                    n
                ),
            )
        })
}

/// A hold's options from the keyword Hash of `hold` (Symbol or String
/// keys), read by name into the core's `HoldOptions::set`: the core holds
/// the one list of names (an unknown one is an ArgumentError naming the
/// nearest), their checks and their defaults. The signal, a host object,
/// is the caller's to set.
pub fn hold_options(ruby: &Ruby, options: RHash) -> Result<HoldOptions, Error> {
    let mut opts = HoldOptions::default();
    options.foreach(|name: Value, value: Value| {
        let name = key(ruby, "an option's name", name)?;
        // No nil for these: their default is a value (`ttl: nil` is a bug).
        if value.is_nil() && matches!(name.as_str(), "ttl" | "heartbeat" | "limit") {
            return Err(Error::new(
                ruby.exception_type_error(),
                format!("{name} must be a number, got nil"),
            ));
        }
        let value = option_value(ruby, &name, value)?;
        if let Err(e) = opts.set(&name, value) {
            return Err(error::to_ruby(ruby, e));
        }
        Ok(ForEach::Continue)
    })?;
    Ok(opts)
}

/// A Ruby value as an option value: nil (the default), true/false, an
/// Integer, a Float (or another Numeric, such as a Rational), a String or
/// a Symbol (text). Anything else is a TypeError naming the option.
pub fn option_value(ruby: &Ruby, name: &str, v: Value) -> Result<OptionValue, Error> {
    if v.is_nil() {
        return Ok(OptionValue::None);
    }
    if let Some(i) = Fixnum::from_value(v) {
        return Ok(OptionValue::Int(i.to_i64()));
    }
    if let Some(f) = Float::from_value(v) {
        return Ok(OptionValue::Float(f.to_f64()));
    }
    if let Some(i) = Integer::from_value(v) {
        return i.to_i64().map(OptionValue::Int).map_err(|_| {
            Error::new(
                ruby.exception_arg_error(),
                format!("{name} is out of range: {i}"),
            )
        });
    }
    if v.is_kind_of(ruby.class_numeric()) {
        return f64::try_convert(v).map(OptionValue::Float);
    }
    if v.is_kind_of(ruby.class_true_class()) {
        return Ok(OptionValue::Bool(true));
    }
    if v.is_kind_of(ruby.class_false_class()) {
        return Ok(OptionValue::Bool(false));
    }
    if RString::from_value(v).is_some() || Symbol::from_value(v).is_some() {
        return key(ruby, name, v).map(OptionValue::Text);
    }
    Err(Error::new(
        ruby.exception_type_error(),
        format!(
            "{name} must be a number, text or nil, got {}",
            class_name(v)
        ),
    ))
}
