//! `MistriLocks::Locks#stats`, `#on_event` and `#remove_event_hook`: the
//! core's counters and hold events (`mistri_locks::stats`, which defines
//! every name) for Ruby.
//!
//! Native part: `stats` (a Hash with symbol keys), and the plumbing
//! `_on_event(id)`, `_remove_event_hook(handle)` and [`event_hash`].
//! `lib/mistri_locks/events.rb` keeps the blocks (so the GC sees them) and
//! registers each with `MistriLocks::Delivery`. No Rust thread calls Ruby:
//! the core's hook (on its notifier thread) only posts the event, typed, to
//! the host-delivery queue under the block's delivery id, and the Ruby
//! delivery thread hands the block its Hash.

use crate::locks::RbLocks;
use magnus::{method, prelude::*, Error, RHash, RModule, Ruby};
use mistri_locks::delivery;
use mistri_locks::{EventHookHandle, StatValue};

/// `stats` -> `{holds_active: 0, ..., beat_rtt_p50: 0.0001 or nil, ...}`.
fn stats(ruby: &Ruby, rb_self: &RbLocks) -> Result<RHash, Error> {
    let h = ruby.hash_new();
    for (name, value) in rb_self.locks().stats().entries() {
        let v = match value {
            StatValue::Count(n) => ruby.integer_from_u64(n).as_value(),
            StatValue::Seconds(Some(s)) => ruby.float_from_f64(s).as_value(),
            StatValue::Seconds(None) => ruby.qnil().as_value(),
        };
        h.aset(ruby.to_symbol(name), v)?;
    }
    Ok(h)
}

/// `_on_event(id)` -> the hook's handle: events go to delivery id `id`.
fn on_event(rb_self: &RbLocks, id: u64) -> u64 {
    rb_self
        .locks()
        .on_event(move |event| delivery::post_event(id, event.clone()))
        .as_u64()
}

/// `_remove_event_hook(handle)` -> whether it was registered on this owner.
fn remove_event_hook(rb_self: &RbLocks, handle: u64) -> bool {
    rb_self
        .locks()
        .remove_event_hook(EventHookHandle::from_u64(handle))
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let class = module.define_class("Locks", ruby.class_object())?;
    class.define_method("stats", method!(stats, 0))?;
    class.define_private_method("_on_event", method!(on_event, 1))?;
    class.define_private_method("_remove_event_hook", method!(remove_event_hook, 1))?;
    Ok(())
}
