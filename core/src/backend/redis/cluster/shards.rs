//! Push on a Redis Cluster ([`crate::contract::push`]) by sharded pub/sub: each
//! channel is subscribed with `SSUBSCRIBE` on the master that owns its
//! key's slot, and published there with `SPUBLISH` (the raise and release
//! scripts), so no message crosses the cluster bus and no other node sees
//! it.
//!
//! Threads:
//! - the **router** (`mistri-flags`, one per process and adapter) never
//!   reads a socket. It follows the registry's interests (with the
//!   [`LINGER`](crate::contract::push::LINGER) of [`Subscriptions`]), keeps its own
//!   slot map (`CLUSTER SLOTS`, loaded again when a node reports a lost
//!   channel), and tells each master's reader which interests are its own;
//! - one **reader** per master with interests (`mistri-shard`): one RESP3
//!   connection (sharded messages are RESP3 pushes) that subscribes what
//!   the router gave it, one `SSUBSCRIBE` per slot (the command accepts
//!   one slot's channels only), delivers messages, and pings after a second
//!   of silence.
//!
//! Slot moves and failovers: a node that loses a slot (a migration, or a
//! failover that made it a replica) drops that slot's shard channels and
//! tells its subscribers with `SUNSUBSCRIBE` pushes; a `SSUBSCRIBE` sent to
//! a node that does not own the slot is answered with `MOVED`; a node that
//! goes away fails its connection. In each case the interests are handed
//! back to the router as *lost* and are no longer confirmed
//! ([`Registry::unconfirm`]: the heads of their lines are rung, and try
//! again soon until they are confirmed again); the router reloads the map
//! at once (after a pause that grows while failures go on) and gives them
//! to their new owner, whose reader subscribes them and then has them
//! polled once ([`Registry::live`]): no gap.
//!
//! A dropped channel is noticed when its push arrives, not when its
//! reader next wakes: a reader blocks in a socket read for up to
//! [`COLD_SLICE`] and the client library reads past pushes that are not
//! messages, so every push of every reader's connection goes to the
//! router's wake-up channel ([`Bell`]), and the router acts on the
//! `SUNSUBSCRIBE`s the readers did not ask for. (When a reader noticed
//! them itself, a head was told nothing for up to half a second after a
//! `CLUSTER FAILOVER`: the release went to the new master, the line's
//! subscription was still counted on the old one, and the waits of the
//! line and of the lines behind it ran out.)
//!
//! Redis older than 7 has no sharded pub/sub: `SSUBSCRIBE` is an unknown
//! command there, the router stops trying for this adapter, and the tick
//! poll (and the waiting lines' timers) are the path; the raise and release
//! scripts publish by `pcall`, so they still work.
//!
//! Lock order: a reader's mailbox lock and the router's state lock are
//! leaves; neither is held while calling the registry or doing I/O.

use super::map::{slot_map_from, slot_of, SlotMap};
use crate::backend::redis::listener::channel_of;
use crate::backend::redis::url::UrlParts;
use crate::contract::listen::{
    deliver, Subscriptions, COLD_SLICE, HOT_FOR, HOT_SLICE, LISTENER_IDLE, PING_EVERY,
};
use crate::contract::push::{Interest, Registry};
use ::redis::{Client, Connection, ProtocolVersion, PushInfo, PushKind, Value};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the router and one master's reader share.
#[derive(Default)]
struct Mailbox {
    /// The interests this reader should have subscribed.
    want: HashSet<Interest>,
    /// `want` (or `forget`) changed since the reader looked.
    dirty: bool,
    /// Channels the node dropped, which the router took back: the reader
    /// forgets them without unsubscribing or unconfirming them (another
    /// node may have confirmed them by then).
    forget: Vec<String>,
    /// Channels this reader is unsubscribing, by the number of their
    /// `SUNSUBSCRIBE` answers still to come: those pushes are no drop.
    unsubscribing: HashMap<String, u32>,
    /// The router retired (or gave this node up): exit.
    stop: bool,
    /// Interests this node no longer serves (handed back to the router).
    lost: Vec<Interest>,
    /// The reader exited.
    gone: bool,
    /// The node has no sharded pub/sub (Redis < 7).
    unsupported: bool,
}

/// The router's wake-up: a ring (interests changed, a reader handed some
/// back or exited), and every push of the readers' connections (each is
/// given a sender), of which the router acts on `SUNSUBSCRIBE`s only.
struct Bell {
    tx: mpsc::Sender<PushInfo>,
}

