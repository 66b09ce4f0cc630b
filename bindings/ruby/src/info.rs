//! `Adapter#info(key)`: the core's [`LeaseInfo`] as a Hash with symbol keys.

use magnus::{prelude::*, Error, RHash, Ruby, Value};
use mistri_locks::internals::unix_millis;
use mistri_locks::HolderInfo;
use mistri_locks::LeaseInfo;

/// `{key:, time_left:, holder:, fence:, acquired_at:, renewed_at:, ttl:,
/// heartbeat:, limit:, holders:}`: seconds as Floats, times as Unix
/// seconds; the holder's fields are nil when it stored no description, and
/// always for an N-holder lease, whose holders are the Array `holders:` (by
/// fence; each a Hash of `holder:`, `fence:`, `acquired_at:`,
/// `renewed_at:`, `ttl:`, `heartbeat:`) and whose `limit:` is the newest
/// holder's.
pub fn to_hash(ruby: &Ruby, info: &LeaseInfo) -> Result<RHash, Error> {
    let h = ruby.hash_new();
    let none = || ruby.qnil().as_value();
    let float = |f: f64| ruby.float_from_f64(f).as_value();
    h.aset(ruby.to_symbol("key"), ruby.str_new(&info.key))?;
    h.aset(
        ruby.to_symbol("time_left"),
        info.time_left
            .map(|t| float(t.as_secs_f64()))
            .unwrap_or_else(none),
    )?;
    describe(ruby, h, info.holder.as_ref())?;
    h.aset(ruby.to_symbol("limit"), info.limit)?;
    let holders = ruby.ary_new_capa(info.holders.len());
    for holder in &info.holders {
        let one = ruby.hash_new();
        describe(ruby, one, Some(holder))?;
        holders.push(one)?;
    }
    h.aset(ruby.to_symbol("holders"), holders)?;
    Ok(h)
}

/// One holder's fields into `h` (all nil for `None`).
fn describe(ruby: &Ruby, h: RHash, d: Option<&HolderInfo>) -> Result<(), Error> {
    let set = |name: &str, v: Value| h.aset(ruby.to_symbol(name), v);
    let none = || ruby.qnil().as_value();
    let float = |f: f64| ruby.float_from_f64(f).as_value();
    set(
        "holder",
        d.map(|d| ruby.str_new(&d.label).as_value())
            .unwrap_or_else(none),
    )?;
    set(
        "fence",
        d.map(|d| ruby.integer_from_u64(d.fence).as_value())
            .unwrap_or_else(none),
    )?;
    let secs = |t| float(unix_millis(t) as f64 / 1000.0);
    set(
        "acquired_at",
        d.map(|d| secs(d.acquired_at)).unwrap_or_else(none),
    )?;
    set(
        "renewed_at",
        d.map(|d| secs(d.renewed_at)).unwrap_or_else(none),
    )?;
    set(
        "ttl",
        d.map(|d| float(d.ttl.as_secs_f64())).unwrap_or_else(none),
    )?;
    set(
        "heartbeat",
        d.map(|d| float(d.heartbeat.as_secs_f64()))
            .unwrap_or_else(none),
    )?;
    Ok(())
}
