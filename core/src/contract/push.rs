//! Push delivery: how a stop flag raised, or a lease released, in another
//! process reaches the holds and waiting lines of this one in milliseconds
//! instead of at their next tick — and reaches no process that does not
//! need it.
//!
//! An adapter that can push ([`Adapter::watch_flags`](crate::Adapter::watch_flags))
//! keeps one *listener* per process and adapter: one thread and one wake-up
//! channel (Redis: one subscribed connection, per master on a Cluster;
//! Local: one inotify descriptor), whatever the number of holds. Every
//! heartbeat engine with a hold that has a stop key, and every adapter
//! object with waiting lines, registers a [`FlagWatcher`] and keeps the
//! returned [`FlagWatch`]; dropping that guard unregisters it (and its
//! interests), and the listener thread exits (closing its channel) once
//! nobody is registered.
//!
//! # Interests: only what this process needs
//!
//! A watch names what it needs: [`FlagWatch::watch_flag`] for each stop key
//! its holds watch, [`FlagWatch::watch_line`] for each waiting line (key
//! and line id). The listener's subscription set is the union over the
//! process's watches, counted per interest: it subscribes an interest when
//! its count leaves zero and unsubscribes it [`LINGER`] after the count
//! returns to zero (so a hold or a line that comes back at once finds its
//! subscription live). Changes are batched: a watch only marks the
//! interest changed (no I/O, no round trip on the caller's thread); the
//! listener applies every pending change when it next wakes, in one
//! command per kind. Nothing is ever subscribed by pattern, so a release
//! or a raise that no process of the fleet waits for or watches is
//! delivered to nobody.
//!
//! What a listener tells its watchers:
//! - [`FlagWatcher::raised`]: this flag was raised (Redis: a message on
//!   the flag's channel, published right after the `SET`). The engine
//!   trips the holds watching that key at once, on the listener's thread.
//! - [`FlagWatcher::poll_flag`]: this flag may have been raised unheard
//!   (its subscription just became live, or a doorbell that names no
//!   single key rang for it): the engine reads it at once, on its I/O
//!   thread.
//! - [`FlagWatcher::poll_now`]: anything may have been raised unheard (the
//!   channel was (re)established after a gap): every watched flag is read.
//! - [`FlagWatcher::released`]: a lease on this key was released and this
//!   process's line is the one to try (Redis: the release script publishes
//!   to the channel of the line at the head of the key's queue, and to no
//!   other; Local: the doorbell of that line); its payload is the released
//!   lease's fence when known. The line's head tries at once.
//! - [`FlagWatcher::released_any`]: releases may have gone unheard (the
//!   channel was (re)established): every line's head tries once.
//!
//! Push is an accelerator, never the only path: the engine's tick poll
//! stays the floor (flags raised by a client that does not announce them,
//! a lost channel, a platform without a wake-up mechanism), and a line's
//! head retries on its own timers.
//!
//! Ordering that leaves no gap: a hold reads its stop flag once right
//! after it is inserted, and again once the listener confirms the flag's
//! subscription ([`FlagWatcher::poll_flag`]). A flag raised before that
//! confirmation is seen by one of the two reads; one raised after it is
//! announced to a live subscription. A line's head is rung once its
//! subscription is confirmed, for the same reason. A listener that
//! (re)connects subscribes the whole set again and tells every watcher to
//! poll (`poll_now`, `released_any`) once it is live.
//!
//! Threads: a watcher's methods run on the listener's thread; they take
//! the engine's (or the lines') lock briefly and never call the adapter
//! or user code. [`FlagWatch`]'s methods only take the registry's lock and
//! may call the listener's wake-up (a non-blocking write, or nothing).
//!
//! Fork: listeners are [`ForkLocal`](crate::runtime::fork::ForkLocal); a forked
//! child starts with none (no thread, no inherited socket or descriptor in
//! use) and opens its own on its first watch. The parent's channel is
//! never read or written there.
//!
//! This module is the process side (who watches and waits on what: the
//! [`Registry`], [`FlagWatch`], [`FlagWatcher`], [`Interest`]);
//! [`super::listen`] is the listener side (its own view of what is live
//! and what lingers, its read slices, its thread, the lifecycle).
//!
//! Lock order: the listener's registry lock is a leaf: never held while a
//! watcher runs, a wake-up is called or a thread starts. Callers may hold
//! their own locks (the engine's state, the lines) while calling
//! [`FlagWatch`]'s methods.