/// The kind of a ring's push (the server never sends it).
const RING: &str = "mistri-ring";

impl Bell {
    fn ring(&self) {
        let _ = self.tx.send(PushInfo {
            kind: PushKind::Other(RING.to_owned()),
            data: Vec::new(),
        });
    }
}

/// Sleeps until rung, a channel's `SUNSUBSCRIBE` came (its name is added
/// to `unsubscribed`), or `slice` passed. Messages (their reader delivers
/// them), subscribe answers and a lost connection (its reader sees the
/// error) do not end the sleep.
fn sleep(rx: &mpsc::Receiver<PushInfo>, slice: Duration, unsubscribed: &mut Vec<String>) {
    let until = Instant::now().checked_add(slice);
    let mut woken = false;
    loop {
        let push = if woken {
            match rx.try_recv() {
                Ok(push) => push,
                Err(_) => return,
            }
        } else {
            let left = until.map_or(LISTENER_IDLE, |u| {
                u.saturating_duration_since(Instant::now())
            });
            match rx.recv_timeout(left) {
                Ok(push) => push,
                Err(mpsc::RecvTimeoutError::Timeout) if until.is_none() => continue,
                Err(_) => return,
            }
        };
        match push.kind {
            PushKind::SUnsubscribe => {
                if let Some(Value::BulkString(name)) = push.data.first() {
                    unsubscribed.push(String::from_utf8_lossy(name).into_owned());
                }
                woken = true;
            }
            PushKind::Other(kind) if kind == RING => woken = true,
            _ => {}
        }
    }
}

/// The cluster's listener (module header).
pub(crate) struct ShardListener {
    pub(crate) parts: UrlParts,
    pub(crate) known: Arc<Mutex<Vec<String>>>,
    pub(crate) namespace: String,
    pub(crate) timeout: Duration,
}

struct Node {
    mailbox: Arc<Mutex<Mailbox>>,
}

impl ShardListener {
    /// The router thread's body: runs until nobody watches.
    pub(crate) fn run(self, registry: &Arc<Registry>) {
        let (tx, rx) = mpsc::channel::<PushInfo>();
        let bell = Arc::new(Bell { tx });
        let wake_bell = bell.clone();
        registry.set_wake(Some(Arc::new(move || wake_bell.ring())));
        let this = Arc::new(self);
        let mut subs = Subscriptions::default();
        let mut map: Option<SlotMap> = None;
        let mut nodes: HashMap<String, Node> = HashMap::new();
        // Interests that have no node yet (no map, or their node failed).
        let mut homeless: HashSet<Interest> = registry.wanted().into_iter().collect();
        subs.live.extend(homeless.iter().cloned());
        let mut checked = Instant::now();
        let mut hot_until = checked + HOT_FOR;
        const FIRST_BACKOFF: Duration = Duration::from_millis(50);
        let mut backoff = FIRST_BACKOFF;
        let mut failed_at: Option<Instant> = None;
        let mut unsupported = false;
        // `SUNSUBSCRIBE`s heard while sleeping.
        let mut unsubscribed: Vec<String> = Vec::new();
        loop {
            let now = Instant::now();
            let plan = subs.plan(registry, now);
            if !plan.is_empty() {
                hot_until = now + HOT_FOR;
            }
            subs.done(&plan);
            for interest in &plan.unsubscribe {
                homeless.remove(interest);
                for node in nodes.values() {
                    let mut mb = node.mailbox.lock();
                    if mb.want.remove(interest) {
                        mb.dirty = true;
                    }
                }
            }
            homeless.extend(plan.subscribe);
            // Dropped by their node (a slot moved away): no longer heard.
            let mut failed = take_dropped(
                &this.namespace,
                &nodes,
                &mut unsubscribed,
                registry,
                &mut homeless,
            );
            // Handed back by readers: their node no longer serves them.
            nodes.retain(|_, node| {
                let mut guard = node.mailbox.lock();
                let mb = &mut *guard;
                unsupported |= mb.unsupported;
                for interest in mb.lost.drain(..) {
                    mb.want.remove(&interest);
                    failed = true;
                    homeless.insert(interest);
                }
                if mb.gone {
                    homeless.extend(mb.want.drain());
                    failed = true;
                    return false;
                }
                true
            });
            if failed {
                // A node failed or moved slots: reload the map, at once
                // the first time, then after a pause that grows while
                // failures go on (a node being restarted must not make
                // this loop spin).
                map = None;
                if failed_at.is_some() {
                    sleep(&rx, backoff, &mut unsubscribed);
                    backoff = (backoff * 2).min(LISTENER_IDLE);
                }
                failed_at = Some(Instant::now());
            } else if failed_at.is_some_and(|t| t.elapsed() > 5 * LISTENER_IDLE) {
                backoff = FIRST_BACKOFF;
                failed_at = None;
            }
            // Still wanted? (An interest dropped while homeless is gone.)
            homeless.retain(|i| subs.live.contains(i));
            if !homeless.is_empty() && !unsupported {
                if map.is_none() {
                    map = this.load_map();
                }
                match &map {
                    Some(m) => {
                        for interest in homeless.drain() {
                            let slot = slot_of(&channel_of(&this.namespace, &interest));
                            let Some(addr) = m.node_of(slot) else {
                                continue;
                            };
                            let node = nodes.entry(addr.to_owned()).or_insert_with(|| {
                                this.clone()
                                    .start_reader(addr, registry.clone(), bell.clone())
                            });
                            let mut mb = node.mailbox.lock();
                            mb.want.insert(interest);
                            mb.dirty = true;
                        }
                    }
                    None => {
                        // No node answered: try again after a pause.
                        sleep(&rx, backoff, &mut unsubscribed);
                        backoff = (backoff * 2).min(LISTENER_IDLE);
                        continue;
                    }
                }
            }
            if checked.elapsed() >= LISTENER_IDLE {
                checked = Instant::now();
                if registry.retire_if_unwatched() {
                    for node in nodes.values() {
                        node.mailbox.lock().stop = true;
                    }
                    return;
                }
                registry.idle();
            }
            sleep(&rx, subs.slice(now, hot_until), &mut unsubscribed);
        }
    }

