//! Deadlines and errors, once for every Redis connection (a single
//! server, Sentinel's master, a Cluster node): how much of a deadline is
//! left, pointing a socket's timeouts at it, and what a redis-rs error
//! means for the caller ([`Error::Config`], [`Error::Connection`] or
//! [`Error::Backend`]).

use crate::error::{Error, Result};
use ::redis::{Connection, ErrorKind, RedisError, ServerErrorKind};
use std::time::{Duration, Instant};

/// The shortest socket timeout set (a zero timeout means "block forever"
/// to the OS, and redis-rs refuses it).
pub(crate) const MIN_IO: Duration = Duration::from_millis(1);

/// Who an error is about: `Redis at ADDR`, or `Redis Cluster node ADDR`.
#[derive(Clone, Copy)]
pub(crate) struct Peer<'a> {
    pub(crate) addr: &'a str,
    pub(crate) cluster: bool,
}

impl std::fmt::Display for Peer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cluster {
            true => write!(f, "Redis Cluster node {}", self.addr),
            false => write!(f, "Redis at {}", self.addr),
        }
    }
}

/// Time left until `deadline`, or the error that says there is none.
pub(crate) fn left(deadline: Instant, peer: Peer<'_>) -> Result<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| *d >= MIN_IO)
        .ok_or_else(|| {
            Error::Connection(format!("{peer} did not answer in time (deadline passed)"))
        })
}

/// Points both socket timeouts of `con` at `deadline`; returns the time left.
pub(crate) fn aim(con: &Connection, deadline: Instant, peer: Peer<'_>) -> Result<Duration> {
    let left = left(deadline, peer)?;
    con.set_read_timeout(Some(left))
        .and_then(|()| con.set_write_timeout(Some(left)))
        .map_err(|e| error(&e, peer))?;
    Ok(left)
}

/// A read interrupted by a signal (EINTR): redis-rs does not retry those
/// (its writes do, in `write_all`), and marks the reply to be skipped, so
/// the connection is dropped and only an idempotent command is sent again
/// ([`crate::runtime::eintr`]).
impl crate::runtime::eintr::Interrupted for RedisError {
    fn interrupted(&self) -> bool {
        self.kind() == ErrorKind::Io && self.to_string().contains("(os error 4)")
    }
}

/// Why one try on a pooled connection failed: before the command (no
/// connection, no time left; already the caller's error) or in its reply.
pub(crate) enum Failed {
    Setup(Error),
    Reply(RedisError),
}

impl crate::runtime::eintr::Interrupted for Failed {
    fn interrupted(&self) -> bool {
        matches!(self, Failed::Reply(e) if e.interrupted())
    }
}

/// What `e` from `peer` means.
pub(crate) fn error(e: &RedisError, peer: Peer<'_>) -> Error {
    if e.kind() == ErrorKind::AuthenticationFailed {
        return Error::Config(format!("{peer} refused the credentials: {e}"));
    }
    if e.to_string().contains("certificate") {
        return Error::Config(format!("TLS with {peer} failed: {e}"));
    }
    if e.is_connection_refusal() {
        return Error::Connection(format!("cannot reach {peer}: connection refused"));
    }
    if e.is_timeout() {
        return Error::Connection(format!("{peer} did not answer in time: {e}"));
    }
    if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
        return Error::Connection(format!("lost the connection to {peer}: {e}"));
    }
    let text = e.to_string();
    match e.kind() {
        ErrorKind::InvalidClientConfig => Error::Config(format!("Redis client setup failed: {e}")),
        ErrorKind::Server(ServerErrorKind::NoPerm) => {
            Error::Config(format!("{peer} refused permission: {e}"))
        }
        _ if text.contains("NOAUTH") || text.contains("WRONGPASS") => {
            Error::Config(format!("{peer} refused the credentials: {text}"))
        }
        _ => Error::Backend(format!("{peer} answered with an error: {text}")),
    }
}

/// Whether `e` says the connection itself is gone (closed or reset by the
/// server, a broken pipe; not a timeout, not a refused connect): the other
/// idle connections to that server were likely closed with it (a
/// restart), so the pool lets them go.
pub(crate) fn is_dropped(e: &RedisError) -> bool {
    e.is_connection_dropped() || (e.is_io_error() && !e.is_timeout() && !e.is_connection_refusal())
}
