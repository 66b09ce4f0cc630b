//! `Locks#info(key)` and `Locks#list(prefix)`: the core's [`LeaseInfo`] and
//! [`Listing`] as Hashes with symbol keys (the same Hash for a lease either
//! way, so code that reads `info` reads every lease of a `list`).

use magnus::{prelude::*, Error, RHash, Ruby, Value};
use mistri_locks::internals::unix_millis;
use mistri_locks::{FlagInfo, HolderInfo, LeaseInfo, Listing};
use std::time::{Duration, SystemTime};

/// `{key:, time_left:, holder:, fence:, acquired_at:, renewed_at:, ttl:,
/// heartbeat:, stop_key:, limit:, holders:}`: seconds as Floats, times as Unix
/// seconds; the holder's fields are nil when it stored no description, and
/// always for an N-holder lease, whose holders are the Array `holders:` (by
/// fence; each a Hash of `holder:`, `fence:`, `acquired_at:`,
/// `renewed_at:`, `ttl:`, `heartbeat:`, `stop_key:`) and whose `limit:` is the newest
/// holder's.
pub fn to_hash(ruby: &Ruby, info: &LeaseInfo) -> Result<RHash, Error> {
    let h = ruby.hash_new();
    h.aset(ruby.to_symbol("key"), ruby.str_new(&info.key))?;
    h.aset(ruby.to_symbol("time_left"), seconds(ruby, info.time_left))?;
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

/// `{leases: [info Hash, ...], flags: [{key:, time_left:}, ...], waiting:
/// [{key:, lines:, oldest_wait:}, ...]}`, each sorted by key (the core
/// sorts); a flag's `time_left:` is nil when it has no expiry;
/// `oldest_wait:` is the Float seconds the first waiting line has waited.
pub fn listing_to_hash(ruby: &Ruby, listing: &Listing) -> Result<RHash, Error> {
    let leases = ruby.ary_new_capa(listing.leases.len());
    for lease in &listing.leases {
        leases.push(to_hash(ruby, lease)?)?;
    }
    let flags = ruby.ary_new_capa(listing.flags.len());
    for flag in &listing.flags {
        flags.push(flag_to_hash(ruby, flag)?)?;
    }
    let waiting = ruby.ary_new_capa(listing.waiting.len());
    for w in &listing.waiting {
        let one = ruby.hash_new();
        one.aset(ruby.to_symbol("key"), ruby.str_new(&w.key))?;
        one.aset(ruby.to_symbol("lines"), w.lines)?;
        one.aset(ruby.to_symbol("oldest_wait"), w.oldest_wait.as_secs_f64())?;
        waiting.push(one)?;
    }
    let h = ruby.hash_new();
    h.aset(ruby.to_symbol("leases"), leases)?;
    h.aset(ruby.to_symbol("flags"), flags)?;
    h.aset(ruby.to_symbol("waiting"), waiting)?;
    Ok(h)
}

fn flag_to_hash(ruby: &Ruby, flag: &FlagInfo) -> Result<RHash, Error> {
    let h = ruby.hash_new();
    h.aset(ruby.to_symbol("key"), ruby.str_new(&flag.key))?;
    h.aset(ruby.to_symbol("time_left"), seconds(ruby, flag.time_left))?;
    Ok(h)
}

/// A duration as Float seconds, or nil.
fn seconds(ruby: &Ruby, d: Option<Duration>) -> Value {
    d.map_or_else(
        || ruby.qnil().as_value(),
        |d| ruby.float_from_f64(d.as_secs_f64()).as_value(),
    )
}

/// A wall-clock time as Float Unix seconds (millisecond precision, as the
/// backends store it; a time before 1970 reads as 0).
fn unix_seconds(ruby: &Ruby, t: SystemTime) -> Value {
    ruby.float_from_f64(unix_millis(t) as f64 / 1000.0)
        .as_value()
}

/// The keys [`describe`] sets.
const HOLDER_FIELDS: [&str; 7] = [
    "holder",
    "fence",
    "acquired_at",
    "renewed_at",
    "ttl",
    "heartbeat",
    "stop_key",
];

/// One holder's fields into `h` (all nil for `None`).
fn describe(ruby: &Ruby, h: RHash, d: Option<&HolderInfo>) -> Result<(), Error> {
    let set = |name: &str, v: Value| h.aset(ruby.to_symbol(name), v);
    let Some(d) = d else {
        for name in HOLDER_FIELDS {
            set(name, ruby.qnil().as_value())?;
        }
        return Ok(());
    };
    set("holder", ruby.str_new(&d.label).as_value())?;
    set("fence", ruby.integer_from_u64(d.fence).as_value())?;
    set("acquired_at", unix_seconds(ruby, d.acquired_at))?;
    set("renewed_at", unix_seconds(ruby, d.renewed_at))?;
    set("ttl", seconds(ruby, Some(d.ttl)))?;
    set("heartbeat", seconds(ruby, Some(d.heartbeat)))?;
    set(
        "stop_key",
        d.stop_key
            .as_deref()
            .map_or_else(|| ruby.qnil().as_value(), |s| ruby.str_new(s).as_value()),
    )?;
    Ok(())
}