    /// The slot map, from the first known master or seed that answers.
    fn load_map(&self) -> Option<SlotMap> {
        let mut candidates = self.known.lock().clone();
        for seed in &self.parts.hosts {
            if !candidates.contains(seed) {
                candidates.push(seed.clone());
            }
        }
        for addr in candidates {
            let Ok(mut con) = self.connect(&addr, false) else {
                continue;
            };
            let reply = ::redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query::<Value>(&mut con);
            if let Ok(map) = reply
                .map_err(|_| ())
                .and_then(|r| slot_map_from(r, &addr).map_err(|_| ()))
            {
                return Some(map);
            }
        }
        None
    }

    /// A connection to `addr` (RESP3 when `push`), timeouts set.
    fn connect(&self, addr: &str, push: bool) -> ::redis::RedisResult<Connection> {
        let url = self
            .parts
            .node_url(addr, None, self.parts.userinfo.as_deref());
        let client = Client::open(url)?;
        let client = if push {
            let info = client.get_connection_info().clone();
            let settings = info
                .redis_settings()
                .clone()
                .set_protocol(ProtocolVersion::RESP3);
            Client::open(info.set_redis_settings(settings))?
        } else {
            client
        };
        let con = client.get_connection_with_timeout(self.timeout)?;
        con.set_read_timeout(Some(self.timeout))?;
        con.set_write_timeout(Some(self.timeout))?;
        Ok(con)
    }

    fn start_reader(self: Arc<Self>, addr: &str, registry: Arc<Registry>, bell: Arc<Bell>) -> Node {
        let mailbox = Arc::new(Mutex::new(Mailbox::default()));
        let mine = mailbox.clone();
        let addr = addr.to_owned();
        let started = crate::contract::listen::spawn("mistri-shard", move || {
            let mut channels = HashMap::new();
            let end = self.read(&addr, &mine, &registry, &bell, &mut channels);
            // This node's subscriptions are gone with its reader (not
            // those the router took back already).
            for name in mine.lock().forget.drain(..) {
                channels.remove(&name);
            }
            let gone: Vec<Interest> = channels.into_values().collect();
            registry.unconfirm(&gone);
            let mut mb = mine.lock();
            if end == Ended::Unsupported {
                mb.unsupported = true;
            }
            mb.gone = true;
            drop(mb);
            bell.ring();
        });
        if !started {
            mailbox.lock().gone = true;
        }
        Node { mailbox }
    }

