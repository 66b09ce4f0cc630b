//! `MistriLocks::Adapter`: the seed's seven operations over a core
//! [`Locks`], the base class of `MistriLocks::Memory` and
//! `MistriLocks::Redis`.
//!
//! Native part: `release`, `held?`, `flag?`, `clear_flag`, `fence`,
//! `break_lease`, `sharing_adapter`, `active_holds`, and the plumbing
//! `_acquire`, `_renew`, `_set_flag`, `_hold` behind the keyword-argument
//! methods of `lib/mistri_locks/adapter.rb` (a Ruby method with keywords
//! is cheaper than a C method parsing a keyword Hash).
//!
//! Memory operations keep the GVL: they take microseconds, less than
//! releasing and retaking it. Redis operations are round trips and run
//! without it (see `nogvl`).

use crate::args;
use crate::error;
use crate::hold::RbHold;
use crate::nogvl::{nogvl, uninterruptible};
use crate::signal::Signal;
use magnus::{method, prelude::*, typed_data::Obj, Error, RModule, Ruby, Value};
use mistri_locks::Locks;

#[magnus::wrap(class = "MistriLocks::Adapter", free_immediately, size)]
pub struct Adapter {
    /// After `fork` the core reconnects, forgets the parent's issued leases
    /// and starts a fresh heartbeat engine by itself.
    locks: Locks,
    /// Operations are network round trips (release the GVL for them).
    remote: bool,
}

impl Adapter {
    pub fn new(locks: Locks, remote: bool) -> Self {
        Adapter { locks, remote }
    }

    /// The core object.
    fn locks(&self) -> &Locks {
        &self.locks
    }

    /// Runs one core operation, without the GVL if it is a round trip.
    fn run<R>(
        &self,
        ruby: &Ruby,
        op: impl FnOnce(&Locks) -> mistri_locks::Result<R>,
    ) -> Result<R, Error> {
        let locks = self.locks();
        let result = if self.remote {
            nogvl(ruby, || op(locks), uninterruptible)?
        } else {
            op(locks)
        };
        result.map_err(|e| error::to_ruby(ruby, e))
    }

    /// Like [`Adapter::run`] for an operation on one key. Memory keeps the
    /// GVL and borrows the key's bytes (no copy: the hot path of the seed's
    /// contract); a round trip copies the key first, since another Ruby
    /// thread may change the string while we run without the GVL.
    fn run_keyed<R>(
        &self,
        ruby: &Ruby,
        key: Value,
        op: impl FnOnce(&Locks, &str) -> mistri_locks::Result<R>,
    ) -> Result<R, Error> {
        let locks = self.locks();
        let result = if self.remote {
            let key = args::key(ruby, "key", key)?;
            nogvl(ruby, || op(locks, &key), uninterruptible)?
        } else {
            args::with_key(ruby, "key", key, |key| op(locks, key))?
        };
        result.map_err(|e| error::to_ruby(ruby, e))
    }

    fn acquire(ruby: &Ruby, rb_self: &Self, key: Value, ttl: Value) -> Result<bool, Error> {
        let ttl = args::duration(ruby, "ttl", ttl)?;
        rb_self.run_keyed(ruby, key, |l, key| l.acquire(key, ttl))
    }

    fn renew(ruby: &Ruby, rb_self: &Self, key: Value, ttl: Value) -> Result<bool, Error> {
        let ttl = args::duration(ruby, "ttl", ttl)?;
        rb_self.run_keyed(ruby, key, |l, key| l.renew(key, ttl))
    }

    fn release(ruby: &Ruby, rb_self: &Self, key: Value) -> Result<bool, Error> {
        rb_self.run_keyed(ruby, key, |l, key| l.release(key))
    }

    fn held(ruby: &Ruby, rb_self: &Self, key: Value) -> Result<bool, Error> {
        rb_self.run_keyed(ruby, key, |l, key| l.held(key))
    }

