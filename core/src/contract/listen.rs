//! The listener side of push ([`super::push`] is the process side, the
//! registry it follows): a listener's own view of its subscriptions
//! ([`Subscriptions`]: what is live, what waits out its
//! [`LINGER`]), its read slices ([`HOT_SLICE`],
//! [`COLD_SLICE`]), its thread ([`spawn`]) — used by every listener,
//! Local's doorbells and a Cluster's shards too — and the one listener
//! lifecycle of a network backend:
//! connect, subscribe the process's whole set of interests, then follow
//! the registry's changes, read messages in short slices, check a silent
//! connection, and on any failure drop the connection and start again —
//! written once. A backend says only how ([`PushSource`]): connect,
//! (un)subscribe a batch of channels, read what arrives by a deadline,
//! ping, and the channel of an interest. Redis (a single server or
//! Sentinel's master) and Postgres (`LISTEN`) use it; a Cluster shards its
//! channels over one reader per master (`backend/redis/cluster/shards.rs`)
//! and shares [`deliver`] and [`PING_EVERY`].
//!
//! The life of one listener thread ([`Listener::run`]):
//! 1. Connect, subscribe everything wanted ([`Registry::wanted`]) in
//!    batches of [`PushSource::CHUNK`], each confirmed by the server.
//! 2. Live: tell every watcher to read its flags and every waiting line
//!    to try once ([`Registry::poll_now`], [`Registry::released_any`]):
//!    anything raised or released before (or while the channel was down)
//!    is found by reading, anything after is announced.
//! 3. Loop: apply the registry's pending changes ([`Subscriptions::plan`],
//!    then [`Registry::live`] for what just became live), read messages
//!    for a [`Subscriptions::slice`], deliver them. After a second of
//!    silence: retire if nobody watches, let watchers drop lingering
//!    interests ([`Registry::idle`]), ping every [`PING_EVERY`], and ask
//!    whether the publisher moved (a Sentinel failover).
//! 4. Any failure after step 1 worked (a lost connection, a failed ping,
//!    a refused subscription, a move): reconnect at once. A failed
//!    connect or first subscription: back off 50 ms, doubling to
//!    [`LISTENER_IDLE`].
//!
//! Errors are never reported: push is an accelerator and the tick poll is
//! the floor. Threads: only the listener's own (started by
//! [`spawn`], deaf to host signals).

use super::push::{Interest, Registry, LINGER};
use crate::error::Result;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an idle listener (no watcher registered) lingers, and the
/// longest it waits between liveness checks of its channel.
pub const LISTENER_IDLE: Duration = Duration::from_secs(1);

/// How often a listener whose socket read cannot be woken (redis-rs) looks
/// for new interests while they keep coming (within [`HOT_FOR`] of the
/// last change: a stop raised right after a hold starts still arrives in
/// a few ms), and when they don't ([`COLD_SLICE`]). A cold read is cut
/// short by the listener's bell where it has one ([`PushSource::bell`]:
/// Redis single server and Sentinel ring a channel of the listener's own,
/// so the first new key after a quiet spell is subscribed within a round
/// trip); a Cluster's readers have none, and there that key waits up to
/// [`COLD_SLICE`]. Neither decides when a flag is seen: a new hold reads
/// its flag itself and again once its subscription is live, and the tick
/// poll is the floor. Local's listener is woken at once instead (an
/// eventfd).
pub const HOT_SLICE: Duration = Duration::from_millis(2);
/// See [`HOT_SLICE`].
pub const COLD_SLICE: Duration = Duration::from_millis(500);
/// See [`HOT_SLICE`].
pub const HOT_FOR: Duration = Duration::from_secs(1);

/// How often a silent listener checks its connection (a per-process cost
/// while idle, so not every second: a broken connection fails a read at
/// once; this is for one that went silent, and until it is found the tick
/// poll is the floor).
pub const PING_EVERY: Duration = Duration::from_secs(5);

/// Messages read, channel and payload, in the order they arrived.
pub(crate) type Heard = Vec<(String, Vec<u8>)>;