    /// One master's reader: one connection, until it fails or is stopped.
    fn read(
        &self,
        addr: &str,
        mailbox: &Mutex<Mailbox>,
        registry: &Registry,
        bell: &Bell,
        channels: &mut HashMap<String, Interest>,
    ) -> Ended {
        let Ok(mut con) = self.connect(addr, true) else {
            return Ended::Failed;
        };
        con.set_push_sender(bell.tx.clone());
        let mut checked = Instant::now();
        let mut hot_until = checked + HOT_FOR;
        loop {
            let (add, remove) = {
                let mut mb = mailbox.lock();
                if mb.stop {
                    return Ended::Stopped;
                }
                if mb.dirty {
                    mb.dirty = false;
                    for name in std::mem::take(&mut mb.forget) {
                        channels.remove(&name);
                    }
                    let live: HashSet<&Interest> = channels.values().collect();
                    let add: Vec<Interest> = mb
                        .want
                        .iter()
                        .filter(|i| !live.contains(i))
                        .cloned()
                        .collect();
                    let remove: Vec<String> = channels
                        .iter()
                        .filter(|(_, i)| !mb.want.contains(i))
                        .map(|(c, _)| c.clone())
                        .collect();
                    for name in &remove {
                        *mb.unsubscribing.entry(name.clone()).or_default() += 1;
                    }
                    (add, remove)
                } else {
                    (Vec::new(), Vec::new())
                }
            };
            if !add.is_empty() || !remove.is_empty() {
                hot_until = Instant::now() + HOT_FOR;
                if con.set_read_timeout(Some(self.timeout)).is_err() {
                    return Ended::Failed;
                }
                let unwanted: Vec<Interest> =
                    remove.iter().filter_map(|n| channels.remove(n)).collect();
                registry.unconfirm(&unwanted);
                for group in by_slot(remove.iter().map(String::as_str)) {
                    let mut cmd = ::redis::cmd("SUNSUBSCRIBE");
                    cmd.arg(&group);
                    if con.send_packed_command(&cmd.get_packed_command()).is_err() {
                        return Ended::Failed;
                    }
                }
                let named: Vec<(String, Interest)> = add
                    .into_iter()
                    .map(|i| (channel_of(&self.namespace, &i), i))
                    .collect();
                let mut live = Vec::new();
                for group in by_slot(named.iter().map(|(c, _)| c.as_str())) {
                    match self.subscribe(&mut con, &group, channels, registry) {
                        Ok(()) => {
                            for name in group {
                                if let Some((c, i)) = named.iter().find(|(c, _)| c == name) {
                                    channels.insert(c.clone(), i.clone());
                                    live.push(i.clone());
                                }
                            }
                        }
                        Err(Refused::Moved) => {
                            // Not this node's slot (any more): back to the
                            // router, which reloads the map.
                            let mut mb = mailbox.lock();
                            for name in group {
                                if let Some((_, i)) = named.iter().find(|(c, _)| c == name) {
                                    mb.want.remove(i);
                                    mb.lost.push(i.clone());
                                }
                            }
                            drop(mb);
                            bell.ring();
                        }
                        Err(Refused::Unsupported) => return Ended::Unsupported,
                        Err(Refused::Io) => return Ended::Failed,
                    }
                }
                registry.live(&live);
            }
            let slice = if Instant::now() < hot_until {
                HOT_SLICE
            } else {
                COLD_SLICE
            };
            if con.set_read_timeout(Some(slice)).is_err() {
                return Ended::Failed;
            }
            // (PubSub's Drop would unsubscribe: never run it.)
            let got = std::mem::ManuallyDrop::new(con.as_pubsub()).get_message();
            match got {
                Ok(msg) => deliver(
                    channels,
                    registry,
                    msg.get_channel_name(),
                    msg.get_payload_bytes(),
                ),
                Err(e) if e.is_timeout() => {}
                Err(_) => return Ended::Failed,
            }
            // (Channels the server dropped: the router hears of them.)
            if checked.elapsed() >= PING_EVERY {
                // Silence: is the node still there?
                if con.set_read_timeout(Some(self.timeout)).is_err()
                    || self.ping(&mut con, channels, registry).is_err()
                {
                    return Ended::Failed;
                }
                checked = Instant::now();
            }
        }
    }

