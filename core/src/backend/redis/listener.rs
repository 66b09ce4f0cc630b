//! The pub/sub listener of a single server or Sentinel's master: what
//! Redis supplies to the one listener lifecycle
//! ([`crate::contract::listen`]). One subscribed connection per process
//! and adapter, to exactly the channels its watchers want
//! ([`crate::contract::push`]): `{ns}:raised:{KEY}` for each watched stop
//! key and `{ns}:next:{KEY}:LINE` for each waiting line. Never a pattern.
//!
//! The socket read cannot be woken, so each connection also subscribes a
//! channel of its own, `{ns}:wake:{ID}` (an id no other listener has), and
//! keeps a second connection to the same server to ring it ([`Bell`]): a
//! watcher that adds an interest while the listener sits in a cold read
//! ([`listen::COLD_SLICE`]) sends one `PUBLISH` there, which ends that
//! read, and the listener subscribes the new channel at once. Only then: a
//! ring costs the server one message to one subscriber, at most one per
//! cold read, and nothing while interests keep coming (the listener is
//! hot). The ringing connection (`CLIENT LIST` name `mistri-bell`) is
//! checked with the listener's `PING` and opened again when it is gone; a
//! server that refuses the bell's channel (an ACL) leaves the listener
//! without one (the cold slice is the bound, as before).

use super::io::is_dropped;
use super::io::MIN_IO;
use super::keys::{key_of, line_channel};
use crate::contract::listen::{self, Heard, PushSource};
use crate::contract::push::{Interest, Registry};
use crate::error::{Error, Result};
use ::redis::{Client, Connection, Msg, RedisError, Value};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where a listener subscribes: the server of a `redis://` URL, the master
/// the sentinels name ([`Sentinel`](super::sentinel::Sentinel)).
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

/// Channels per `SUBSCRIBE` / `UNSUBSCRIBE` command.
pub(crate) const SUBSCRIBE_CHUNK: usize = 512;

/// The channel of `interest` in `namespace`.
pub(crate) fn channel_of(namespace: &str, interest: &Interest) -> String {
    match interest {
        Interest::Flag(key) => key_of(namespace, "raised", key),
        Interest::Line { key, line } => line_channel(namespace, key, line),
    }
}

/// A listener (see the module header).
pub(crate) struct Listener(listen::Listener<Channels>);

impl Listener {
    /// A listener for the channels of `namespace`, subscribing where `at`
    /// says; a connection it finds dropped counts in `dropped` (the
    /// Redis adapter's own counter).
    pub(crate) fn new(
        at: Arc<dyn ListenAt>,
        namespace: &str,
        timeout: Duration,
        dropped: Arc<AtomicU64>,
    ) -> Listener {
        let namespace = namespace.to_owned();
        let channels = Channels {
            at,
            namespace,
            dropped,
            timeout,
        };
        Listener(listen::Listener::new(channels, timeout))
    }

    /// Runs until nobody watches (the listener thread's body).
    pub(crate) fn run(&self, registry: &Registry) {
        self.0.run(registry);
    }
}

/// Redis's part of the lifecycle.
pub(crate) struct Channels {
    at: Arc<dyn ListenAt>,
    namespace: String,
    /// The adapter's count of connections found dropped. The listener is
    /// the first to see a server go away (its read fails at once), before
    /// it reconnects and rings every waiting line to try: counting it here
    /// empties the adapter's pool of the connections the old server
    /// closed, so those tries go out on new connections instead of
    /// failing on dead ones (issue 39, finding 16).
    dropped: Arc<AtomicU64>,
    /// The I/O timeout (reading a ring's reply).
    timeout: Duration,
}

/// One subscribed connection.
pub(crate) struct Con {
    con: Connection,
    /// Where it goes.
    addr: String,
    /// Its bell, when the second connection could be opened.
    bell: Option<Arc<Bell>>,
}

/// The most rings whose replies are not read yet; past it a ring is not
/// sent (the bell's connection is stuck: the slice is the floor again).
const MOST_UNREAD: u32 = 8;

/// A listener's own wake-up (module header): its channel, whether the
/// listener sits in a cold read, and the connection that rings it.
pub(crate) struct Bell {
    channel: String,
    /// `PUBLISH channel ""`, packed.
    ring: Vec<u8>,
    cold: AtomicBool,
    ringer: Mutex<Ringer>,
}

struct Ringer {
    /// `None` once a write or a reply failed.
    con: Option<Connection>,
    /// Rings sent whose replies the listener has not read.
    unread: u32,
}

