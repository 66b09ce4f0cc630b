//! [`Redis`]: leases and flags on a Redis server, shared by every process
//! (Rust, C, Python, Ruby) that speaks the protocol in `docs/PROTOCOL.md`.
//!
//! - Keys: `{ns}:lease:{KEY}`, `{ns}:fence:{KEY}`, `{ns}:flag:{KEY}` where the
//!   braces around KEY are literal: a Redis Cluster hash tag, so the lease
//!   and its fence counter always share a slot.
//! - Acquire: one Lua script doing `SET lease token NX PX ttl` and, on
//!   success, `INCR fence` floored by the server's clock (atomic: no other
//!   client sees one without the other; see [`ACQUIRE_LUA`]).
//! - Renew / release: Lua compare-and-`PEXPIRE` / compare-and-`DEL` on the
//!   token. Keys only ever travel as `KEYS`, values as `ARGV`.
//! - A heartbeat tick is one pipeline: every renewal and flag read of the
//!   tick in one round trip.
//!
//! Connections: a small pool (a mutex around a stack of idle connections,
//! held only to push or pop), so concurrent callers each use their own
//! connection. The pool remembers the process id: a forked child drops the
//! inherited connections (closing only its copies of the sockets) and opens
//! its own. A connection that saw an error is discarded, not reused.

use crate::adapter::{Adapter, Beat, Lease};
use crate::args::{fork_generation, millis_ceil, mint_token};
use crate::error::{Error, Result};
use ::redis::{Client, Connection, ConnectionLike, ErrorKind, RedisError, Script, ServerErrorKind};
use parking_lot::Mutex;
use std::time::Duration;

/// The default key namespace.
pub const DEFAULT_NAMESPACE: &str = "mistri:locks";
/// The default URL.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379/0";
/// Connect, read and write timeout of every connection.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_IDLE: usize = 16;

/// `KEYS[1]` lease, `KEYS[2]` fence counter; `ARGV[1]` token, `ARGV[2]` ttl
/// in ms. Returns the new fencing number, or 0 when the lease is taken.
///
/// The fence is `max(INCR counter, server TIME in µs)`, and the counter is
/// raised to the clock when the clock wins ([`crate::fence`]): a counter lost
/// with the data (restart without persistence, `FLUSHALL`, failover,
/// eviction) restarts above every fence issued before. `TIME` before a write
/// needs effects replication, the only mode since Redis 7 (default since 5).
/// `%.0f` writes the whole number exactly (below 2^53, a Lua double is).
pub const ACQUIRE_LUA: &str = "\
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
local fence = redis.call('INCR', KEYS[2])
local now = redis.call('TIME')
local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
if floor > fence then
  fence = floor
  redis.call('SET', KEYS[2], string.format('%.0f', floor))
end
return fence";

/// `KEYS[1]` lease; `ARGV[1]` token, `ARGV[2]` ttl in ms. 1 if renewed.
pub const RENEW_LUA: &str = "\
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0";

/// `KEYS[1]` lease; `ARGV[1]` token. 1 if deleted.
pub const RELEASE_LUA: &str = "\
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

struct Pool {
    generation: u64,
    idle: Vec<Connection>,
}

/// A Redis backend. Cheap to share: wrap it in [`crate::Locks`] once and
/// clone that.
///
/// # Examples
/// ```no_run
/// use mistri_locks::Locks;
/// let locks = Locks::redis("redis://127.0.0.1:6379/0", "mistri:locks")?;
/// # Ok::<(), mistri_locks::Error>(())
/// ```
pub struct Redis {
    client: Client,
    /// `host:port` (or socket path) for messages; never the password.
    addr: String,
    namespace: String,
    timeout: Duration,
    pool: Mutex<Pool>,
    acquire: Script,
    renew: Script,
    release: Script,
}

impl Redis {
    /// An adapter for `url` (`redis://[user:pass@]host[:port][/db]`, or
    /// `rediss://` for TLS) with keys under `namespace`.
    ///
    /// Connects lazily: an unreachable server is reported by the first
    /// operation, as [`Error::Connection`].
    ///
    /// # Errors
    /// [`Error::Config`] for an unparsable URL; [`Error::InvalidArgument`]
    /// for an empty namespace or one containing `{` or `}` (they would break
    /// the hash tags).
    pub fn open(url: &str, namespace: &str) -> Result<Self> {
        Self::with_timeout(url, namespace, DEFAULT_TIMEOUT)
    }

