//! Values across the boundary: options by name (a JS value becomes the
//! core's `OptionValue`; the core's setters check them) and the core's
//! descriptions (lease info, listing, stats) as plain JS objects.

use mistri_locks::internals::unix_millis;
use mistri_locks::{FlagInfo, HolderInfo, LeaseInfo, Listing, OptionValue, StatValue};
use napi_derive::napi;
use serde_json::{json, Map, Value};
use std::time::SystemTime;

/// One option as `lib/index.cjs` sends it: the core's name and exactly one
/// of a number, a text or a boolean (none: not given).
#[napi(object)]
pub struct Opt {
    pub name: String,
    pub number: Option<f64>,
    pub text: Option<String>,
    pub flag: Option<bool>,
}

/// JavaScript has one number type: an integral number (within 2^53) is an
/// integer, anything else (fractions, NaN, ±Infinity) a float.
pub fn value(opt: &Opt) -> OptionValue {
    if let Some(x) = opt.number {
        const SAFE: f64 = 9_007_199_254_740_991.0;
        if x.fract() == 0.0 && x.abs() <= SAFE {
            // Exact: integral and within i64.
            #[allow(clippy::cast_possible_truncation)]
            return OptionValue::Int(x as i64);
        }
        return OptionValue::Float(x);
    }
    if let Some(t) = &opt.text {
        return OptionValue::Text(t.clone());
    }
    if let Some(b) = opt.flag {
        return OptionValue::Bool(b);
    }
    OptionValue::None
}

/// Hold options from named values, through the core's one setter.
pub fn hold_options(opts: &[Opt]) -> mistri_locks::Result<mistri_locks::HoldOptions> {
    let mut h = mistri_locks::HoldOptions::default();
    for o in opts {
        h.set(&o.name, value(o))?;
    }
    Ok(h)
}

/// Open options from named values, through the core's one setter.
pub fn open_options(opts: &[Opt]) -> mistri_locks::Result<mistri_locks::OpenOptions> {
    let mut o = mistri_locks::OpenOptions::default();
    for opt in opts {
        o.set(&opt.name, value(opt))?;
    }
    Ok(o)
}

fn unix_secs(t: SystemTime) -> f64 {
    // Milliseconds since 1970 fit an f64 exactly for millions of years.
    #[allow(clippy::cast_precision_loss)]
    let ms = unix_millis(t) as f64;
    ms / 1000.0
}

fn holder(map: &mut Map<String, Value>, h: Option<&HolderInfo>) {
    map.insert("holder".into(), json!(h.map(|h| h.label.clone())));
    map.insert("fence".into(), json!(h.map(|h| h.fence)));
    map.insert(
        "acquiredAt".into(),
        json!(h.map(|h| unix_secs(h.acquired_at))),
    );
    map.insert(
        "renewedAt".into(),
        json!(h.map(|h| unix_secs(h.renewed_at))),
    );
    map.insert("ttl".into(), json!(h.map(|h| h.ttl.as_secs_f64())));
    map.insert(
        "heartbeat".into(),
        json!(h.map(|h| h.heartbeat.as_secs_f64())),
    );
    map.insert("stopKey".into(), json!(h.and_then(|h| h.stop_key.clone())));
}

/// `{key, timeLeft, holder, fence, acquiredAt, renewedAt, ttl, heartbeat,
/// stopKey, limit, holders}`: seconds, times as Unix seconds (the Python
/// face's dict, in JavaScript's spelling).
pub fn lease_info(info: &LeaseInfo) -> Value {
    let mut map = Map::new();
    map.insert("key".into(), json!(info.key));
    map.insert(
        "timeLeft".into(),
        json!(info.time_left.map(|t| t.as_secs_f64())),
    );
    holder(&mut map, info.holder.as_ref());
    map.insert("limit".into(), json!(info.limit));
    let holders: Vec<Value> = (info.holders.iter())
        .map(|h| {
            let mut one = Map::new();
            holder(&mut one, Some(h));
            Value::Object(one)
        })
        .collect();
    map.insert("holders".into(), Value::Array(holders));
    Value::Object(map)
}

fn flag_info(flag: &FlagInfo) -> Value {
    json!({"key": flag.key, "timeLeft": flag.time_left.map(|t| t.as_secs_f64())})
}

/// `{leases: [...], flags: [...], waiting: [{key, lines, oldestWait}]}`.
pub fn listing(listing: &Listing) -> Value {
    json!({
        "leases": listing.leases.iter().map(lease_info).collect::<Vec<_>>(),
        "flags": listing.flags.iter().map(flag_info).collect::<Vec<_>>(),
        "waiting": listing.waiting.iter().map(|w| json!({
            "key": w.key, "lines": w.lines, "oldestWait": w.oldest_wait.as_secs_f64(),
        })).collect::<Vec<_>>(),
    })
}

/// Every counter by the core's name (`holds_active`, …; seconds or null).
pub fn stats(snapshot: &mistri_locks::StatsSnapshot) -> Value {
    let mut map = Map::new();
    for (name, v) in snapshot.entries() {
        let v = match v {
            StatValue::Count(n) => json!(n),
            StatValue::Seconds(s) => json!(s),
        };
        map.insert(name.into(), v);
    }
    Value::Object(map)
}
