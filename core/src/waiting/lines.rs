//! The lines of waiters of this process, one per (backend, key): who is
//! at the head, the bells that wake them, the releases heard (pushed or
//! local) and the hand-over to the next waiter; a line's id and its place
//! in the backend's queue.

use crate::contract::adapter::{Adapter, Lease};
use crate::contract::push::{FlagWatch, FlagWatcher};
#[cfg(not(loom))]
use crate::runtime::fork::ForkLocal;
use crate::runtime::sync::{Condvar, Mutex};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
// std's also under loom: `waiters` is read and written SeqCst only, and a
// std atomic in a model is read in interleaving order, which is exactly
// SeqCst; loom's would treat it as AcqRel (loom's README) and report
// stale reads that SeqCst forbids.
use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(loom))]
use std::sync::OnceLock;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How long a release is remembered, to recognise it when it is heard the
/// other way too (a local release and its announcement).
pub(crate) const OWN_RELEASE_MEMORY: Duration = Duration::from_secs(10);

#[derive(Default)]
pub(crate) struct BellState {
    /// [`WaitWaker::wake`] calls ([`WakeToken`]s count these).
    pub(crate) wakes: u64,
    /// "Try now" rings: a release, a re-subscribe, the head before leaving
    /// without the lease.
    pub(crate) rings: u64,
    /// The signal's abort (look at it now).
    pub(crate) aborted: bool,
    /// This waiter heads its line (only the head tries).
    pub(crate) head: bool,
    /// Set with `head` when the previous head left holding the lease: its
    /// ttl, the longest until that lease could lapse.
    pub(crate) lapse: Option<Duration>,
    /// Set with `head`: when the line's queue entry, left by the previous
    /// head (which left without the lease), must be refreshed by a try
    /// ([`crate::contract::QUEUE_REFRESH`]); `None`: no entry to keep.
    pub(crate) refresh_at: Option<Instant>,
    /// The earliest ring not acted on yet ([`Rung`]): the try it causes
    /// tells the test hook ([`super::observe`]); a head that leaves
    /// without acting on it hands it to the next one.
    pub(crate) rung: Option<Rung>,
}

/// When a ring came, and the fencing number of the release it was for
/// (`None`: a ring that names no release: a break, a re-subscribe, a
/// head leaving).
pub(crate) type Rung = (Instant, Option<u64>);

/// One waiter's wake-up: its state and a condition variable (std's, see
/// `crate::runtime::sync`: a forked child inherits no phantom waiters).
#[derive(Default)]
pub(crate) struct Bell {
    pub(crate) state: Mutex<BellState>,
    pub(crate) changed: Condvar,
}

impl Bell {
    /// "Try now", for the release of `fence` (`None`: no release named).
    pub(crate) fn ring(&self, fence: Option<u64>) {
        let mut state = self.state.lock();
        state.rings = state.rings.wrapping_add(1);
        state.rung.get_or_insert((Instant::now(), fence));
        self.changed.notify_all();
    }

    /// Makes this waiter the head; `lapse` and `refresh_at` as in
    /// [`BellState`]; `ring` (the leaver's ring it had not acted on, if
    /// any: `Some(None)` for a ring that is new) to make it try at once.
    pub(crate) fn promote(
        &self,
        lapse: Option<Duration>,
        refresh_at: Option<Instant>,
        ring: Option<Option<Rung>>,
    ) {
        let mut state = self.state.lock();
        state.head = true;
        state.lapse = lapse;
        state.refresh_at = refresh_at;
        if let Some(rung) = ring {
            state.rings = state.rings.wrapping_add(1);
            let rung = rung.unwrap_or((Instant::now(), None));
            state.rung.get_or_insert(rung);
        }
        self.changed.notify_all();
    }
}

/// Wakes a [`Waiting`] blocked in [`Waiting::poll`] (which then returns
/// [`Poll::Pending`]); for a host's unblock function. Cheap to clone, any
/// thread.
#[derive(Clone)]
pub struct WaitWaker {
    pub(crate) bell: Arc<Bell>,
}

impl WaitWaker {
    /// Makes the current (or next, if its token predates this call) poll
    /// return [`Poll::Pending`].
    pub fn wake(&self) {
        let mut state = self.bell.state.lock();
        state.wakes = state.wakes.wrapping_add(1);
        self.bell.changed.notify_all();
    }
}