    /// [`Redis::open`] with a connect/read/write timeout other than
    /// [`DEFAULT_TIMEOUT`].
    pub fn with_timeout(url: &str, namespace: &str, timeout: Duration) -> Result<Self> {
        if namespace.is_empty() {
            return Err(Error::InvalidArgument("namespace must not be empty".into()));
        }
        if namespace.contains(['{', '}']) {
            return Err(Error::InvalidArgument(format!(
                "namespace must not contain '{{' or '}}' (they are reserved for hash tags): {namespace:?}"
            )));
        }
        crate::args::check_duration("timeout", timeout)?;
        if url.starts_with("rediss://") {
            // rustls needs a process-wide crypto provider; another library
            // may have installed one already, which is just as good.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = Client::open(url).map_err(|e| {
            Error::Config(format!(
                "cannot use Redis URL: {}",
                redact(&e.to_string(), url)
            ))
        })?;
        let addr = client.get_connection_info().addr().to_string();
        Ok(Redis {
            client,
            addr,
            namespace: namespace.to_owned(),
            timeout,
            pool: Mutex::new(Pool {
                generation: fork_generation(),
                idle: Vec::new(),
            }),
            acquire: Script::new(ACQUIRE_LUA),
            renew: Script::new(RENEW_LUA),
            release: Script::new(RELEASE_LUA),
        })
    }

    /// The key namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The Redis key of the lease on `key`.
    pub fn lease_key(&self, key: &str) -> String {
        format!("{}:lease:{{{key}}}", self.namespace)
    }

    /// The Redis key of the fencing counter of `key`.
    pub fn fence_key(&self, key: &str) -> String {
        format!("{}:fence:{{{key}}}", self.namespace)
    }

    /// The Redis key of the flag `key`.
    pub fn flag_key(&self, key: &str) -> String {
        format!("{}:flag:{{{key}}}", self.namespace)
    }

    fn checkout(&self) -> Result<Connection> {
        {
            let mut pool = self.pool.lock();
            let generation = fork_generation();
            if pool.generation != generation {
                // Forked: these sockets are shared with the parent. Dropping
                // closes only our copies; we never write to them.
                pool.idle.clear();
                pool.generation = generation;
            }
            if let Some(con) = pool.idle.pop() {
                return Ok(con);
            }
        }
        let con = self
            .client
            .get_connection_with_timeout(self.timeout)
            .map_err(|e| self.map_err(e))?;
        con.set_read_timeout(Some(self.timeout))
            .map_err(|e| self.map_err(e))?;
        con.set_write_timeout(Some(self.timeout))
            .map_err(|e| self.map_err(e))?;
        Ok(con)
    }

    fn checkin(&self, con: Connection) {
        let mut pool = self.pool.lock();
        if pool.generation == fork_generation() && pool.idle.len() < MAX_IDLE && con.is_open() {
            pool.idle.push(con);
        }
    }

    /// Runs `f` on a pooled connection; the connection goes back to the pool
    /// only if `f` succeeded (after an error its state is unknown).
    fn with_con<T>(&self, f: impl FnOnce(&mut Connection) -> ::redis::RedisResult<T>) -> Result<T> {
        let mut con = self.checkout()?;
        match f(&mut con) {
            Ok(v) => {
                self.checkin(con);
                Ok(v)
            }
            Err(e) => Err(self.map_err(e)),
        }
    }

    fn map_err(&self, e: RedisError) -> Error {
        let addr = &self.addr;
        if e.kind() == ErrorKind::AuthenticationFailed {
            return Error::Config(format!("Redis at {addr} refused the credentials: {e}"));
        }
        if e.to_string().contains("certificate") {
            return Error::Config(format!("TLS with Redis at {addr} failed: {e}"));
        }
        if e.is_connection_refusal() {
            return Error::Connection(format!("cannot reach Redis at {addr}: connection refused"));
        }
        if e.is_timeout() {
            return Error::Connection(format!("Redis at {addr} did not answer in time: {e}"));
        }
        if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
            return Error::Connection(format!("lost the connection to Redis at {addr}: {e}"));
        }
        match e.kind() {
            ErrorKind::InvalidClientConfig => {
                Error::Config(format!("Redis client setup failed: {e}"))
            }
            ErrorKind::Server(ServerErrorKind::NoPerm) => {
                Error::Config(format!("Redis at {addr} refused permission: {e}"))
            }
            _ => {
                let text = e.to_string();
                if text.contains("NOAUTH") || text.contains("WRONGPASS") {
                    Error::Config(format!("Redis at {addr} refused the credentials: {text}"))
                } else {
                    Error::Backend(format!("Redis at {addr} answered with an error: {text}"))
                }
            }
        }
    }

    fn beat_once(
        &self,
        con: &mut Connection,
        renewals: &[(&Lease, Duration)],
        flags: &[&str],
    ) -> ::redis::RedisResult<Vec<i64>> {
        let mut pipe = ::redis::pipe();
        for (lease, ttl) in renewals {
            let mut inv = self.renew.prepare_invoke();
            inv.key(self.lease_key(lease.key()))
                .arg(lease.token())
                .arg(millis_ceil(*ttl));
            pipe.invoke_script(&inv);
        }
        for key in flags {
            pipe.exists(self.flag_key(key));
        }
        pipe.query(con)
    }
}