use crate::runtime::fork::ForkLocal;
use parking_lot::Mutex;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How long a subscription stays after its last interest went away: a
/// hold or a line that comes back within this finds it still live.
pub const LINGER: Duration = Duration::from_secs(2);

/// Told by an adapter's listener when flags may have been raised or leases
/// released.
pub trait FlagWatcher: Send + Sync {
    /// The flag `key` (without namespace) was just raised.
    fn raised(&self, key: &str);
    /// Flags may have been raised without a message naming them: read every
    /// watched flag now.
    fn poll_now(&self);
    /// The flag `key` may have been raised unheard (its subscription just
    /// became live): read it now. The default reads every watched flag.
    fn poll_flag(&self, key: &str) {
        let _ = key;
        self.poll_now();
    }
    /// A lease on `key` (without namespace) was just released and this
    /// process's line for it is next; `fence` is the released lease's
    /// fencing number when the announcement names it. The default does
    /// nothing (the heartbeat engine does not care).
    fn released(&self, key: &str, fence: Option<u64>) {
        let _ = (key, fence);
    }
    /// Leases may have been released without a message reaching us (the
    /// channel was down). Default: nothing.
    fn released_any(&self) {}
    /// Called by the listener about once a second while it runs (lets a
    /// watcher drop interests it kept lingering). Default: nothing.
    fn idle(&self) {}
}

/// One thing a process listens for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Interest {
    /// Raises of the flag `key`.
    Flag(Arc<str>),
    /// Releases of `key` that make the waiting line `line` (its id in the
    /// backend's queue) the next to try.
    Line {
        /// The lease's key.
        key: Arc<str>,
        /// The line's id.
        line: Arc<str>,
    },
}

impl Interest {
    /// The user key this interest is about.
    pub(crate) fn key(&self) -> &str {
        match self {
            Interest::Flag(key) | Interest::Line { key, .. } => key,
        }
    }
}

/// Announcements this process's listeners have heard (raised flags and
/// releases, each message or doorbell ring counted once), since it started.
/// A process that neither watches a flag nor waits for a lease hears none.
/// A hook for the fan-out tests and benchmarks (`core/tests/fanout.rs`),
/// not part of the API the faces offer.
#[doc(hidden)]
pub fn messages_heard() -> u64 {
    HEARD.load(std::sync::atomic::Ordering::Relaxed)
}

static HEARD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn heard() {
    HEARD.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// A registration with an adapter's listener; dropping it unregisters
/// (and gives up every interest it holds).
pub struct FlagWatch {
    registry: Weak<Registry>,
    id: u64,
}

impl std::fmt::Debug for FlagWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlagWatch").field("id", &self.id).finish()
    }
}

impl FlagWatch {
    /// Asks for the raises of the flag `key` (counted: call
    /// [`FlagWatch::unwatch_flag`] once per call). No I/O here: the
    /// listener subscribes when it next wakes, then calls
    /// [`FlagWatcher::poll_flag`] for it.
    pub fn watch_flag(&self, key: &str) {
        self.change(Interest::Flag(Arc::from(key)), true);
    }

    /// Gives up one [`FlagWatch::watch_flag`] of `key`.
    pub fn unwatch_flag(&self, key: &str) {
        self.change(Interest::Flag(Arc::from(key)), false);
    }

    /// Asks for the releases of `key` that make the line `line` next.
    pub fn watch_line(&self, key: &str, line: &str) {
        self.change(
            Interest::Line {
                key: Arc::from(key),
                line: Arc::from(line),
            },
            true,
        );
    }