/// What a backend supplies to the lifecycle (module header).
pub(crate) trait PushSource: Send + Sync + 'static {
    /// One subscribed connection.
    type Con;
    /// Channels per (un)subscribe command.
    const CHUNK: usize;
    /// A connection, opened by `deadline`.
    fn connect(&self, deadline: Instant) -> Result<Self::Con>;
    /// The channel an announcement of `interest` is published on.
    fn channel_of(&self, interest: &Interest) -> String;
    /// Subscribes `names` (`on`) or unsubscribes them, by `deadline`;
    /// returns once the server confirmed (a subscribed channel is then
    /// live). Messages read meanwhile go to `heard`.
    fn subscribe(
        &self,
        con: &mut Self::Con,
        names: &[String],
        on: bool,
        deadline: Instant,
        heard: &mut Heard,
    ) -> Result<()>;
    /// Reads what arrives until `until` into `heard` (nothing by then is
    /// not an error).
    fn read(&self, con: &mut Self::Con, until: Instant, heard: &mut Heard) -> Result<()>;
    /// Checks a silent connection by `deadline` (messages read meanwhile go
    /// to `heard`).
    fn ping(&self, con: &mut Self::Con, deadline: Instant, heard: &mut Heard) -> Result<()>;
    /// A wake-up for the registry ([`Registry::set_wake`]) that cuts short
    /// a read of `con` while it is [`PushSource::cold`]; called on a
    /// watcher's thread, so it must not block. Default: none.
    fn bell(&self, con: &Self::Con) -> Option<Arc<dyn Fn() + Send + Sync>> {
        let _ = con;
        None
    }
    /// The listener is about to read for longer than [`HOT_SLICE`] (`on`),
    /// or is back from that read (`!on`); true when its bell can cut that
    /// read short (then a new interest is not left waiting for the slice to
    /// end). Default: false.
    fn cold(&self, con: &Self::Con, on: bool) -> bool {
        let _ = (con, on);
        false
    }
    /// Asked about once a second of silence: true when `con` no longer goes
    /// where messages are published (a failover). Default: never.
    fn moved(&self, con: &Self::Con, deadline: Instant) -> bool {
        let _ = (con, deadline);
        false
    }
}

/// One listener: a backend's [`PushSource`] and its I/O timeout.
pub(crate) struct Listener<S> {
    source: S,
    timeout: Duration,
}

enum Listened {
    /// Nobody watches any more.
    Retired,
    /// The connection failed after it was subscribed.
    Lost,
}

/// What a message on `channel` tells `registry`, given the channels
/// subscribed: a raise, or a release whose payload is the released
/// lease's fence (0 or anything else: not known).
pub(crate) fn deliver(
    channels: &HashMap<String, Interest>,
    registry: &Registry,
    channel: &str,
    payload: &[u8],
) {
    match channels.get(channel) {
        Some(Interest::Flag(key)) => registry.raised(key),
        Some(Interest::Line { key, .. }) => {
            let fence = std::str::from_utf8(payload)
                .ok()
                .and_then(|p| p.parse::<u64>().ok())
                .filter(|f| *f != 0);
            registry.released(key, fence);
        }
        None => {}
    }
}

fn deliver_all(channels: &HashMap<String, Interest>, registry: &Registry, heard: &mut Heard) {
    for (channel, payload) in heard.drain(..) {
        deliver(channels, registry, &channel, &payload);
    }
}

impl<S: PushSource> Listener<S> {
    pub(crate) fn new(source: S, timeout: Duration) -> Self {
        Listener { source, timeout }
    }

    /// Runs until nobody watches (the listener thread's body).
    pub(crate) fn run(&self, registry: &Registry) {
        const FIRST_BACKOFF: Duration = Duration::from_millis(50);
        let mut backoff = FIRST_BACKOFF;
        while !registry.retire_if_unwatched() {
            let listened = self.listen(registry);
            // The channel is gone, whatever ended it.
            registry.unconfirm_all();
            let subscribed = match listened {
                Ok(Listened::Retired) => return,
                Ok(Listened::Lost) => true,
                Err(_) => false,
            };
            // A connection that worked reconnects at once; failed attempts
            // back off (a server being restarted, a partition).
            if subscribed {
                backoff = FIRST_BACKOFF;
            } else {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(LISTENER_IDLE);
            }
        }
    }