// ---------------------------------------------------------------------------
// The registry of lines (module header).

/// An adapter object's identity: the address of its data.
pub(crate) fn adapter_id(adapter: &Arc<dyn Adapter>) -> usize {
    Arc::as_ptr(adapter).cast::<()>() as usize
}

pub(crate) struct Line {
    /// This line's name in the backend's queue of lines for the key
    /// ([`Adapter::acquire_queued`]): random, kept while the line exists.
    pub(crate) id: Arc<str>,
    /// A waiter tried with `id` since the line last acquired: the backend
    /// may have it queued.
    pub(crate) asked: bool,
    /// Waiters in arrival order, with when each joined; the front one is
    /// the head.
    pub(crate) queue: VecDeque<(u64, Arc<Bell>, Instant)>,
    /// Releases rung for lately (by fence), whether by this process's
    /// release or by the announcement: the same release heard the other
    /// way later rings nobody (one try saved per hand-off).
    pub(crate) rung_for: Vec<(u64, Instant)>,
}

/// A fresh line id: 16 random hex digits.
pub(crate) fn line_id() -> Arc<str> {
    let token = crate::runtime::token::mint_token().unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        format!("{:08x}{nanos:08x}", std::process::id())
    });
    Arc::from(&token[..16])
}

impl Line {
    pub(crate) fn new(id: Arc<str>) -> Self {
        Line {
            id,
            asked: false,
            queue: VecDeque::new(),
            rung_for: Vec::new(),
        }
    }

    /// Rings the head, for the release of `fence` (`None`: none named).
    pub(crate) fn ring_head(&self, fence: Option<u64>) {
        if let Some((_, bell, _)) = self.queue.front() {
            bell.ring(fence);
        }
    }

    /// Rings the head for the release of `fence`, unless that release
    /// rang it already (heard the other way: message or local call).
    pub(crate) fn ring_for(&mut self, fence: u64) {
        if let Some(at) = self.rung_for.iter().position(|(f, _)| *f == fence) {
            self.rung_for.swap_remove(at);
            return;
        }
        let now = Instant::now();
        self.rung_for
            .retain(|(_, at)| now.saturating_duration_since(*at) < OWN_RELEASE_MEMORY);
        if self.rung_for.len() >= 64 {
            self.rung_for.remove(0);
        }
        self.rung_for.push((fence, now));
        self.ring_head(Some(fence));
    }
}

/// The lines on one adapter object, and its listener registration.
pub(crate) struct AdapterLines {
    pub(crate) lines: HashMap<Arc<str>, Line>,
    pub(crate) waiters: usize,
    pub(crate) watcher: Arc<WaitWatcher>,
    /// Kept while anyone waits; `None` if the adapter can't push.
    pub(crate) watch: Option<FlagWatch>,
    /// `watch_flags` was asked (by the first waiter, outside the lock).
    pub(crate) watching: bool,
}

#[derive(Default)]
pub(crate) struct LinesState {
    pub(crate) adapters: HashMap<usize, AdapterLines>,
    pub(crate) next_id: u64,
    /// The ids of lines that ended lately, per (adapter, key): a line that
    /// starts again soon takes the same id, so its subscription (kept
    /// [`crate::contract::push::LINGER`] by the listener) is still live and its
    /// releases are heard without a new subscribe.
    pub(crate) recent: RecentLines,
}

/// How many ended lines' ids are remembered at most.
pub(crate) const RECENT_LINES: usize = 4096;

/// The ids of lines that ended lately ([`LinesState::recent`]).
pub(crate) type RecentLines = HashMap<(usize, Arc<str>), (Arc<str>, Instant)>;

/// The id for a new line of (`adapter`, `key`): the last one's if it
/// ended within [`crate::contract::push::LINGER`], else a fresh one.
pub(crate) fn line_id_for(recent: &mut RecentLines, adapter: usize, key: &Arc<str>) -> Arc<str> {
    match recent.remove(&(adapter, key.clone())) {
        Some((id, at)) if at.elapsed() < crate::contract::push::LINGER => id,
        _ => line_id(),
    }
}

/// Remembers the id of a line that ended at `at`.
pub(crate) fn line_ended(
    recent: &mut RecentLines,
    adapter: usize,
    key: Arc<str>,
    id: Arc<str>,
    at: Instant,
) {
    if recent.len() >= RECENT_LINES {
        recent.retain(|_, (_, at)| at.elapsed() < crate::contract::push::LINGER);
        if recent.len() >= RECENT_LINES {
            recent.clear();
        }
    }
    recent.insert((adapter, key), (id, at));
}