    /// Whether the listener has confirmed the subscription of the line
    /// `line` of `key` ([`Registry::is_confirmed`]).
    pub(crate) fn line_confirmed(&self, key: &str, line: &str) -> bool {
        self.registry.upgrade().is_some_and(|registry| {
            registry.is_confirmed(&Interest::Line {
                key: Arc::from(key),
                line: Arc::from(line),
            })
        })
    }

    /// Gives up one [`FlagWatch::watch_line`].
    pub fn unwatch_line(&self, key: &str, line: &str) {
        self.change(
            Interest::Line {
                key: Arc::from(key),
                line: Arc::from(line),
            },
            false,
        );
    }

    fn change(&self, interest: Interest, add: bool) {
        if let Some(registry) = self.registry.upgrade() {
            registry.change(self.id, interest, add);
        }
    }
}

impl Drop for FlagWatch {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.unregister(self.id);
        }
    }
}

#[derive(Default)]
struct RegistryState {
    watchers: Vec<(u64, Weak<dyn FlagWatcher>)>,
    next_id: u64,
    /// The listener thread runs.
    running: bool,
    /// How many watches want each interest (the union the listener
    /// subscribes).
    wanted: HashMap<Interest, u32>,
    /// Each watch's own counts (given up when it is dropped).
    owned: HashMap<u64, HashMap<Interest, u32>>,
    /// Interests whose wanted-or-not changed since the listener last
    /// looked.
    changed: HashSet<Interest>,
    /// Rings the listener awake when `changed` gains its first item.
    wake: Option<Arc<dyn Fn() + Send + Sync>>,
    /// The interests the listener has confirmed live on its channel (a
    /// subscription the server acknowledged, a doorbell watched), until it
    /// drops them or loses the channel: an announcement for one of them
    /// reaches this process. See [`Registry::is_confirmed`].
    confirmed: HashSet<Interest>,
}

