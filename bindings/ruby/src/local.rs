//! `MistriLocks::Local`: leases and flags shared by every process on this
//! host through an SQLite database file (the core's Local adapter), with no
//! server.
//!
//! `lib/mistri_locks/locks.rb` defines `Local.new(path: nil)`; it calls
//! `_open`. `nil` means the per-user default file. Operations are file I/O
//! that may wait for another process's transaction (up to the core's 5 s
//! busy timeout), so they run without the GVL like Redis round trips.

use crate::error;
use crate::locks::RbLocks;
use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RModule, RString, Ruby};
use mistri_locks::Locks;

/// `MistriLocks::Local._open(path_or_nil)`.
fn open(ruby: &Ruby, class: RClass, path: Option<RString>) -> Result<Obj<RbLocks>, Error> {
    let path = path.map(|p| p.to_string()).transpose()?;
    let locks = Locks::local(path.as_deref().map(std::path::Path::new))
        .map_err(|e| error::to_ruby(ruby, e))?;
    Ok(ruby.obj_wrap_as(RbLocks::new(locks), class))
}

pub fn init(_ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let base: RClass = module.const_get("Locks")?;
    let class = module.define_class("Local", base)?;
    class.define_singleton_method("_open", method!(open, 1))?;
    Ok(())
}
