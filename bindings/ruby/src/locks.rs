//! `MistriLocks::Locks` (the owner handle): the seed's seven operations over a core
//! [`Locks`], the base class of `MistriLocks::Memory`, `MistriLocks::Redis`
//! and `MistriLocks::Local`.
//!
//! Native part: `release`, `held?`, `flag?`, `clear_flag`, `fence`,
//! `break_lease`, `new_owner`, `active_holds`, `stop_holders`, `stop_job`,
//! `info`, and the plumbing `_acquire`, `_renew`, `_set_flag`, `_list`
//! behind the methods with keywords or defaults of
//! `lib/mistri_locks/locks.rb` (a Ruby method with keywords is cheaper than
//! a C method parsing a keyword Hash).
//!
//! Memory operations keep the GVL: they take microseconds, less than
//! releasing and retaking it. Backends that do I/O (Redis, Local) run
//! without it (see `nogvl`).

use crate::args;
use crate::error;
use crate::nogvl::nogvl;
use crate::signal::Signal;
use crate::waiting;
use magnus::rb_sys::AsRawValue;
use magnus::{method, prelude::*, typed_data::Obj, Error, RModule, Ruby, TypedData, Value};
use mistri_locks::{AcquireOptions, Locks, StopOutcome};
use rb_sys::StableApiDefinition;

/// The receiver of the hot methods (`_acquire`, `release`, `_renew`,
/// `held?`, `flag?`). The common case, an object this extension wrapped
/// (any subclass: they share one data type), is a check of the object's
/// data-type pointer; anything else goes through magnus's checked
/// conversion (an `rb_protect` per call, a third of a Memory release),
/// which also makes the TypeError.
fn this(v: &Value) -> Result<&RbLocks, Error> {
    let raw = v.as_raw();
    let api = rb_sys::stable_api::get_default();
    let ours: *const rb_sys::rb_data_type_t =
        (RbLocks::data_type() as *const magnus::DataType).cast();
    // SAFETY: `raw` is a live object (the method's receiver, on Ruby's
    // stack while we run, with the GVL held). Its header is read only
    // after the special-constant check, its typed-data fields only once
    // its type is T_DATA and typed; a data-type pointer equal to ours
    // means magnus stored an `RbLocks` there (`DataType` is
    // `repr(transparent)` over `rb_data_type_t`). A freed-but-not-collected
    // object has a null data pointer, which goes to the checked path.
    unsafe {
        if !api.special_const_p(raw)
            && api.builtin_type(raw) == rb_sys::ruby_value_type::RUBY_T_DATA
            && api.rtypeddata_p(raw)
            && std::ptr::eq(api.rtypeddata_type(raw), ours)
        {
            if let Some(locks) = api.rtypeddata_get_data(raw).cast::<RbLocks>().as_ref() {
                return Ok(locks);
            }
        }
    }
    <&RbLocks>::try_convert(*v)
}

#[magnus::wrap(class = "MistriLocks::Locks", free_immediately, size)]
pub struct RbLocks {
    /// After `fork` the core reconnects, forgets the parent's issued leases
    /// and starts a fresh heartbeat engine by itself.
    locks: Locks,
    /// Operations are network round trips (release the GVL for them).
    remote: bool,
}

impl RbLocks {
    pub fn new(locks: Locks) -> Self {
        // A backend with an I/O bound does I/O: release the GVL for it.
        let remote = !locks.adapter().io_timeout().is_zero();
        RbLocks { locks, remote }
    }