    fn set_flag(ruby: &Ruby, rb_self: &Self, key: Value, ttl: Value) -> Result<bool, Error> {
        let ttl = args::duration(ruby, "ttl", ttl)?;
        rb_self.run_keyed(ruby, key, |l, key| l.set_flag(key, ttl).map(|()| true))
    }

    fn flag(ruby: &Ruby, rb_self: &Self, key: Value) -> Result<bool, Error> {
        rb_self.run_keyed(ruby, key, |l, key| l.flag(key))
    }

    fn clear_flag(ruby: &Ruby, rb_self: &Self, key: Value) -> Result<bool, Error> {
        rb_self.run_keyed(ruby, key, |l, key| l.clear_flag(key).map(|()| true))
    }

    /// The fencing number of this adapter's lease on `key`, or nil.
    /// Who holds `key`: a Hash, or nil when no live lease is there.
    fn info(ruby: &Ruby, rb_self: &Self, key: Value) -> Result<Option<magnus::RHash>, Error> {
        let found = rb_self.run_keyed(ruby, key, |l, key| l.info(key))?;
        found.map(|i| crate::info::to_hash(ruby, &i)).transpose()
    }

    fn fence(ruby: &Ruby, rb_self: &Self, key: Value) -> Result<Option<u64>, Error> {
        let key = args::key(ruby, "key", key)?;
        Ok(rb_self.locks().fence(&key))
    }

    /// Operator override: deletes whoever's lease is on `key`.
    fn break_lease(ruby: &Ruby, rb_self: &Self, key: Value) -> Result<bool, Error> {
        let key = args::key(ruby, "key", key)?;
        rb_self.run(ruby, |l| l.break_lease(&key))
    }

    /// `_hold(key, ttl, heartbeat, stop_key, signal, safety_margin)` -> Hold or nil;
    /// `signal` is nil or a `MistriLocks::AbortSignal` (duck-typed signals
    /// are the Ruby half's business).
    #[allow(clippy::too_many_arguments)] // one per argument of the Ruby method
    fn hold(
        ruby: &Ruby,
        rb_self: &Self,
        key: Value,
        ttl: Value,
        heartbeat: Value,
        stop_key: Option<Value>,
        signal: Option<&Signal>,
        safety_margin: Option<Value>,
    ) -> Result<Option<RbHold>, Error> {
        let key = args::key(ruby, "key", key)?;
        let signal = signal.map(|s| s.0.clone());
        let opts = args::hold_options(ruby, ttl, heartbeat, stop_key, signal, safety_margin)?;
        let hold = rb_self.run(ruby, |l| l.hold(&key, opts))?;
        Ok(hold.map(|h| RbHold::new(h, rb_self.remote)))
    }

    /// Another owner on the same backend (its own leases and heartbeat),
    /// as another process would be; same class as this one.
    fn sharing_adapter(ruby: &Ruby, rb_self: Obj<Self>) -> Obj<Self> {
        let other = Adapter::new(rb_self.locks().sharing_adapter(), rb_self.remote);
        ruby.obj_wrap_as(other, rb_self.class())
    }

    fn active_holds(&self) -> usize {
        self.locks().active_holds()
    }
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let class = module.define_class("Adapter", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_method("release", method!(Adapter::release, 1))?;
    class.define_method("held?", method!(Adapter::held, 1))?;
    class.define_method("flag?", method!(Adapter::flag, 1))?;
    class.define_method("clear_flag", method!(Adapter::clear_flag, 1))?;
    class.define_method("fence", method!(Adapter::fence, 1))?;
    class.define_method("info", method!(Adapter::info, 1))?;
    class.define_method("break_lease", method!(Adapter::break_lease, 1))?;
    class.define_method("sharing_adapter", method!(Adapter::sharing_adapter, 0))?;
    class.define_method("active_holds", method!(Adapter::active_holds, 0))?;
    class.define_private_method("_acquire", method!(Adapter::acquire, 2))?;
    class.define_private_method("_renew", method!(Adapter::renew, 2))?;
    class.define_private_method("_set_flag", method!(Adapter::set_flag, 2))?;
    class.define_private_method("_hold", method!(Adapter::hold, 6))?;
    Ok(())
}
