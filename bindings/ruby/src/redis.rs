//! `MistriLocks::Redis`: leases and flags on a Redis server, shared with
//! every process (Ruby, Python, C, Rust) speaking the project's protocol.
//!
//! `lib/mistri_locks/locks.rb` defines `Redis.new(url:, namespace:)` with
//! the defaults; it calls `_open`. Opening parses the URL but connects
//! lazily: an unreachable server is a `MistriLocks::ConnectionError` from
//! the first operation. The connection pool is the core's and reconnects in
//! a forked child.

use crate::error;
use crate::locks::RbLocks;
use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RModule, RString, Ruby};
use mistri_locks::Locks;
use mistri_locks::{DEFAULT_NAMESPACE, DEFAULT_URL};

/// `MistriLocks::Redis._open(url, namespace)`.
fn open(
    ruby: &Ruby,
    class: RClass,
    url: RString,
    namespace: RString,
) -> Result<Obj<RbLocks>, Error> {
    let url = url.to_string()?;
    let namespace = namespace.to_string()?;
    let locks = Locks::redis(&url, &namespace).map_err(|e| error::to_ruby(ruby, e))?;
    Ok(ruby.obj_wrap_as(RbLocks::new(locks), class))
}

pub fn init(_ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let base: RClass = module.const_get("Locks")?;
    let class = module.define_class("Redis", base)?;
    class.const_set("DEFAULT_URL", DEFAULT_URL)?;
    class.const_set("DEFAULT_NAMESPACE", DEFAULT_NAMESPACE)?;
    class.define_singleton_method("_open", method!(open, 2))?;
    Ok(())
}
