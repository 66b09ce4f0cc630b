//! `MistriLocks::AbortSignal`: a core [`AbortSignal`] for Ruby.
//!
//! Native part: `new`, `aborted?`, `reason`, `derive`, and the plumbing
//! `_abort`, `_wait`, `_watch`, `_unwatch`. `lib/mistri_locks/abort_signal.rb`
//! adds `abort!`, `wait`, `on_abort` and `remove_callback` on top, keeping
//! the callback blocks in the Ruby object (so the GC sees them) and running
//! them on Ruby threads only (the core's `mistri_locks::delivery`; see
//! `lib/mistri_locks/delivery.rb` for the Ruby glue).

use crate::{args, nogvl};
use magnus::RArray;
use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RModule, Ruby, Value};
use mistri_locks::delivery;
use mistri_locks::{AbortSignal, CallbackHandle, WaitOutcome};
use std::time::Instant;

/// The Ruby object around a core signal. Cloning the core signal shares it,
/// so a hold and Ruby see the same latch.
#[magnus::wrap(class = "MistriLocks::AbortSignal", free_immediately, size)]
pub struct Signal(pub AbortSignal);

impl Signal {
    /// `AbortSignal.new` (the receiver, so subclasses get their class).
    fn new(ruby: &Ruby, class: RClass) -> Obj<Self> {
        ruby.obj_wrap_as(Signal(AbortSignal::new()), class)
    }

    /// `_abort(reason)` -> `[tripped, notes]`: trips the signal; the notes
    /// of this signal's and its children's Ruby watchers are returned for
    /// delivery on this thread.
    fn abort(ruby: &Ruby, rb_self: &Self, reason: Option<String>) -> Result<(bool, RArray), Error> {
        let (tripped, deliveries) = delivery::abort(&rb_self.0, reason.as_deref());
        Ok((tripped, crate::notes::notes(ruby, deliveries)?))
    }

    fn is_aborted(&self) -> bool {
        self.0.is_aborted()
    }

    fn reason(&self) -> Option<String> {
        self.0.reason()
    }

    fn derive(&self) -> Self {
        Signal(self.0.derive())
    }

    /// `_wait(timeout)` -> true if aborted, false on timeout (the core's
    /// wait-timeout rule). Blocks without the GVL; an interrupt
    /// (Thread#raise, Timeout, SIGINT) wakes the wait and is raised here.
    fn wait(ruby: &Ruby, rb_self: &Self, timeout: Option<Value>) -> Result<bool, Error> {
        let timeout = args::timeout(ruby, timeout)?;
        let signal = &rb_self.0;
        if timeout.is_some_and(|t| t.is_zero()) {
            return Ok(signal.is_aborted());
        }
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        nogvl::wait(
            ruby,
            || signal.wake_token(),
            |since| {
                let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                match signal.wait_or_wake(since, left) {
                    WaitOutcome::Aborted => Some(true),
                    WaitOutcome::TimedOut => Some(false),
                    WaitOutcome::Woken => None,
                }
            },
            || signal.wake_waiters(),
        )
    }

    /// `_watch(id)` -> `[handle, notes]`: on abort, deliver to Ruby delivery
    /// id `id`. If the signal is already aborted the note is returned at
    /// once, for delivery on this thread.
    fn watch(ruby: &Ruby, rb_self: &Self, id: u64) -> Result<(u64, RArray), Error> {
        let (handle, deliveries) = delivery::listen(&rb_self.0, id);
        Ok((handle.as_u64(), crate::notes::notes(ruby, deliveries)?))
    }

    /// `_unwatch(handle)` -> whether the watch was still registered.
    fn unwatch(&self, handle: u64) -> bool {
        self.0.remove_callback(CallbackHandle::from_u64(handle))
    }
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let class = module.define_class("AbortSignal", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("new", method!(Signal::new, 0))?;
    class.define_method("aborted?", method!(Signal::is_aborted, 0))?;
    class.define_method("reason", method!(Signal::reason, 0))?;
    class.define_method("derive", method!(Signal::derive, 0))?;
    class.define_private_method("_abort", method!(Signal::abort, 1))?;
    class.define_private_method("_wait", method!(Signal::wait, 1))?;
    class.define_private_method("_watch", method!(Signal::watch, 1))?;
    class.define_private_method("_unwatch", method!(Signal::unwatch, 1))?;
    Ok(())
}