    /// Sends `plan` (subscribes, then unsubscribes, in chunks), delivering
    /// what was heard meanwhile.
    fn apply(
        &self,
        con: &mut S::Con,
        plan: &Plan,
        channels: &mut HashMap<String, Interest>,
        registry: &Registry,
    ) -> Result<()> {
        let mut heard = Heard::new();
        for (items, on) in [(&plan.subscribe, true), (&plan.unsubscribe, false)] {
            for chunk in items.chunks(S::CHUNK) {
                let names: Vec<String> = chunk
                    .iter()
                    .map(|i| {
                        let name = self.source.channel_of(i);
                        match on {
                            true => channels.insert(name.clone(), i.clone()),
                            false => channels.remove(&name),
                        };
                        name
                    })
                    .collect();
                let deadline = Instant::now() + self.timeout;
                self.source
                    .subscribe(con, &names, on, deadline, &mut heard)?;
                deliver_all(channels, registry, &mut heard);
            }
        }
        Ok(())
    }

    /// One subscribed connection, until it fails or nobody watches.
    fn listen(&self, registry: &Registry) -> Result<Listened> {
        let mut con = self.source.connect(Instant::now() + self.timeout)?;
        let mut channels: HashMap<String, Interest> = HashMap::new();
        let mut subs = Subscriptions::default();
        let all = Plan {
            subscribe: registry.wanted(),
            unsubscribe: Vec::new(),
        };
        self.apply(&mut con, &all, &mut channels, registry)?;
        subs.done(&all);
        registry.confirm(&all.subscribe);
        // Live from here: what was raised before is found by reading, and
        // every waiter tries once (a release may have gone unheard).
        registry.poll_now();
        registry.released_any();
        let bell = self.source.bell(&con);
        let _unbell = bell.is_some().then_some(Unbell(registry));
        if bell.is_some() {
            registry.set_wake(bell);
        }
        let mut heard = Heard::new();
        let mut checked = Instant::now();
        let mut pinged = checked;
        let mut hot_until = checked + HOT_FOR;
        loop {
            let now = Instant::now();
            let plan = subs.plan(registry, now);
            if !plan.is_empty() {
                registry.unconfirm(&plan.unsubscribe);
                if self
                    .apply(&mut con, &plan, &mut channels, registry)
                    .is_err()
                {
                    return Ok(Listened::Lost);
                }
                subs.done(&plan);
                registry.live(&plan.subscribe);
                hot_until = Instant::now() + HOT_FOR;
            }
            let slice = subs.slice(now, hot_until);
            let until = Instant::now() + slice;
            let cold = slice > HOT_SLICE && self.source.cold(&con, true);
            if cold && registry.has_changes() {
                // Came after the plan, before the bell could ring: apply it.
                self.source.cold(&con, false);
                continue;
            }
            let read = self.source.read(&mut con, until, &mut heard);
            if cold {
                self.source.cold(&con, false);
            }
            if read.is_err() {
                return Ok(Listened::Lost);
            }
            if !heard.is_empty() {
                deliver_all(&channels, registry, &mut heard);
                continue;
            }
            if checked.elapsed() < LISTENER_IDLE {
                continue;
            }
            if registry.retire_if_unwatched() {
                return Ok(Listened::Retired);
            }
            registry.idle();
            // Silence: every PING_EVERY make sure the server is still
            // there, and every second that it is still where messages are
            // published.
            if pinged.elapsed() >= PING_EVERY {
                let pong = self
                    .source
                    .ping(&mut con, Instant::now() + self.timeout, &mut heard);
                deliver_all(&channels, registry, &mut heard);
                if pong.is_err() {
                    return Ok(Listened::Lost);
                }
                pinged = Instant::now();
            }
            checked = Instant::now();
            if self
                .source
                .moved(&con, checked + LISTENER_IDLE.min(self.timeout))
            {
                return Ok(Listened::Lost);
            }
        }
    }
}

/// Takes a listener's bell off its registry when the connection it rings
/// is gone.
struct Unbell<'a>(&'a Registry);

impl Drop for Unbell<'_> {
    fn drop(&mut self) {
        self.0.set_wake(None);
    }
}

/// A listener's own view of its subscriptions: what is live on its
/// channel, and what waits out its [`LINGER`] before it is dropped.
#[derive(Default)]
pub(crate) struct Subscriptions {
    pub(crate) live: FxHashSet<Interest>,
    leaving: FxHashMap<Interest, Instant>,
}