/// A line that ended while the backend may still have it queued
/// ([`leave`]): the caller asks the backend to forget the entry, then says
/// whether it did ([`Forget::done`]). Until then the line's id is not
/// taken again: a line of the key that starts meanwhile gets a new one.
/// Else its first try could queue the id just before the forget, sent
/// earlier, reached the backend and took the new entry away: that line
/// would wait to be told while nobody would tell it (a soak found a wait
/// that ran out on a free key so).
#[must_use = "the backend is to be asked to forget the line"]
pub(crate) struct Forget {
    adapter: usize,
    key: Arc<str>,
    id: Arc<str>,
    ended: Instant,
    generation: u64,
}

impl Forget {
    /// The backend said it forgot the entry: the id may be taken again
    /// ([`LinesState::recent`]). Not called when the forget failed: it may
    /// still be applied later (a request a silent network held back).
    pub(crate) fn done(self) {
        if self.generation != crate::runtime::fork::generation() {
            return;
        }
        let mut state = lines().state.lock();
        line_ended(
            &mut state.recent,
            self.adapter,
            self.key,
            self.id,
            self.ended,
        );
    }
}

/// The registry's lock: a short section, `parking_lot`'s; under loom the
/// crate's model-checked one (`crate::runtime::sync`), since a bell's lock
/// is taken under it.
#[cfg(not(loom))]
type RegistryLock<T> = parking_lot::Mutex<T>;
#[cfg(loom)]
type RegistryLock<T> = Mutex<T>;

#[derive(Default)]
pub(crate) struct Lines {
    pub(crate) state: RegistryLock<LinesState>,
    /// Waiters in all lines: releases skip the registry when zero.
    pub(crate) waiters: AtomicUsize,
}

#[cfg(not(loom))]
pub(crate) static LINES: OnceLock<ForkLocal<Lines>> = OnceLock::new();

#[cfg(not(loom))]
pub(crate) fn lines() -> &'static Lines {
    LINES
        .get_or_init(|| ForkLocal::new(Lines::default(), |_| Lines::default()))
        .get()
}

/// The registry if anyone waits (one atomic load when nobody ever did).
#[cfg(not(loom))]
pub(crate) fn lines_in_use() -> Option<&'static Lines> {
    let lines = LINES.get()?.get();
    (lines.waiters.load(Ordering::SeqCst) > 0).then_some(lines)
}

// Under loom the registry is one per model run (loom's `lazy_static`): a
// process-wide static would carry one run's loom objects into the next.
#[cfg(loom)]
loom::lazy_static! {
    static ref LOOM_LINES: Lines = Lines::default();
}

#[cfg(loom)]
pub(crate) fn lines() -> &'static Lines {
    &LOOM_LINES
}

#[cfg(loom)]
pub(crate) fn lines_in_use() -> Option<&'static Lines> {
    let lines = lines();
    (lines.waiters.load(Ordering::SeqCst) > 0).then_some(lines)
}

/// Adds to `listing` this process's waiters on `adapter` (a
/// [`adapter_id`]) under `prefix`, each waiter as a line: for Memory, whose
/// only process is this one and which keeps no queue of its own
/// ([`crate::WaitingInfo`]). Takes the registry lock: call it with no
/// backend lock held.
pub(crate) fn add_waiters(adapter: usize, prefix: &str, listing: &mut crate::Listing) {
    let Some(lines) = lines_in_use() else {
        return;
    };
    let now = Instant::now();
    let state = lines.state.lock();
    let Some(a) = state.adapters.get(&adapter) else {
        return;
    };
    for (key, line) in a.lines.iter().filter(|(k, _)| k.starts_with(prefix)) {
        listing.add_waiting(
            key.to_string(),
            line.queue.iter().map(|(_, _, joined)| *joined),
            |joined| now.saturating_duration_since(joined),
        );
    }
}

/// Tells this process's waiters on `key` that `lease` was just released
/// through `adapter` (the release succeeded, or may have): the head of the
/// line tries at once. Cheap when nobody waits (a few atomic loads). For
/// every release path: [`crate::Locks::release`], [`Hold::release`] and the
/// engine's background delete.
pub(crate) fn released(adapter: &Arc<dyn Adapter>, lease: &Lease) {
    released_fence(adapter, lease.key(), lease.fence());
}