    /// The core object.
    pub fn locks(&self) -> &Locks {
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
            nogvl(ruby, || op(locks))?
        } else {
            op(locks)
        };
        result.map_err(|e| error::to_ruby(ruby, e))
    }

    /// Like [`RbLocks::run`] for an operation on one key. Memory keeps the
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
            nogvl(ruby, || op(locks, &key))?
        } else {
            args::with_key(ruby, "key", key, |key| op(locks, key))?
        };
        result.map_err(|e| error::to_ruby(ruby, e))
    }

    fn acquire(ruby: &Ruby, rb_self: Value, key: Value, ttl: Value) -> Result<bool, Error> {
        let rb_self = this(&rb_self)?;
        let ttl = args::duration(ruby, "ttl", ttl)?;
        rb_self.run_keyed(ruby, key, |l, key| l.acquire(key, ttl))
    }

    /// `_acquire_with(key, ttl, wait, limit, signal)`: `acquire` with a
    /// wait (without the GVL, interruptibly: `waiting.rs`), an N-holder
    /// limit or a signal that ends the wait.
    fn acquire_with(
        ruby: &Ruby,
        rb_self: &Self,
        key: Value,
        ttl: Value,
        wait: Option<Value>,
        limit: Value,
        signal: Option<&Signal>,
    ) -> Result<bool, Error> {
        let key = args::key(ruby, "key", key)?;
        let ttl = args::duration(ruby, "ttl", ttl)?;
        let opts = AcquireOptions {
            wait: args::wait(ruby, wait)?,
            limit: args::limit(ruby, limit)?,
            signal: signal.map(|s| s.0.clone()),
        };
        if opts.wait.is_none() {
            // One attempt (the exclusive lease by the seed's `acquire`, exactly).
            return rb_self.run(ruby, |l| match opts.limit {
                1 => l.acquire(&key, ttl),
                _ => l.acquire_with(&key, ttl, &opts),
            });
        }
        let waiting = rb_self
            .locks()
            .start_acquire(&key, ttl, &opts)
            .map_err(|e| error::to_ruby(ruby, e))?;
        let signals: Vec<_> = opts.signal.iter().collect();
        waiting::drive(ruby, waiting, &signals)
    }

    fn renew(ruby: &Ruby, rb_self: Value, key: Value, ttl: Value) -> Result<bool, Error> {
        let rb_self = this(&rb_self)?;
        let ttl = args::duration(ruby, "ttl", ttl)?;
        rb_self.run_keyed(ruby, key, |l, key| l.renew(key, ttl))
    }

    fn release(ruby: &Ruby, rb_self: Value, key: Value) -> Result<bool, Error> {
        let rb_self = this(&rb_self)?;
        rb_self.run_keyed(ruby, key, |l, key| l.release(key))
    }

    fn held(ruby: &Ruby, rb_self: Value, key: Value) -> Result<bool, Error> {
        let rb_self = this(&rb_self)?;
        rb_self.run_keyed(ruby, key, |l, key| l.held(key))
    }

    fn set_flag(ruby: &Ruby, rb_self: &Self, key: Value, ttl: Value) -> Result<bool, Error> {
        let ttl = args::duration(ruby, "ttl", ttl)?;
        rb_self.run_keyed(ruby, key, |l, key| l.set_flag(key, ttl).map(|()| true))
    }

    /// `_stop_holders(key, ttl)` -> the stop keys raised, in the order of
    /// the holders (`[]` when nobody holds `key` or no holder watches a
    /// stop key): the core's `Locks::stop_holders`.
    fn stop_holders(
        ruby: &Ruby,
        rb_self: &Self,
        key: Value,
        ttl: Value,
    ) -> Result<Vec<String>, Error> {
        let ttl = args::duration(ruby, "ttl", ttl)?;
        let outcome = rb_self.run_keyed(ruby, key, |l, key| l.stop_holders(key, ttl))?;
        Ok(match outcome {
            StopOutcome::Raised(keys) => keys,
            _ => Vec::new(),
        })
    }

    /// `_stop_job(job_id, ttl)` -> the stop key raised: the core's
    /// `Locks::stop_job` (the key is `job::stop_key`'s).
    fn stop_job(ruby: &Ruby, rb_self: &Self, job_id: Value, ttl: Value) -> Result<String, Error> {
        let job_id = args::key(ruby, "job id", job_id)?;
        let ttl = args::duration(ruby, "ttl", ttl)?;
        rb_self.run(ruby, |l| l.stop_job(&job_id, ttl))
    }

    fn flag(ruby: &Ruby, rb_self: Value, key: Value) -> Result<bool, Error> {
        let rb_self = this(&rb_self)?;
        rb_self.run_keyed(ruby, key, |l, key| l.flag(key))
    }

    fn clear_flag(ruby: &Ruby, rb_self: &Self, key: Value) -> Result<bool, Error> {
        rb_self.run_keyed(ruby, key, |l, key| l.clear_flag(key).map(|()| true))
    }

    /// Who holds `key`: a Hash, or nil when no live lease is there.
    fn info(ruby: &Ruby, rb_self: &Self, key: Value) -> Result<Option<magnus::RHash>, Error> {
        let found = rb_self.run_keyed(ruby, key, |l, key| l.info(key))?;
        found.map(|i| crate::info::to_hash(ruby, &i)).transpose()
    }

    /// `_list(prefix)` (behind `list(prefix = "")`): the live leases and
    /// raised flags whose keys start with `prefix` (a String or Symbol;
    /// `""`: all of this namespace or file), as `{leases: [...], flags:
    /// [...]}` sorted by key.
    fn list(ruby: &Ruby, rb_self: &Self, prefix: Value) -> Result<magnus::RHash, Error> {
        let prefix = args::key(ruby, "prefix", prefix)?;
        let listing = rb_self.run(ruby, |l| l.list(&prefix))?;
        crate::info::listing_to_hash(ruby, &listing)
    }

    /// The fencing number of this adapter's lease on `key`, or nil.
    fn fence(ruby: &Ruby, rb_self: &Self, key: Value) -> Result<Option<u64>, Error> {
        let key = args::key(ruby, "key", key)?;
        Ok(rb_self.locks().fence(&key))
    }

    /// Operator override: deletes whoever's lease is on `key`.
    fn break_lease(ruby: &Ruby, rb_self: &Self, key: Value) -> Result<bool, Error> {
        let key = args::key(ruby, "key", key)?;
        rb_self.run(ruby, |l| l.break_lease(&key))
    }

    /// Another owner on the same backend (its own leases and heartbeat),
    /// as another process would be; same class as this one.
    fn new_owner(ruby: &Ruby, rb_self: Obj<Self>) -> Obj<Self> {
        let other = RbLocks::new(rb_self.locks().new_owner());
        ruby.obj_wrap_as(other, rb_self.class())
    }

    /// `label`: what this handle's leases and holds store as their holder.
    fn label(&self) -> String {
        self.locks().label()
    }

    /// `label = str_or_nil` (nil: the default, `host:pid ruby`).
    fn set_label(ruby: &Ruby, rb_self: &Self, label: Option<Value>) -> Result<(), Error> {
        let label = label.map(|l| args::key(ruby, "label", l)).transpose()?;
        rb_self
            .locks()
            .set_label(label.as_deref())
            .map_err(|e| error::to_ruby(ruby, e))
    }

    fn active_holds(&self) -> usize {
        self.locks().active_holds()
    }
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let class = module.define_class("Locks", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_method("release", method!(RbLocks::release, 1))?;
    class.define_method("held?", method!(RbLocks::held, 1))?;
    class.define_method("flag?", method!(RbLocks::flag, 1))?;
    class.define_method("clear_flag", method!(RbLocks::clear_flag, 1))?;
    class.define_method("fence", method!(RbLocks::fence, 1))?;
    class.define_method("break_lease", method!(RbLocks::break_lease, 1))?;
    class.define_method("new_owner", method!(RbLocks::new_owner, 0))?;
    class.define_method("active_holds", method!(RbLocks::active_holds, 0))?;
    class.define_method("label", method!(RbLocks::label, 0))?;
    class.define_method("label=", method!(RbLocks::set_label, 1))?;
    class.define_private_method("_acquire", method!(RbLocks::acquire, 2))?;
    class.define_private_method("_acquire_with", method!(RbLocks::acquire_with, 5))?;
    class.define_private_method("_renew", method!(RbLocks::renew, 2))?;
    class.define_private_method("_set_flag", method!(RbLocks::set_flag, 2))?;
    class.define_private_method("_stop_holders", method!(RbLocks::stop_holders, 2))?;
    class.define_private_method("_stop_job", method!(RbLocks::stop_job, 2))?;
    class.define_method("info", method!(RbLocks::info, 1))?;
    class.define_private_method("_list", method!(RbLocks::list, 1))?;
    Ok(())
}
