//! `MistriLocks::Memory`: leases and flags inside this process (the core's
//! Memory adapter: real TTLs on a monotonic clock, expiry judged at read
//! time).

use crate::locks::RbLocks;
use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RModule, Ruby};
use mistri_locks::Locks;

/// `MistriLocks::Memory._new` (the receiver, so subclasses get their class;
/// `lib/mistri_locks/locks.rb` adds the keywords).
fn new(ruby: &Ruby, class: RClass) -> Obj<RbLocks> {
    ruby.obj_wrap_as(RbLocks::new(Locks::memory()), class)
}

pub fn init(_ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let base: RClass = module.const_get("Locks")?;
    let class = module.define_class("Memory", base)?;
    class.define_singleton_method("_new", method!(new, 0))?;
    Ok(())
}
