//! `MistriLocks::Hold`: a core [`Hold`] for Ruby.
//!
//! Native part: `key`, `fence`, `lost?`, and the plumbing `_release` and
//! `_signal`. `lib/mistri_locks/hold.rb` adds `release`, `signal`, the block
//! form and the delivery to a duck-typed `signal:` object.
//!
//! A Hold garbage-collected without `release` does no I/O in its free
//! function: it leaves the heartbeat at once and hands the delete of its
//! lease to the core engine's I/O thread (`Hold::release_in_background`).
//! A forked child's copy never touches its parent's lease.

use crate::error;
use crate::nogvl::{nogvl, uninterruptible};
use crate::signal::Signal;
use magnus::{method, prelude::*, Error, RModule, Ruby};
use mistri_locks::{Hold, ReleaseOutcome};

#[magnus::wrap(class = "MistriLocks::Hold", free_immediately, size)]
pub struct RbHold {
    hold: Hold,
    /// Release does a network round trip: do it without the GVL.
    remote: bool,
}

impl RbHold {
    pub fn new(hold: Hold, remote: bool) -> Self {
        RbHold { hold, remote }
    }

    fn key(&self) -> String {
        self.hold.key().to_owned()
    }

    fn fence(&self) -> u64 {
        self.hold.fence()
    }

    fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// `_release` -> true if this call deleted the lease; false if it was
    /// already released, lost, gone, or this is a forked child's copy.
    fn release(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        let hold = &rb_self.hold;
        let outcome = if rb_self.remote {
            nogvl(ruby, || hold.release(), uninterruptible)?
        } else {
            hold.release()
        };
        match outcome.map_err(|e| error::to_ruby(ruby, e))? {
            ReleaseOutcome::Released => Ok(true),
            _ => Ok(false),
        }
    }

    /// `_signal`: a new Ruby object around the hold's core signal.
    fn signal(&self) -> Signal {
        Signal(self.hold.signal().clone())
    }
}

impl Drop for RbHold {
    fn drop(&mut self) {
        // Runs inside Ruby's GC (free_immediately): no network round trip
        // here. After this, the core Hold's own Drop finds nothing to do.
        self.hold.release_in_background();
    }
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let class = module.define_class("Hold", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_method("key", method!(RbHold::key, 0))?;
    class.define_method("fence", method!(RbHold::fence, 0))?;
    class.define_method("lost?", method!(RbHold::is_lost, 0))?;
    class.define_private_method("_release", method!(RbHold::release, 0))?;
    class.define_private_method("_signal", method!(RbHold::signal, 0))?;
    Ok(())
}
