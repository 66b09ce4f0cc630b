//! The Ruby face of mistri_locks: the native half of `require "mistri_locks"`.
//!
//! Layout (wasmtime-rb style): one file per Ruby class, each with an `init`.
//! The Ruby half (`lib/mistri_locks*.rb`) holds the idiom: keyword
//! arguments and their defaults, block forms, the exception classes and the
//! delivery of aborts to Ruby objects. Methods defined here whose names start
//! with `_` are private plumbing for that Ruby half.
//!
//! Threads: the core's heartbeat is a Rust thread and never calls Ruby. It
//! trips core signals; `delivery` queues a note for each Ruby object that
//! wants to hear about it, and one Ruby thread (`MistriLocks::Delivery`)
//! takes the notes and calls the Ruby objects. Blocking calls (Redis round
//! trips, waits) run without the GVL through [`nogvl::nogvl`]; Memory
//! operations keep the GVL (releasing it costs more than they do).

mod adapter;
mod args;
mod delivery;
mod error;
mod fork;
mod hold;
mod info;
mod local;
mod memory;
mod nogvl;
mod redis;
mod signal;

use magnus::{function, prelude::*, Error, Ruby, Value};
use mistri_locks::{HoldOptions, FLAG_TTL, HEARTBEAT, LEASE_TTL};

/// `MistriLocks._check_hold_args(key, ttl, heartbeat, stop_key, safety_margin)`: the
/// argument checks of a hold, for `MistriLocks.hold` when no adapter is
/// configured (it returns nil, but still tells a caller its arguments are
/// wrong, as the core does).
fn check_hold_args(
    ruby: &Ruby,
    key: Value,
    ttl: Value,
    heartbeat: Value,
    stop_key: Option<Value>,
    safety_margin: Option<Value>,
) -> Result<(), Error> {
    let key = args::key(ruby, "key", key)?;
    let opts = args::hold_options(ruby, ttl, heartbeat, stop_key, None, safety_margin)?;
    mistri_locks::args::check_key("key", &key).map_err(|e| error::to_ruby(ruby, e))?;
    HoldOptions::validate(&opts).map_err(|e| error::to_ruby(ruby, e))
}

#[magnus::init(name = "mistri_locks")]
fn init(ruby: &Ruby) -> Result<(), Error> {
    fork::init();
    mistri_locks::info::set_language("ruby");
    let module = ruby.define_module("MistriLocks")?;
    module.const_set("LEASE_TTL", LEASE_TTL.as_secs())?;
    module.const_set("HEARTBEAT", HEARTBEAT.as_secs())?;
    module.const_set("FLAG_TTL", FLAG_TTL.as_secs())?;
    module.define_singleton_method("_check_hold_args", function!(check_hold_args, 5))?;
    error::init(ruby, module)?;
    delivery::init(ruby, module)?;
    signal::init(ruby, module)?;
    hold::init(ruby, module)?;
    adapter::init(ruby, module)?;
    memory::init(ruby, module)?;
    redis::init(ruby, module)?;
    local::init(ruby, module)?;
    Ok(())
}