    /// Sends `SSUBSCRIBE` of one slot's channels and waits until the
    /// server confirmed every one (messages read meanwhile are delivered).
    fn subscribe(
        &self,
        con: &mut Connection,
        group: &[&str],
        channels: &HashMap<String, Interest>,
        registry: &Registry,
    ) -> Result<(), Refused> {
        let mut cmd = ::redis::cmd("SSUBSCRIBE");
        cmd.arg(group);
        con.send_packed_command(&cmd.get_packed_command())
            .map_err(|_| Refused::Io)?;
        let mut expect: HashSet<&str> = group.iter().copied().collect();
        while !expect.is_empty() {
            match con.recv_response() {
                Ok(Value::Push { kind, data }) => match kind {
                    PushKind::SSubscribe => {
                        if let Some(Value::BulkString(name)) = data.first() {
                            expect.remove(String::from_utf8_lossy(name).as_ref());
                        }
                    }
                    PushKind::SMessage => deliver_push(channels, registry, &data),
                    _ => {}
                },
                Ok(Value::ServerError(e)) => return Err(refusal(e.code(), &e.to_string())),
                Ok(_) => {}
                Err(e) => {
                    if e.kind() == ::redis::ErrorKind::Io || e.is_timeout() {
                        return Err(Refused::Io);
                    }
                    let text = e.to_string();
                    return Err(refusal(e.code().unwrap_or(""), &text));
                }
            }
        }
        Ok(())
    }

    /// `PING`, answered within the read timeout (messages read meanwhile
    /// are delivered).
    fn ping(
        &self,
        con: &mut Connection,
        channels: &HashMap<String, Interest>,
        registry: &Registry,
    ) -> ::redis::RedisResult<()> {
        con.send_packed_command(&::redis::cmd("PING").get_packed_command())?;
        loop {
            match con.recv_response()? {
                Value::Push { kind, data } => {
                    if kind == PushKind::SMessage {
                        deliver_push(channels, registry, &data);
                    }
                }
                _ => return Ok(()),
            }
        }
    }
}

/// Takes back from their nodes the interests whose channels a node
/// dropped (`unsubscribed`, less the answers to a reader's own
/// `SUNSUBSCRIBE`s): they are no longer confirmed, and go to `homeless`.
/// Whether any did.
fn take_dropped(
    namespace: &str,
    nodes: &HashMap<String, Node>,
    unsubscribed: &mut Vec<String>,
    registry: &Registry,
    homeless: &mut HashSet<Interest>,
) -> bool {
    if unsubscribed.is_empty() {
        return false;
    }
    let mut names: HashSet<String> = HashSet::new();
    'names: for name in unsubscribed.drain(..) {
        for node in nodes.values() {
            let mut mb = node.mailbox.lock();
            if let Some(left) = mb.unsubscribing.get_mut(&name) {
                *left -= 1;
                if *left == 0 {
                    mb.unsubscribing.remove(&name);
                }
                continue 'names;
            }
        }
        names.insert(name);
    }
    let mut lost = Vec::new();
    for node in nodes.values() {
        let mut mb = node.mailbox.lock();
        let gone: Vec<(String, Interest)> = mb
            .want
            .iter()
            .map(|i| (channel_of(namespace, i), i))
            .filter(|(c, _)| names.contains(c))
            .map(|(c, i)| (c, i.clone()))
            .collect();
        for (channel, interest) in gone {
            mb.want.remove(&interest);
            mb.forget.push(channel);
            mb.dirty = true;
            lost.push(interest);
        }
    }
    registry.unconfirm(&lost);
    let any = !lost.is_empty();
    homeless.extend(lost);
    any
}

#[derive(PartialEq, Eq)]
enum Ended {
    Stopped,
    Failed,
    Unsupported,
}

enum Refused {
    Moved,
    Unsupported,
    Io,
}

fn refusal(code: &str, text: &str) -> Refused {
    if code == "MOVED" || code == "ASK" || code == "CLUSTERDOWN" || code == "TRYAGAIN" {
        Refused::Moved
    } else if text.contains("unknown command") {
        Refused::Unsupported
    } else {
        // Anything else (ACL, CROSSSLOT): let the router try again later.
        Refused::Moved
    }
}

fn deliver_push(channels: &HashMap<String, Interest>, registry: &Registry, data: &[Value]) {
    if let (Some(Value::BulkString(channel)), Some(Value::BulkString(payload))) =
        (data.first(), data.get(1))
    {
        deliver(
            channels,
            registry,
            &String::from_utf8_lossy(channel),
            payload,
        );
    }
}