/// [`released`] for the lease on `key` with fencing number `fence`.
pub(crate) fn released_fence(adapter: &Arc<dyn Adapter>, key: &str, fence: u64) {
    let Some(lines) = lines_in_use() else {
        return;
    };
    let mut state = lines.state.lock();
    let line = state
        .adapters
        .get_mut(&adapter_id(adapter))
        .and_then(|a| a.lines.get_mut(key));
    if let Some(line) = line {
        line.ring_for(fence);
    }
}

/// [`released`] for a release that names no lease ([`crate::Locks::break_lease`]).
pub(crate) fn released_key(adapter: &Arc<dyn Adapter>, key: &str) {
    let Some(lines) = lines_in_use() else {
        return;
    };
    let state = lines.state.lock();
    let line = state
        .adapters
        .get(&adapter_id(adapter))
        .and_then(|a| a.lines.get(key));
    if let Some(line) = line {
        line.ring_head(None);
    }
}

/// The lines on `adapter` hear releases by push (its listener runs).
pub(crate) fn pushes(adapter: &Arc<dyn Adapter>) -> bool {
    lines()
        .state
        .lock()
        .adapters
        .get(&adapter_id(adapter))
        .is_some_and(|a| a.watch.is_some())
}

/// Whether a release announced to the line `line` of `key` on `adapter`
/// reaches this process now: `None` when the adapter's lines hear no
/// pushes, else whether its listener has confirmed the line's
/// subscription ([`crate::contract::push::Registry::is_confirmed`]).
pub(crate) fn announced(adapter: &Arc<dyn Adapter>, key: &str, line: &str) -> Option<bool> {
    let state = lines().state.lock();
    let watch = state.adapters.get(&adapter_id(adapter))?.watch.as_ref()?;
    Some(watch.line_confirmed(key, line))
}

/// What the adapter's listener tells the lines of one adapter object.
pub(crate) struct WaitWatcher {
    pub(crate) adapter: usize,
}

impl FlagWatcher for WaitWatcher {
    fn raised(&self, _key: &str) {}

    fn poll_now(&self) {}

    fn released(&self, key: &str, fence: Option<u64>) {
        let Some(lines) = lines_in_use() else {
            return;
        };
        let mut state = lines.state.lock();
        let line = state
            .adapters
            .get_mut(&self.adapter)
            .and_then(|a| a.lines.get_mut(key));
        match (line, fence) {
            (Some(line), Some(fence)) => line.ring_for(fence),
            (Some(line), None) => line.ring_head(None),
            (None, _) => {}
        }
    }

    fn released_any(&self) {
        let Some(lines) = lines_in_use() else {
            return;
        };
        let state = lines.state.lock();
        if let Some(a) = state.adapters.get(&self.adapter) {
            for line in a.lines.values() {
                line.ring_head(None);
            }
        }
    }
}

/// A waiter's place in a line.
pub(crate) struct Place {
    pub(crate) adapter: usize,
    pub(crate) id: u64,
    /// The line's id ([`Line::id`]).
    pub(crate) line: Arc<str>,
    /// The fork generation it was taken in (a child's registry is new).
    pub(crate) generation: u64,
}

