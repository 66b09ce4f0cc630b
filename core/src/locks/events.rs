//! A [`Locks`]'s counters and hold events ([`crate::stats`] keeps them;
//! the engine counts).

use super::Locks;
use crate::stats::{Event, EventHookHandle, StatsSnapshot};
use std::sync::Arc;

impl Locks {
    /// A snapshot of this owner's counters: holds, renewals, beats and their
    /// round trips, losses by cause, stop flags (see [`StatsSnapshot`]).
    /// Owners made by [`Locks::new_owner`] count their own.
    ///
    /// # Examples
    /// ```
    /// use mistri_locks::{HoldOptions, Locks};
    ///
    /// let locks = Locks::memory();
    /// let hold = locks.hold("job", HoldOptions::default())?.expect("free");
    /// assert!(locks.hold("job", HoldOptions::default())?.is_none());
    /// let stats = locks.stats();
    /// assert_eq!((stats.holds_active, stats.holds_acquired, stats.holds_refused), (1, 1, 1));
    /// hold.release()?;
    /// # Ok::<(), mistri_locks::Error>(())
    /// ```
    pub fn stats(&self) -> StatsSnapshot {
        self.stats_counters().snapshot(self.active_holds())
    }

    /// Registers `hook` to hear this owner's hold events ([`crate::EventKind`]).
    /// It runs on the notifier thread (`mistri-notifier`), never on a
    /// heartbeat thread and never under a library lock; returns a handle
    /// for [`Locks::remove_event_hook`].
    ///
    /// # Examples
    /// ```
    /// use mistri_locks::{EventKind, HoldOptions, Locks};
    /// use std::sync::mpsc;
    ///
    /// let locks = Locks::memory();
    /// let (tx, rx) = mpsc::channel();
    /// let tx = std::sync::Mutex::new(tx);
    /// let handle = locks.on_event(move |e| { let _ = tx.lock().unwrap().send(e.kind); });
    /// locks.hold("job", HoldOptions::default())?.expect("free").release()?;
    /// assert_eq!(rx.recv().unwrap(), EventKind::Acquired);
    /// assert_eq!(rx.recv().unwrap(), EventKind::Released);
    /// assert!(locks.remove_event_hook(handle));
    /// # Ok::<(), mistri_locks::Error>(())
    /// ```
    pub fn on_event<F>(&self, hook: F) -> EventHookHandle
    where
        F: Fn(&Event) + Send + Sync + 'static,
    {
        self.stats_counters().add_hook(Arc::new(hook))
    }

    /// Removes a hook; `true` if it was registered. No event reaches it
    /// after this returns, except in a call already running.
    pub fn remove_event_hook(&self, handle: EventHookHandle) -> bool {
        self.stats_counters().remove_hook(handle)
    }
}
