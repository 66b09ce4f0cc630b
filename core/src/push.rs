//! Push delivery of raised flags: how a stop flag raised in another process
//! reaches a holder in milliseconds instead of at its next tick.
//!
//! An adapter that can push ([`Adapter::watch_flags`](crate::Adapter::watch_flags))
//! keeps one *listener* per process and adapter: one thread and one wake-up
//! channel (Redis: one subscribed connection; Local: one inotify
//! descriptor), whatever the number of holds. Every heartbeat engine that
//! has a hold with a stop key registers a [`FlagWatcher`] with it and keeps
//! the returned [`FlagWatch`]; dropping that guard unregisters it, and the
//! listener thread exits (closing its channel) once nobody is registered.
//!
//! What a listener tells its watchers:
//! - [`FlagWatcher::raised`]: this flag was raised (Redis: a message on the
//!   flag's channel, published right after the `SET`). The engine trips the
//!   holds watching that key at once, on the listener's thread.
//! - [`FlagWatcher::poll_now`]: something may have been raised that no
//!   message names (Local's wake-up carries no key), or the channel was
//!   (re)established after a gap in which messages may have been lost. The
//!   engine reads every stop flag it watches at once, on its I/O thread.
//!
//! - [`FlagWatcher::released`]: a lease on this key was released (Redis: a
//!   message on `{ns}:released:{KEY}`, published by the release script;
//!   its payload is the released lease's fence, `0` when unknown). Waiting
//!   acquires ([`crate::waiting`]) ring the head of that key's line.
//! - [`FlagWatcher::released_any`]: leases may have been released without
//!   a message naming them (Local's `<db>-released` doorbell carries no
//!   key), or the channel was (re)established: every line's head retries.
//!
//! Push is an accelerator, never the only path: the engine's tick poll stays
//! the floor (flags raised by a client that does not announce them, a lost
//! channel, a platform without a wake-up mechanism).
//!
//! Ordering that leaves no gap: an engine registers its watcher *before* it
//! inserts a hold, and a hold reads its stop flag once right after it is
//! inserted. A flag raised before that read is seen by it; one raised after
//! it is announced to a registered watcher while the listener is live, and
//! a listener that (re)connects tells every watcher to poll once it is live.
//!
//! Threads: a watcher's methods run on the listener's thread; they take the
//! engine's state lock briefly and never call the adapter or user code.
//!
//! Fork: listeners are [`ForkLocal`]; a forked child starts with none (no
//! thread, no inherited socket or descriptor in use) and opens its own on
//! its first watch. The parent's channel is never read or written there.
//!
//! Lock order: the listener's registry lock is a leaf: never held while a
//! watcher runs or a thread starts.

use crate::fork::ForkLocal;
use parking_lot::Mutex;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How long an idle listener (no watcher registered) lingers, and the
/// longest it waits between liveness checks of its channel.
pub(crate) const LISTENER_IDLE: Duration = Duration::from_secs(1);

/// Told by an adapter's listener when flags may have been raised.
pub trait FlagWatcher: Send + Sync {
    /// The flag `key` (without namespace) was just raised.
    fn raised(&self, key: &str);
    /// Flags may have been raised without a message naming them: read every
    /// watched flag now.
    fn poll_now(&self);
    /// A lease on `key` (without namespace) was just released; `fence` is
    /// the released lease's fencing number when the announcement names it.
    /// The default does nothing (the heartbeat engine does not care).
    fn released(&self, key: &str, fence: Option<u64>) {
        let _ = (key, fence);
    }
    /// Leases may have been released without a message naming them (or
    /// messages were lost while the channel was down). Default: nothing.
    fn released_any(&self) {}
}

/// A registration with an adapter's listener; dropping it unregisters.
pub struct FlagWatch {
    registry: Weak<Registry>,
    id: u64,
}

impl std::fmt::Debug for FlagWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlagWatch").field("id", &self.id).finish()
    }
}

impl Drop for FlagWatch {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            registry
                .state
                .lock()
                .watchers
                .retain(|(id, _)| *id != self.id);
        }
    }
}

#[derive(Default)]
struct RegistryState {
    watchers: Vec<(u64, Weak<dyn FlagWatcher>)>,
    next_id: u64,
    /// The listener thread runs.
    running: bool,
}

/// The watchers of one listener, and whether its thread runs.
#[derive(Default)]
pub(crate) struct Registry {
    state: Mutex<RegistryState>,
}

impl Registry {
    /// Registers `watcher`; `start` is called (outside the lock) to start the
    /// listener thread when none runs. `start` returns false when the thread
    /// could not be started: then there is no push, and `None`.
    pub(crate) fn watch(
        self: &Arc<Self>,
        watcher: Weak<dyn FlagWatcher>,
        start: impl FnOnce(Arc<Registry>) -> bool,
    ) -> Option<FlagWatch> {
        let (id, must_start) = {
            let mut state = self.state.lock();
            state.next_id += 1;
            let id = state.next_id;
            state.watchers.push((id, watcher));
            let must_start = !state.running;
            state.running = true;
            (id, must_start)
        };
        let guard = FlagWatch {
            registry: Arc::downgrade(self),
            id,
        };
        if must_start && !start(self.clone()) {
            self.state.lock().running = false;
            return None;
        }
        Some(guard)
    }

    /// The live watchers (dead ones are dropped from the list).
    pub(crate) fn watchers(&self) -> Vec<Arc<dyn FlagWatcher>> {
        let mut state = self.state.lock();
        state.watchers.retain(|(_, w)| w.strong_count() > 0);
        state
            .watchers
            .iter()
            .filter_map(|(_, w)| w.upgrade())
            .collect()
    }

    /// Called by the listener thread when it has nothing to do: true (and
    /// the thread must exit) when no watcher is registered.
    pub(crate) fn retire_if_unwatched(&self) -> bool {
        let mut state = self.state.lock();
        state.watchers.retain(|(_, w)| w.strong_count() > 0);
        if state.watchers.is_empty() {
            state.running = false;
            return true;
        }
        false
    }

    pub(crate) fn raised(&self, key: &str) {
        for w in self.watchers() {
            w.raised(key);
        }
    }

    pub(crate) fn poll_now(&self) {
        for w in self.watchers() {
            w.poll_now();
        }
    }

    pub(crate) fn released(&self, key: &str, fence: Option<u64>) {
        for w in self.watchers() {
            w.released(key, fence);
        }
    }

    pub(crate) fn released_any(&self) {
        for w in self.watchers() {
            w.released_any();
        }
    }
}

/// A registry per process generation (see the module header on fork).
pub(crate) fn fork_local_registry() -> ForkLocal<Arc<Registry>> {
    ForkLocal::new(Arc::default(), |_| Arc::default())
}

/// Starts a named listener thread; false if the OS refuses.
pub(crate) fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> bool {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(body)
        .is_ok()
}
