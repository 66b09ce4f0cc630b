//! The pub/sub listener of a single server or Sentinel's master: what
//! Redis supplies to the one listener lifecycle
//! ([`crate::contract::listen`]). One subscribed connection per process
//! and adapter, to exactly the channels its watchers want
//! ([`crate::contract::push`]): `{ns}:raised:{KEY}` for each watched stop
//! key and `{ns}:next:{KEY}:LINE` for each waiting line. Never a pattern.

use super::io::is_dropped;
use super::io::MIN_IO;
use super::keys::{key_of, line_channel};
use crate::contract::listen::{self, Heard, PushSource};
use crate::contract::push::{Interest, Registry};
use crate::error::{Error, Result};
use ::redis::{Client, Connection, Msg, RedisError, Value};
use std::sync::atomic::{AtomicU64, Ordering};
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
}

impl Channels {
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
    /// The connection, and the address it goes to.
    type Con = (Connection, String);
    const CHUNK: usize = SUBSCRIBE_CHUNK;

    fn connect(&self, deadline: Instant) -> Result<Self::Con> {
        let (con, addr) = self.at.connect(deadline).map_err(lost)?;
        // Writes are small (a batch of channel names): the I/O timeout.
        con.set_write_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(MIN_IO),
        ))
        .map_err(lost)?;
        Ok((con, addr))
    }

    fn channel_of(&self, interest: &Interest) -> String {
        channel_of(&self.namespace, interest)
    }

    /// One command; each channel is confirmed by its own reply (a
    /// subscribed channel is live once its reply is read).
    fn subscribe(
        &self,
        (con, _): &mut Self::Con,
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

    fn read(&self, (con, _): &mut Self::Con, until: Instant, heard: &mut Heard) -> Result<()> {
        aim(con, until)?;
        // Never run PubSub's Drop: it sends UNSUBSCRIBE and waits for the
        // answers. (A read that times out is not counted as a lost reply,
        // as `recv_response` would.)
        match std::mem::ManuallyDrop::new(con.as_pubsub()).get_message() {
            Ok(msg) => {
                let channel = msg.get_channel_name().to_owned();
                heard.push((channel, msg.get_payload_bytes().to_vec()));
                Ok(())
            }
            Err(e) if e.is_timeout() => Ok(()),
            Err(e) => Err(self.lost(e)),
        }
    }

    fn ping(&self, (con, _): &mut Self::Con, deadline: Instant, heard: &mut Heard) -> Result<()> {
        aim(con, deadline)?;
        con.send_packed_command(&::redis::cmd("PING").get_packed_command())
            .map_err(|e| self.lost(e))?;
        while heard_in(&con.recv_response().map_err(|e| self.lost(e))?, heard) {}
        Ok(())
    }

    fn moved(&self, (_, addr): &Self::Con, deadline: Instant) -> bool {
        self.at.moved(addr, deadline)
    }
}
