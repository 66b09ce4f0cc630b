//! `MistriLocks::Delivery`'s native half: the Ruby thread's wait on the
//! core's host-delivery queue (`mistri_locks::delivery`, which owns the
//! mechanism, its fork handling and its wake rule). The registry of Ruby
//! objects by listener id and the thread itself are Ruby
//! (`lib/mistri_locks/delivery.rb`).

use crate::nogvl;
use crate::notes::notes;
use magnus::RArray;
use magnus::{function, prelude::*, Error, RModule, Ruby};
use mistri_locks::delivery::{self, Next};

/// `Delivery._wait_events` -> `[[id, note], ...]`: the delivery thread's
/// wait, without the GVL and interruptible.
fn wait_events(ruby: &Ruby) -> Result<RArray, Error> {
    let deliveries = nogvl::wait(
        ruby,
        delivery::wake_token,
        |since| match delivery::wait(since, None) {
            Next::Events(events) => Some(events),
            Next::Stopped => Some(Vec::new()),
            Next::TimedOut | Next::Woken => None,
        },
        delivery::wake,
    )?;
    notes(ruby, deliveries)
}

pub fn init(_ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let m = module.define_module("Delivery")?;
    m.define_singleton_method("_wait_events", function!(wait_events, 0))?;
    m.define_singleton_method("_claim_thread", function!(delivery::claim_host_thread, 0))?;
    m.define_singleton_method("_thread_ended", function!(delivery::host_thread_ended, 0))?;
    Ok(())
}