/// Joins the line of (`adapter`, `key`); the bell is promoted at once if
/// the line was empty.
pub(crate) fn join(adapter: &Arc<dyn Adapter>, key: &Arc<str>, bell: &Arc<Bell>) -> Place {
    let lines = lines();
    let aid = adapter_id(adapter);
    let (id, line_id, must_watch) = {
        let mut guard = lines.state.lock();
        let state = &mut *guard;
        state.next_id += 1;
        let id = state.next_id;
        let recent = &mut state.recent;
        let a = state.adapters.entry(aid).or_insert_with(|| AdapterLines {
            lines: HashMap::default(),
            waiters: 0,
            watcher: Arc::new(WaitWatcher { adapter: aid }),
            watch: None,
            watching: false,
        });
        a.waiters += 1;
        let (lines_of, watch) = (&mut a.lines, &a.watch);
        let line = lines_of.entry(key.clone()).or_insert_with(|| {
            let id = line_id_for(recent, aid, key);
            if let Some(watch) = watch {
                watch.watch_line(key, &id);
            }
            Line::new(id)
        });
        let line_id = line.id.clone();
        line.queue.push_back((id, bell.clone(), Instant::now()));
        if line.queue.len() == 1 {
            bell.promote(None, None, None);
        }
        lines.waiters.fetch_add(1, Ordering::SeqCst);
        let must_watch = (!a.watching).then(|| {
            a.watching = true;
            a.watcher.clone()
        });
        (id, line_id, must_watch)
    };
    if let Some(watcher) = must_watch {
        // Outside the lock: this may start the listener thread.
        let weak: Weak<dyn FlagWatcher> =
            Arc::downgrade(&(watcher.clone() as Arc<dyn FlagWatcher>));
        let watch = adapter.watch_flags(weak);
        let mut state = lines.state.lock();
        let mine = state
            .adapters
            .get_mut(&aid)
            .filter(|a| Arc::ptr_eq(&a.watcher, &watcher));
        let unused = match mine {
            Some(a) => {
                // The lines made before the watch existed.
                if let Some(watch) = &watch {
                    for (key, line) in &a.lines {
                        watch.watch_line(key, &line.id);
                    }
                }
                std::mem::replace(&mut a.watch, watch)
            }
            None => watch,
        };
        drop(state);
        drop(unused);
    }
    Place {
        adapter: aid,
        id,
        line: line_id,
        generation: crate::runtime::fork::generation(),
    }
}

/// What a head leaving its line passes to the next waiter.
pub(crate) struct Handoff {
    /// The next head tries at once.
    pub(crate) ring: bool,
    /// The leaver's rings when it last acted: a ring that came after (up
    /// to the moment it is out of the line, judged under the registry
    /// lock, so a release racing the leave is never lost) passes on too.
    pub(crate) seen: Option<u64>,
    /// Else it tries after this long at most ([`BellState::lapse`]).
    pub(crate) lapse: Option<Duration>,
    /// When the line's queue entry must be refreshed ([`BellState::refresh_at`]).
    pub(crate) refresh_at: Option<Instant>,
    /// The leaver acquired (the backend took the line out of its queue).
    pub(crate) acquired: bool,
    /// The leaver tried with the line's id.
    pub(crate) tried: bool,
}

/// Leaves the line; a head hands over to the next waiter (module header).
/// `Some` when the line is gone and the backend may still have it queued
/// (the caller then asks it to forget the line, [`Forget`]).
pub(crate) fn leave(place: &Place, key: &str, handoff: Handoff) -> Option<Forget> {
    if place.generation != crate::runtime::fork::generation() {
        return None; // taken in the parent's registry, which is not ours
    }
    let lines = lines();
    let mut state = lines.state.lock();
    let a = state.adapters.get_mut(&place.adapter)?;
    let line = a.lines.get_mut(key)?;
    let at = line.queue.iter().position(|(id, _, _)| *id == place.id)?;
    if handoff.acquired {
        line.asked = false;
    } else if handoff.tried {
        line.asked = true;
    }
    // The ring it had not acted on, if one came (with when: the next
    // head's try acts on it).
    let rung_meanwhile = handoff.seen.and_then(|seen| {
        let state = line.queue[at].1.state.lock();
        (state.rings != seen).then_some(state.rung)
    });
    line.queue.remove(at);
    a.waiters -= 1;
    lines.waiters.fetch_sub(1, Ordering::SeqCst);
    if at == 0 {
        if let Some((_, next, _)) = line.queue.front() {
            let ring = rung_meanwhile.or(handoff.ring.then_some(None));
            next.promote(handoff.lapse, handoff.refresh_at, ring);
        }
    }
    let mut forget = None;
    if line.queue.is_empty() {
        let asked = line.asked;
        if let Some((key, line)) = a.lines.remove_entry(key) {
            if let Some(watch) = &a.watch {
                watch.unwatch_line(&key, &line.id);
            }
            let ended = Instant::now();
            if asked {
                forget = Some(Forget {
                    adapter: place.adapter,
                    key,
                    id: line.id,
                    ended,
                    generation: place.generation,
                });
            } else {
                line_ended(&mut state.recent, place.adapter, key, line.id, ended);
            }
        }
    }
    let a = state.adapters.get(&place.adapter);
    let gone = a
        .is_some_and(|a| a.waiters == 0)
        .then(|| state.adapters.remove(&place.adapter))
        .flatten();
    drop(state);
    // Unregisters from the listener outside the lock.
    drop(gone);
    forget
}