/// What a listener must do to follow the registry.
#[derive(Default, Debug)]
pub(crate) struct Plan {
    pub(crate) subscribe: Vec<Interest>,
    pub(crate) unsubscribe: Vec<Interest>,
}

impl Plan {
    pub(crate) fn is_empty(&self) -> bool {
        self.subscribe.is_empty() && self.unsubscribe.is_empty()
    }
}

impl Subscriptions {
    /// Forgets everything (the channel was lost).
    pub(crate) fn clear(&mut self) {
        self.live.clear();
        self.leaving.clear();
    }

    /// Folds the registry's pending changes in and says what to send now:
    /// new interests to subscribe, and interests unwanted for [`LINGER`]
    /// to drop. The caller sends them, then calls [`Subscriptions::done`].
    pub(crate) fn plan(&mut self, registry: &Registry, now: Instant) -> Plan {
        let mut plan = Plan::default();
        for (interest, wanted) in registry.take_changes() {
            if wanted {
                self.leaving.remove(&interest);
                if !self.live.contains(&interest) {
                    plan.subscribe.push(interest);
                }
            } else if self.live.contains(&interest) {
                self.leaving.entry(interest).or_insert(now + LINGER);
            }
        }
        if !self.leaving.is_empty() {
            let due: Vec<Interest> = self
                .leaving
                .iter()
                .filter(|(_, at)| now >= **at)
                .map(|(i, _)| i.clone())
                .collect();
            for interest in due {
                self.leaving.remove(&interest);
                // Wanted again meanwhile is caught by take_changes above;
                // check once more in case the change is still to come.
                if !registry.is_wanted(&interest) {
                    plan.unsubscribe.push(interest);
                }
            }
        }
        plan.subscribe.sort();
        plan.unsubscribe.sort();
        plan
    }

    /// `plan` was carried out.
    pub(crate) fn done(&mut self, plan: &Plan) {
        for i in &plan.unsubscribe {
            self.live.remove(i);
        }
        for i in &plan.subscribe {
            self.live.insert(i.clone());
        }
    }

    /// When the next lingering subscription is due to go.
    pub(crate) fn next_leave(&self) -> Option<Instant> {
        self.leaving.values().min().copied()
    }

    /// How long a listener may sleep now: [`HOT_SLICE`] until `hot_until`,
    /// else [`COLD_SLICE`], and no later than the next lingering
    /// subscription is due to go.
    pub(crate) fn slice(&self, now: Instant, hot_until: Instant) -> Duration {
        let slice = if now < hot_until {
            HOT_SLICE
        } else {
            COLD_SLICE
        };
        match self.next_leave() {
            Some(at) => slice.min(
                at.saturating_duration_since(now)
                    .max(Duration::from_millis(1)),
            ),
            None => slice,
        }
    }
}

/// Starts a named listener thread, deaf to host signals; false if the OS
/// refuses.
pub(crate) fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> bool {
    crate::runtime::thread::spawn(name, body).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::push::tests::{registry_with, Nobody};
    use crate::contract::push::FlagWatcher;
    use std::sync::Arc;

    #[test]
    fn a_subscription_lingers_before_it_goes() {
        let w: Arc<dyn FlagWatcher> = Arc::new(Nobody);
        let (registry, watch) = registry_with(&w);
        let mut subs = Subscriptions::default();
        let t0 = Instant::now();
        watch.watch_flag("a");
        let plan = subs.plan(&registry, t0);
        assert_eq!(plan.subscribe, vec![Interest::Flag("a".into())]);
        subs.done(&plan);
        watch.unwatch_flag("a");
        let plan = subs.plan(&registry, t0);
        assert!(plan.is_empty(), "lingers: {plan:?}");
        // Back within the linger: nothing to send, still live.
        watch.watch_flag("a");
        assert!(subs.plan(&registry, t0 + LINGER / 2).is_empty());
        watch.unwatch_flag("a");
        let _ = subs.plan(&registry, t0 + LINGER / 2);
        assert!(subs.plan(&registry, t0 + LINGER).is_empty());
        let plan = subs.plan(&registry, t0 + LINGER * 2);
        assert_eq!(plan.unsubscribe, vec![Interest::Flag("a".into())]);
        subs.done(&plan);
        assert!(subs.live.is_empty());
    }
}
