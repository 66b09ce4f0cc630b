//! The pub/sub listener of a single server or Sentinel's master (see
//! [`super`]).

use super::io::MIN_IO;
use super::keys::{key_of, line_channel};
use crate::contract::push::{Interest, Plan, Registry, Subscriptions, HOT_FOR, LISTENER_IDLE};
use ::redis::{Client, Connection, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// ([`Sentinel`]), or a node of a cluster.
pub(crate) trait ListenAt: Send + Sync + 'static {
    /// A connection to subscribe on, opened by `deadline`, and the address
    /// it goes to.
    fn connect(&self, deadline: Instant) -> ::redis::RedisResult<(Connection, String)>;

    /// Asked while the listener is silent (about once a second): true when
    /// `addr` is no longer where messages are published (a failover), so
    /// the listener subscribes again wherever [`ListenAt::connect`] says.
    fn moved(&self, addr: &str, deadline: Instant) -> bool {
        let _ = (addr, deadline);
        false
    }
}

impl ListenAt for Client {
    fn connect(&self, deadline: Instant) -> ::redis::RedisResult<(Connection, String)> {
        let left = deadline.saturating_duration_since(Instant::now());
        let con = self.get_connection_with_timeout(left.max(MIN_IO))?;
        Ok((con, self.get_connection_info().addr().to_string()))
    }
}

/// A listener (see the module header): one subscribed connection per
/// process and adapter, to exactly the channels its watchers want
/// ([`crate::contract::push`]): `{ns}:raised:{KEY}` for each watched stop key and
/// `{ns}:next:{KEY}:LINE` for each waiting line. Never a pattern.
pub(crate) struct Listener {
    at: Arc<dyn ListenAt>,
    namespace: String,
    timeout: Duration,
}

/// How often a silent listener checks its connection with a `PING` (a
/// per-process cost while idle, so not every second: a broken connection
/// fails a read at once; this is for one that went silent, and until it is
/// found the tick poll is the floor).
pub(crate) const PING_EVERY: Duration = Duration::from_secs(5);

/// Channels per `SUBSCRIBE` / `UNSUBSCRIBE` command.
pub(crate) const SUBSCRIBE_CHUNK: usize = 512;

/// The channel of `interest` in `namespace`.
pub(crate) fn channel_of(namespace: &str, interest: &Interest) -> String {
    match interest {
        Interest::Flag(key) => key_of(namespace, "raised", key),
        Interest::Line { key, line } => line_channel(namespace, key, line),
    }
}

/// What a message on `channel` tells `registry`, given the channels this
/// listener subscribed.
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

impl Listener {
    /// A listener for the channels of `namespace`, subscribing where `at`
    /// says.
    pub(crate) fn new(at: Arc<dyn ListenAt>, namespace: &str, timeout: Duration) -> Listener {
        Listener {
            at,
            namespace: namespace.to_owned(),
            timeout,
        }
    }

    /// Runs until nobody watches (the listener thread's body).
    pub(crate) fn run(&self, registry: &Registry) {
        const FIRST_BACKOFF: Duration = Duration::from_millis(50);
        let mut backoff = FIRST_BACKOFF;
        while !registry.retire_if_unwatched() {
            let subscribed = match self.listen(registry) {
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

    /// Sends `plan` (subscribes, then unsubscribes, in chunks); each
    /// `SUBSCRIBE` returns once the server confirmed it (then every channel
    /// of that command is live).
    fn apply(
        &self,
        sub: &mut ::redis::PubSub<'_>,
        plan: &Plan,
        channels: &mut HashMap<String, Interest>,
    ) -> ::redis::RedisResult<()> {
        for chunk in plan.subscribe.chunks(SUBSCRIBE_CHUNK) {
            let names: Vec<String> = chunk
                .iter()
                .map(|i| {
                    let name = channel_of(&self.namespace, i);
                    channels.insert(name.clone(), i.clone());
                    name
                })
                .collect();
            sub.subscribe(&names)?;
        }
        for chunk in plan.unsubscribe.chunks(SUBSCRIBE_CHUNK) {
            let names: Vec<String> = chunk
                .iter()
                .map(|i| {
                    let name = channel_of(&self.namespace, i);
                    channels.remove(&name);
                    name
                })
                .collect();
            sub.unsubscribe(&names)?;
        }
        Ok(())
    }

    /// One subscribed connection, until it fails or nobody watches.
    fn listen(&self, registry: &Registry) -> ::redis::RedisResult<Listened> {
        let (mut con, addr) = self.at.connect(Instant::now() + self.timeout)?;
        con.set_write_timeout(Some(self.timeout))?;
        con.set_read_timeout(Some(self.timeout))?;
        // Never run PubSub's Drop: it sends UNSUBSCRIBE and waits for the
        // answers. Dropping `con` just closes the socket.
        let mut sub = std::mem::ManuallyDrop::new(con.as_pubsub());
        let mut channels: HashMap<String, Interest> = HashMap::new();
        let mut subs = Subscriptions::default();
        let all = Plan {
            subscribe: registry.wanted(),
            unsubscribe: Vec::new(),
        };
        self.apply(&mut sub, &all, &mut channels)?;
        subs.done(&all);
        // Live from here: what was raised before is found by reading, and
        // every waiter tries once (a release may have gone unheard).
        registry.poll_now();
        registry.released_any();
        let mut checked = Instant::now();
        let mut pinged = checked;
        let mut hot_until = checked + HOT_FOR;
        loop {
            let now = Instant::now();
            let plan = subs.plan(registry, now);
            if !plan.is_empty() {
                sub.set_read_timeout(Some(self.timeout))?;
                self.apply(&mut sub, &plan, &mut channels)?;
                subs.done(&plan);
                registry.live(&plan.subscribe);
                hot_until = Instant::now() + HOT_FOR;
            }
            sub.set_read_timeout(Some(subs.slice(now, hot_until)))?;
            match sub.get_message() {
                Ok(msg) => {
                    deliver(
                        &channels,
                        registry,
                        msg.get_channel_name(),
                        msg.get_payload_bytes(),
                    );
                    continue;
                }
                Err(e) if e.is_timeout() => {}
                Err(_) => return Ok(Listened::Lost),
            }
            if checked.elapsed() < LISTENER_IDLE {
                continue;
            }
            if registry.retire_if_unwatched() {
                return Ok(Listened::Retired);
            }
            registry.idle();
            // Silence: every PING_EVERY make sure the server is still there
            // (a connection that breaks says so at once; this finds a
            // silent one), and every second that it is still where
            // messages are published (a failover).
            if pinged.elapsed() >= PING_EVERY {
                sub.set_read_timeout(Some(self.timeout))?;
                if sub.ping::<Value>().is_err() {
                    return Ok(Listened::Lost);
                }
                pinged = Instant::now();
            }
            checked = Instant::now();
            if self
                .at
                .moved(&addr, checked + LISTENER_IDLE.min(self.timeout))
            {
                return Ok(Listened::Lost);
            }
        }
    }
}

pub(crate) enum Listened {
    /// Nobody watches any more.
    Retired,
    /// The connection failed after it was subscribed.
    Lost,
}
