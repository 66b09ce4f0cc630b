//! `MistriLocks::Memory`: leases and flags inside this process (the core's
//! Memory adapter: real TTLs on a monotonic clock, expiry judged at read
//! time).

use crate::adapter::Adapter;
use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RModule, Ruby};
use mistri_locks::Locks;

/// `MistriLocks::Memory.new` (the receiver, so subclasses get their class).
fn new(ruby: &Ruby, class: RClass) -> Obj<Adapter> {
    ruby.obj_wrap_as(Adapter::new(Locks::memory(), false), class)
}

pub fn init(_ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let base: RClass = module.const_get("Adapter")?;
    let class = module.define_class("Memory", base)?;
    class.define_singleton_method("new", method!(new, 0))?;
    Ok(())
}