/// The watchers of one listener, what they want, and whether its thread
/// runs.
#[derive(Default)]
pub(crate) struct Registry {
    state: Mutex<RegistryState>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    /// Registers `watcher`; `start` is called (outside the lock) to start the
    /// listener thread when none runs. `start` returns false when the thread
    /// could not be started: then there is no push, and `None`.
    pub fn watch(
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

    fn change(&self, id: u64, interest: Interest, add: bool) {
        let wake = {
            let mut state = self.state.lock();
            let state = &mut *state;
            let own = state.owned.entry(id).or_default();
            if add {
                *own.entry(interest.clone()).or_default() += 1;
            } else {
                match own.get_mut(&interest) {
                    Some(n) if *n > 1 => *n -= 1,
                    Some(_) => {
                        own.remove(&interest);
                    }
                    None => return,
                }
            }
            let flipped = count(&mut state.wanted, interest.clone(), add);
            flipped
                .then(|| {
                    let first = state.changed.is_empty();
                    state.changed.insert(interest);
                    first.then(|| state.wake.clone()).flatten()
                })
                .flatten()
        };
        if let Some(wake) = wake {
            wake();
        }
    }

    fn unregister(&self, id: u64) {
        let wake = {
            let mut state = self.state.lock();
            let state = &mut *state;
            state.watchers.retain(|(w, _)| *w != id);
            for (interest, n) in state.owned.remove(&id).unwrap_or_default() {
                for _ in 1..n {
                    count(&mut state.wanted, interest.clone(), false);
                }
                if count(&mut state.wanted, interest.clone(), false) {
                    state.changed.insert(interest);
                }
            }
            // Also when nothing changed: a listener with nobody left
            // retires sooner.
            state.wake.clone()
        };
        if let Some(wake) = wake {
            wake();
        }
    }

    /// Sets the listener's wake-up: called (outside the lock, on the
    /// caller's thread, so it must not block) when an interest changes
    /// while the listener may be asleep. `None`: the listener looks at
    /// least every time it wakes on its own.
    pub fn set_wake(&self, wake: Option<Arc<dyn Fn() + Send + Sync>>) {
        self.state.lock().wake = wake;
    }

    /// Everything wanted now (a listener that (re)connects subscribes all
    /// of it); pending changes are taken with it.
    pub fn wanted(&self) -> Vec<Interest> {
        let mut state = self.state.lock();
        state.changed.clear();
        state.wanted.keys().cloned().collect()
    }

    /// The interests that changed since the last call (or
    /// [`Registry::wanted`]), each with whether it is wanted now.
    pub fn take_changes(&self) -> Vec<(Interest, bool)> {
        let mut state = self.state.lock();
        if state.changed.is_empty() {
            return Vec::new();
        }
        let changed = std::mem::take(&mut state.changed);
        changed
            .into_iter()
            .map(|i| {
                let wanted = state.wanted.contains_key(&i);
                (i, wanted)
            })
            .collect()
    }

    /// Are changes waiting for the listener ([`Registry::take_changes`])?
    /// A listener that can be woken asks after it said it sleeps
    /// ([`super::listen::PushSource::cold`]): a change made before that is
    /// seen here, one made after rings its bell.
    pub(crate) fn has_changes(&self) -> bool {
        !self.state.lock().changed.is_empty()
    }

    /// Is `interest` wanted now?
    pub fn is_wanted(&self, interest: &Interest) -> bool {
        self.state.lock().wanted.contains_key(interest)
    }

    /// Is `interest` confirmed live on the listener's channel? Until it
    /// is, an announcement of it may be lost: a new interest waits for the
    /// listener's next wake-up (up to [`COLD_SLICE`](super::listen::COLD_SLICE) on a Redis Cluster, whose
    /// readers cannot be woken), so a waiting line whose subscription is not
    /// confirmed does not rely on being told (`crate::waiting`).
    pub(crate) fn is_confirmed(&self, interest: &Interest) -> bool {
        self.state.lock().confirmed.contains(interest)
    }

    /// The listener's subscriptions to `interests` are live (no watcher
    /// is told: [`Registry::live`] tells them).
    pub(crate) fn confirm(&self, interests: &[Interest]) {
        if interests.is_empty() {
            return;
        }
        let mut state = self.state.lock();
        state.confirmed.extend(interests.iter().cloned());
    }

    /// The listener is about to drop `interests`, or lost them (call it
    /// before an unsubscribe is sent: from then on an announcement may be
    /// lost). The heads of the lines still waiting on one of them are rung:
    /// one that sleeps counting on being told tries again (and, not
    /// confirmed now, keeps trying soon until it is).
    pub(crate) fn unconfirm(&self, interests: &[Interest]) {
        if interests.is_empty() {
            return;
        }
        let lines: Vec<Arc<str>> = {
            let mut state = self.state.lock();
            let state = &mut *state;
            interests
                .iter()
                .filter(|i| state.confirmed.remove(*i))
                .filter_map(|i| match i {
                    Interest::Line { key, .. } if state.wanted.contains_key(i) => Some(key.clone()),
                    _ => None,
                })
                .collect()
        };
        self.ring_lines(&lines);
    }

    /// The listener's channel is gone: nothing is confirmed until it
    /// subscribes again (the lines still waiting are rung, as for
    /// [`Registry::unconfirm`]).
    pub(crate) fn unconfirm_all(&self) {
        let lines: Vec<Arc<str>> = {
            let mut state = self.state.lock();
            let state = &mut *state;
            std::mem::take(&mut state.confirmed)
                .into_iter()
                .filter_map(|i| match &i {
                    Interest::Line { key, .. } if state.wanted.contains_key(&i) => {
                        Some(key.clone())
                    }
                    _ => None,
                })
                .collect()
        };
        self.ring_lines(&lines);
    }

    /// Rings the heads of the lines on `keys` (no lock held).
    fn ring_lines(&self, keys: &[Arc<str>]) {
        if keys.is_empty() {
            return;
        }
        let watchers = self.watchers();
        for key in keys {
            for w in &watchers {
                w.released(key, None);
            }
        }
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
            state.wake = None;
            return true;
        }
        false
    }

    pub(crate) fn raised(&self, key: &str) {
        heard();
        for w in self.watchers() {
            w.raised(key);
        }
    }