/// Takes a password out of an error message that quotes the URL.
fn redact(message: &str, url: &str) -> String {
    match url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
    {
        Some((userinfo, _)) if !userinfo.is_empty() => message.replace(userinfo, "***"),
        _ => message.to_owned(),
    }
}

impl Adapter for Redis {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lease>> {
        let token = mint_token()?;
        let fence: u64 = self.with_con(|con| {
            self.acquire
                .key(self.lease_key(key))
                .key(self.fence_key(key))
                .arg(&token)
                .arg(millis_ceil(ttl))
                .invoke(con)
        })?;
        Ok((fence > 0).then(|| Lease::new(key, token, fence)))
    }

    fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool> {
        self.with_con(|con| {
            self.renew
                .key(self.lease_key(lease.key()))
                .arg(lease.token())
                .arg(millis_ceil(ttl))
                .invoke::<i64>(con)
        })
        .map(|n| n == 1)
    }

    fn release(&self, lease: &Lease) -> Result<bool> {
        self.with_con(|con| {
            self.release
                .key(self.lease_key(lease.key()))
                .arg(lease.token())
                .invoke::<i64>(con)
        })
        .map(|n| n == 1)
    }

    fn held(&self, key: &str) -> Result<bool> {
        self.with_con(|con| {
            ::redis::cmd("EXISTS")
                .arg(self.lease_key(key))
                .query::<i64>(con)
        })
        .map(|n| n == 1)
    }

    fn break_lease(&self, key: &str) -> Result<bool> {
        self.with_con(|con| {
            ::redis::cmd("DEL")
                .arg(self.lease_key(key))
                .query::<i64>(con)
        })
        .map(|n| n == 1)
    }

    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()> {
        self.with_con(|con| {
            ::redis::cmd("SET")
                .arg(self.flag_key(key))
                .arg("1")
                .arg("PX")
                .arg(millis_ceil(ttl))
                .query::<()>(con)
        })
    }

    fn flag(&self, key: &str) -> Result<bool> {
        self.with_con(|con| {
            ::redis::cmd("EXISTS")
                .arg(self.flag_key(key))
                .query::<i64>(con)
        })
        .map(|n| n == 1)
    }

    fn clear_flag(&self, key: &str) -> Result<()> {
        self.with_con(|con| ::redis::cmd("DEL").arg(self.flag_key(key)).query::<()>(con))
    }

    fn beat(&self, renewals: &[(&Lease, Duration)], flags: &[&str]) -> Result<Beat> {
        if renewals.is_empty() && flags.is_empty() {
            return Ok(Beat::default());
        }
        let answers = self.with_con(|con| match self.beat_once(con, renewals, flags) {
            // EVALSHA inside a pipeline can't fall back by itself: after a
            // server restart or SCRIPT FLUSH, load and send the tick again.
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.renew.load(con)?;
                self.beat_once(con, renewals, flags)
            }
            other => other,
        })?;
        let (renewed, flagged) = answers.split_at(renewals.len().min(answers.len()));
        Ok(Beat {
            renewed: renewed.iter().map(|n| *n == 1).collect(),
            flags: flagged.iter().map(|n| *n == 1).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_one_hash_tag() {
        let r = Redis::open("redis://127.0.0.1:1/0", "ns").unwrap();
        assert_eq!(r.lease_key("a}b"), "ns:lease:{a}b}");
        assert_eq!(r.fence_key("job"), "ns:fence:{job}");
        assert_eq!(r.flag_key("stop"), "ns:flag:{stop}");
    }

    #[test]
    fn bad_namespaces_and_urls_are_refused() {
        assert!(matches!(
            Redis::open("redis://127.0.0.1/", ""),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            Redis::open("redis://127.0.0.1/", "a{b"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            Redis::open("http://nope", "ns"),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("bad url redis://u:secret@h/0", "redis://u:secret@h/0"),
            "bad url redis://***@h/0"
        );
    }

    #[test]
    fn unreachable_server_is_a_connection_error() {
        // Port 1 on loopback: nothing listens there.
        let r = Redis::open("redis://127.0.0.1:1/0", "ns").unwrap();
        let err = r.held("k").unwrap_err();
        assert!(matches!(err, Error::Connection(_)), "{err}");
        assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    }
}
