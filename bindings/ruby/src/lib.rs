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

mod args;
mod delivery;
mod error;
mod events;
mod hold;
mod info;
mod local;
mod locks;
mod memory;
mod nogvl;
mod notes;
mod open;
mod operator;
mod postgres;
mod redis;
mod signal;
mod waiting;

use magnus::{function, prelude::*, Error, Ruby};
use mistri_locks::{FLAG_TTL, HEARTBEAT, LEASE_TTL};

/// `MistriLocks._configure(locks_or_nil)`: sets the core's process-wide
/// slot, the one `MistriLocks.hold` uses. (`MistriLocks.locks=` keeps the
/// Ruby object too, so `MistriLocks.locks` returns that very object.)
fn configure(locks: Option<&locks::RbLocks>) {
    mistri_locks::configure(locks.map(|l| l.locks().clone()));
}

/// `MistriLocks._job_stop_key(job_id)`: the stop flag of a job, the
/// core's `job::stop_key` (the protocol's one format, docs/PROTOCOL.md).
fn job_stop_key(ruby: &Ruby, job_id: magnus::Value) -> Result<String, Error> {
    let job_id = args::key(ruby, "job id", job_id)?;
    mistri_locks::job::stop_key(&job_id).map_err(|e| error::to_ruby(ruby, e))
}

/// `MistriLocks._job_options(hash)` -> the job's lease options checked,
/// with every default applied, by the core's `JobOptionsBuilder` (read by
/// name: an unknown name is an ArgumentError naming the nearest): a Hash
/// of `ttl`, `heartbeat`, `limit`, `wait` (Infinity: no limit),
/// `attempts`, `backoff` (nil: exponential) and the policies `on_conflict`,
/// `on_stopped`, `on_lost` as the core names them (`"retry"`, `"skip"`,
/// `"raise"`), and under `hold` the class's `JobHoldOptions` (what
/// `_job_hold` takes). Every refusal is an ArgumentError: these are a class's
/// declared options, refused when it loads.
fn job_options(ruby: &Ruby, options: magnus::RHash) -> Result<magnus::RHash, Error> {
    let mut builder = mistri_locks::job::JobOptions::builder();
    let refuse = |e: Error| Error::new(ruby.exception_arg_error(), e.to_string());
    // The core's wrong kind too (a TypeError elsewhere): declared options.
    let core_refusal = |e: mistri_locks::Error| match e {
        mistri_locks::Error::WrongType(m) => Error::new(ruby.exception_arg_error(), m),
        other => error::to_ruby(ruby, other),
    };
    options.foreach(|name: magnus::Value, value: magnus::Value| {
        let name = args::key(ruby, "an option's name", name).map_err(refuse)?;
        let value = args::option_value(ruby, &name, value).map_err(refuse)?;
        builder.set(&name, value).map_err(core_refusal)?;
        Ok(magnus::r_hash::ForEach::Continue)
    })?;
    let o = builder.build().map_err(|e| error::to_ruby(ruby, e))?;
    let out = ruby.hash_new();
    out.aset(ruby.to_symbol("ttl"), o.ttl.as_secs_f64())?;
    out.aset(ruby.to_symbol("heartbeat"), o.heartbeat.as_secs_f64())?;
    out.aset(ruby.to_symbol("limit"), o.limit)?;
    out.aset(
        ruby.to_symbol("wait"),
        o.wait.map_or(f64::INFINITY, |w| w.as_secs_f64()),
    )?;
    out.aset(ruby.to_symbol("attempts"), o.attempts)?;
    out.aset(
        ruby.to_symbol("backoff"),
        o.backoff.map(|b| b.as_secs_f64()),
    )?;
    out.aset(ruby.to_symbol("on_conflict"), o.on_conflict.name())?;
    out.aset(ruby.to_symbol("on_stopped"), o.on_stopped.name())?;
    out.aset(ruby.to_symbol("on_lost"), o.on_lost.name())?;
    out.aset(ruby.to_symbol("hold"), hold::JobHoldOptions::new(&o))?;
    Ok(out)
}

#[magnus::init(name = "mistri_locks")]
fn init(ruby: &Ruby) -> Result<(), Error> {
    mistri_locks::internals::set_language("ruby");
    let module = ruby.define_module("MistriLocks")?;
    module.const_set("LEASE_TTL", LEASE_TTL.as_secs())?;
    module.const_set("HEARTBEAT", HEARTBEAT.as_secs())?;
    module.const_set("FLAG_TTL", FLAG_TTL.as_secs())?;
    module.define_singleton_method("_configure", function!(configure, 1))?;
    module.define_singleton_method("_hold", function!(hold::start, 4))?;
    module.define_singleton_method("_job_stop_key", function!(job_stop_key, 1))?;
    module.define_singleton_method("_job_options", function!(job_options, 1))?;
    module.define_singleton_method("_job_hold", function!(hold::job_start, 5))?;
    error::init(ruby, module)?;
    delivery::init(ruby, module)?;
    signal::init(ruby, module)?;
    hold::init(ruby, module)?;
    locks::init(ruby, module)?;
    events::init(ruby, module)?;
    memory::init(ruby, module)?;
    redis::init(ruby, module)?;
    local::init(ruby, module)?;
    postgres::init(ruby, module)?;
    open::init(ruby, module)?;
    operator::init(ruby, module)?;
    Ok(())
}