impl Bell {
    /// On a watcher's thread: one `PUBLISH` if the listener sits in a cold
    /// read. Never blocks: a ring already under way, or a bell that is
    /// stuck, is left alone (the slice is the floor); the write is a few
    /// bytes into the socket's buffer, with the shortest timeout.
    fn ring(&self) {
        if !self.cold.swap(false, Ordering::SeqCst) {
            return;
        }
        let Some(mut ringer) = self.ringer.try_lock() else {
            return;
        };
        let ringer = &mut *ringer;
        if ringer.unread >= MOST_UNREAD {
            return;
        }
        if let Some(con) = &mut ringer.con {
            match con.send_packed_command(&self.ring) {
                Ok(()) => ringer.unread += 1,
                Err(_) => ringer.con = None,
            }
        }
    }

    /// On the listener's thread: reads the replies of the rings sent (each
    /// arrives with, or just after, its message).
    fn drain(&self, deadline: Instant) {
        drained(&mut self.ringer.lock(), deadline);
    }

    /// On the listener's thread, with its `PING`: checks the ringing
    /// connection, and opens another (`reopen`) when it is gone (a server
    /// that closes idle clients, a `CLIENT KILL`), so a dead one costs
    /// the cold slice at most until the next ping.
    fn keepalive(&self, deadline: Instant, reopen: impl FnOnce() -> Option<Connection>) {
        let mut ringer = self.ringer.lock();
        let alive = drained(&mut ringer, deadline)
            && ringer.con.as_mut().is_some_and(|con| {
                aim(con, deadline).is_ok()
                    && con
                        .send_packed_command(&::redis::cmd("PING").get_packed_command())
                        .is_ok()
                    && matches!(con.recv_response(), Ok(Value::SimpleString(_)))
            });
        if !alive {
            ringer.con = reopen();
        }
    }
}

/// Reads the replies of the rings sent; false (and the connection
/// dropped) when one cannot be read.
fn drained(ringer: &mut Ringer, deadline: Instant) -> bool {
    while ringer.unread > 0 {
        let read = match &mut ringer.con {
            Some(con) => aim(con, deadline).is_ok() && con.recv_response().is_ok(),
            None => false,
        };
        if !read {
            ringer.con = None;
            ringer.unread = 0;
            return false;
        }
        ringer.unread -= 1;
    }
    true
}

/// Tells bells apart: no two listeners of a process share one, nor two
/// processes (the pid), nor a process and the one that had its pid before
/// (the clock).
fn bell_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}.{}.{nanos:x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

impl Channels {
    /// `con`'s bell: subscribes its channel on `con` (confirmed), and opens
    /// the connection that rings it. `None` (no bell: the slice is the
    /// floor) when that second connection cannot be opened or the
    /// subscription is refused.
    fn bell(&self, con: &mut Connection, deadline: Instant) -> Result<Option<Arc<Bell>>> {
        let Some(ringer) = self.ringer(deadline) else {
            return Ok(None);
        };
        let channel = key_of(&self.namespace, "wake", &bell_id());
        aim(con, deadline)?;
        let packed = ::redis::cmd("SUBSCRIBE").arg(&channel).get_packed_command();
        con.send_packed_command(&packed).map_err(|e| self.lost(e))?;
        if let Value::ServerError(_) = con.recv_response().map_err(|e| self.lost(e))? {
            // Refused (an ACL that names the key channels only): no bell.
            return Ok(None);
        }
        Ok(Some(Arc::new(Bell {
            ring: ::redis::cmd("PUBLISH")
                .arg(&channel)
                .arg("")
                .get_packed_command(),
            channel,
            cold: AtomicBool::new(false),
            ringer: Mutex::new(Ringer {
                con: Some(ringer),
                unread: 0,
            }),
        })))
    }
}

impl Channels {
    /// A connection to ring a bell on, named `mistri-bell` (for `CLIENT
    /// LIST`), its writes given the shortest timeout.
    fn ringer(&self, deadline: Instant) -> Option<Connection> {
        let (mut ringer, _) = self.at.connect(deadline).ok()?;
        aim(&ringer, deadline).ok()?;
        // A name is for people: a server that refuses it still rings.
        let _ = ::redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg("mistri-bell")
            .query::<()>(&mut ringer);
        ringer.set_write_timeout(Some(MIN_IO)).ok()?;
        Some(ringer)
    }

    fn lost(&self, e: RedisError) -> Error {
        if is_dropped(&e) {
            self.dropped.fetch_add(1, Ordering::SeqCst);
        }
        lost(e)
    }
}

fn lost(e: RedisError) -> Error {
    Error::Connection(format!("the Redis listener's connection: {e}"))
}

/// Points the read timeout at `deadline`.
fn aim(con: &Connection, deadline: Instant) -> Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    con.set_read_timeout(Some(left.max(MIN_IO))).map_err(lost)
}