    /// The flag `key` may have been raised unheard (a doorbell of its
    /// bucket rang): the watchers read it.
    pub(crate) fn poll_flag(&self, key: &str) {
        heard();
        for w in self.watchers() {
            w.poll_flag(key);
        }
    }

    pub(crate) fn poll_now(&self) {
        for w in self.watchers() {
            w.poll_now();
        }
    }

    pub(crate) fn released(&self, key: &str, fence: Option<u64>) {
        heard();
        for w in self.watchers() {
            w.released(key, fence);
        }
    }

    pub(crate) fn released_any(&self) {
        for w in self.watchers() {
            w.released_any();
        }
    }

    pub(crate) fn idle(&self) {
        for w in self.watchers() {
            w.idle();
        }
    }

    /// The listener's subscriptions to `interests` just became live:
    /// whatever they would have announced meanwhile is looked at once.
    pub(crate) fn live(&self, interests: &[Interest]) {
        if interests.is_empty() {
            return;
        }
        self.confirm(interests);
        let watchers = self.watchers();
        for interest in interests {
            for w in &watchers {
                match interest {
                    Interest::Flag(key) => w.poll_flag(key),
                    Interest::Line { key, .. } => w.released(key, None),
                }
            }
        }
    }
}

/// Counts `interest` up (`add`) or down in `wanted`; true when it became
/// wanted or stopped being wanted.
fn count(wanted: &mut HashMap<Interest, u32>, interest: Interest, add: bool) -> bool {
    if add {
        let n = wanted.entry(interest).or_default();
        *n += 1;
        *n == 1
    } else {
        match wanted.get_mut(&interest) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                wanted.remove(&interest);
                true
            }
            None => false,
        }
    }
}

/// A registry per process generation (see the module header on fork).
pub(crate) fn fork_local_registry() -> ForkLocal<Arc<Registry>> {
    ForkLocal::new(Arc::default(), |_| Arc::default())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A watcher that does nothing.
    pub(crate) struct Nobody;
    impl FlagWatcher for Nobody {
        fn raised(&self, _: &str) {}
        fn poll_now(&self) {}
    }

    /// A registry with `watcher` registered (no listener thread).
    pub(crate) fn registry_with(watcher: &Arc<dyn FlagWatcher>) -> (Arc<Registry>, FlagWatch) {
        let registry = Arc::new(Registry::default());
        let watch = registry
            .watch(Arc::downgrade(watcher), |_| true)
            .expect("started");
        (registry, watch)
    }

    #[test]
    fn interests_are_counted_and_batched() {
        let w: Arc<dyn FlagWatcher> = Arc::new(Nobody);
        let (registry, watch) = registry_with(&w);
        let (_, other) = {
            let o = registry.watch(Arc::downgrade(&w), |_| true).unwrap();
            ((), o)
        };
        watch.watch_flag("a");
        watch.watch_flag("a");
        other.watch_flag("a");
        watch.watch_line("k", "L1");
        let mut changes = registry.take_changes();
        changes.sort();
        assert_eq!(
            changes,
            vec![
                (Interest::Flag("a".into()), true),
                (
                    Interest::Line {
                        key: "k".into(),
                        line: "L1".into()
                    },
                    true
                )
            ]
        );
        assert!(registry.take_changes().is_empty(), "taken once");
        watch.unwatch_flag("a");
        watch.unwatch_flag("a");
        assert!(registry.take_changes().is_empty(), "still wanted by other");
        drop(other);
        assert_eq!(
            registry.take_changes(),
            vec![(Interest::Flag("a".into()), false)]
        );
        // Added and removed before the listener looked: one change, not
        // wanted.
        watch.watch_flag("b");
        watch.unwatch_flag("b");
        assert_eq!(
            registry.take_changes(),
            vec![(Interest::Flag("b".into()), false)]
        );
        drop(watch);
        assert_eq!(
            registry.wanted(),
            Vec::new(),
            "a dropped watch gives up all"
        );
    }
}