/// `names` grouped by cluster slot (one `SSUBSCRIBE` each).
fn by_slot<'a>(names: impl Iterator<Item = &'a str>) -> Vec<Vec<&'a str>> {
    let mut groups: HashMap<u16, Vec<&'a str>> = HashMap::new();
    for name in names {
        groups.entry(slot_of(name)).or_default().push(name);
    }
    let mut out: Vec<(u16, Vec<&'a str>)> = groups.into_iter().collect();
    out.sort_by_key(|(slot, _)| *slot);
    out.into_iter().map(|(_, g)| g).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(kind: PushKind, name: &str) -> PushInfo {
        PushInfo {
            kind,
            data: vec![Value::BulkString(name.as_bytes().to_vec())],
        }
    }

    fn line(key: &str, id: &str) -> Interest {
        Interest::Line {
            key: key.into(),
            line: id.into(),
        }
    }

    /// A `SUNSUBSCRIBE` push ends the router's sleep when it arrives (a
    /// reader blocked in a read would see it only when the read ends);
    /// messages and answers to a subscribe do not count as drops.
    #[test]
    fn the_router_wakes_for_a_dropped_channel() {
        let (tx, rx) = mpsc::channel();
        tx.send(push(PushKind::SMessage, "ns:next:{k}:a")).unwrap();
        tx.send(push(PushKind::SSubscribe, "ns:next:{k}:b"))
            .unwrap();
        let sender = tx.clone();
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut names = Vec::new();
            // Far longer than the test waits below: only the push ends it.
            sleep(&rx, Duration::from_secs(3600), &mut names);
            let _ = done_tx.send(names);
        });
        sender
            .send(push(PushKind::SUnsubscribe, "ns:next:{k}:c"))
            .unwrap();
        let names = done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the sleep ended at the push");
        assert_eq!(names, vec!["ns:next:{k}:c".to_owned()]);
    }

    /// A ring ends the sleep too, and reports no drop.
    #[test]
    fn a_ring_wakes_the_router() {
        let (tx, rx) = mpsc::channel();
        let bell = Bell { tx };
        bell.ring();
        let mut names = Vec::new();
        sleep(&rx, Duration::from_secs(3600), &mut names);
        assert!(names.is_empty());
    }

    /// A dropped channel's interest is taken from its node (the reader
    /// forgets it without unsubscribing), is no longer confirmed, and is
    /// homeless; the answer to a reader's own `SUNSUBSCRIBE` is no drop.
    #[test]
    fn a_dropped_channel_is_taken_back_and_unconfirmed() {
        let registry = Registry::default();
        let (x, y) = (line("k", "x"), line("k", "y"));
        registry.confirm(&[x.clone(), y.clone()]);
        let node = Node {
            mailbox: Arc::new(Mutex::new(Mailbox::default())),
        };
        {
            let mut mb = node.mailbox.lock();
            mb.want.insert(x.clone());
            mb.want.insert(y.clone());
            mb.unsubscribing.insert(channel_of("ns", &y), 1);
        }
        let nodes = HashMap::from([("127.0.0.1:1".to_owned(), node)]);
        let mut homeless = HashSet::new();
        // Its own unsubscribe's answer: nothing taken.
        let mut heard = vec![channel_of("ns", &y)];
        assert!(!take_dropped(
            "ns",
            &nodes,
            &mut heard,
            &registry,
            &mut homeless
        ));
        assert!(registry.is_confirmed(&y));
        // Dropped by the node, and a name nobody wants.
        let mut heard = vec![channel_of("ns", &x), "ns:next:{other}:z".to_owned()];
        assert!(take_dropped(
            "ns",
            &nodes,
            &mut heard,
            &registry,
            &mut homeless
        ));
        assert!(heard.is_empty());
        assert_eq!(homeless, HashSet::from([x.clone()]));
        assert!(!registry.is_confirmed(&x), "no longer heard");
        assert!(registry.is_confirmed(&y), "still heard");
        let mb = nodes["127.0.0.1:1"].mailbox.lock();
        assert!(!mb.want.contains(&x) && mb.want.contains(&y));
        assert_eq!(mb.forget, vec![channel_of("ns", &x)]);
        assert!(mb.dirty && mb.unsubscribing.is_empty());
    }
}