/// A message, into `heard`; false if `value` is none (a reply).
fn heard_in(value: &Value, heard: &mut Heard) -> bool {
    match Msg::from_value(value) {
        Some(msg) => {
            let channel = msg.get_channel_name().to_owned();
            heard.push((channel, msg.get_payload_bytes().to_vec()));
            true
        }
        None => false,
    }
}

impl PushSource for Channels {
    type Con = Con;
    const CHUNK: usize = SUBSCRIBE_CHUNK;

    fn connect(&self, deadline: Instant) -> Result<Self::Con> {
        let (mut con, addr) = self.at.connect(deadline).map_err(lost)?;
        // Writes are small (a batch of channel names): the I/O timeout.
        con.set_write_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(MIN_IO),
        ))
        .map_err(lost)?;
        let bell = self.bell(&mut con, deadline)?;
        Ok(Con { con, addr, bell })
    }

    fn bell(&self, con: &Con) -> Option<Arc<dyn Fn() + Send + Sync>> {
        let bell = con.bell.clone()?;
        Some(Arc::new(move || bell.ring()))
    }

    fn cold(&self, con: &Con, on: bool) -> bool {
        match &con.bell {
            Some(bell) => {
                bell.cold.store(on, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }

    fn channel_of(&self, interest: &Interest) -> String {
        channel_of(&self.namespace, interest)
    }

    /// One command; each channel is confirmed by its own reply (a
    /// subscribed channel is live once its reply is read).
    fn subscribe(
        &self,
        Con { con, .. }: &mut Con,
        names: &[String],
        on: bool,
        deadline: Instant,
        heard: &mut Heard,
    ) -> Result<()> {
        aim(con, deadline)?;
        let verb = if on { "SUBSCRIBE" } else { "UNSUBSCRIBE" };
        let packed = ::redis::cmd(verb).arg(names).get_packed_command();
        con.send_packed_command(&packed).map_err(|e| self.lost(e))?;
        let mut confirmed = 0;
        while confirmed < names.len() {
            let reply = con.recv_response().map_err(|e| self.lost(e))?;
            if let Value::ServerError(e) = reply {
                // Refused (an ACL without the channel, say): not live.
                return Err(Error::Connection(format!(
                    "the Redis listener's {verb} was refused: {e:?}"
                )));
            }
            if !heard_in(&reply, heard) {
                confirmed += 1;
            }
        }
        Ok(())
    }

    fn read(
        &self,
        Con { con, bell, .. }: &mut Con,
        until: Instant,
        heard: &mut Heard,
    ) -> Result<()> {
        aim(con, until)?;
        // Never run PubSub's Drop: it sends UNSUBSCRIBE and waits for the
        // answers. (A read that times out is not counted as a lost reply,
        // as `recv_response` would.)
        let read = match std::mem::ManuallyDrop::new(con.as_pubsub()).get_message() {
            Ok(msg) => {
                let channel = msg.get_channel_name().to_owned();
                // The bell only woke the read (its channel is no interest).
                if !matches!(bell, Some(b) if b.channel == channel) {
                    heard.push((channel, msg.get_payload_bytes().to_vec()));
                }
                Ok(())
            }
            Err(e) if e.is_timeout() => Ok(()),
            Err(e) => Err(self.lost(e)),
        };
        if let Some(bell) = bell {
            bell.drain(Instant::now() + self.timeout);
        }
        read
    }

    fn ping(
        &self,
        Con { con, bell, .. }: &mut Con,
        deadline: Instant,
        heard: &mut Heard,
    ) -> Result<()> {
        aim(con, deadline)?;
        con.send_packed_command(&::redis::cmd("PING").get_packed_command())
            .map_err(|e| self.lost(e))?;
        while heard_in(&con.recv_response().map_err(|e| self.lost(e))?, heard) {}
        if let Some(bell) = bell {
            bell.keepalive(deadline, || self.ringer(deadline));
        }
        Ok(())
    }

    fn moved(&self, Con { addr, .. }: &Con, deadline: Instant) -> bool {
        self.at.moved(addr, deadline)
    }
}
