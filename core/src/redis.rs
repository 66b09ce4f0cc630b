//! [`Redis`]: leases and flags on a Redis server, shared by every process
//! (Rust, C, Python, Ruby) that speaks the protocol in `docs/PROTOCOL.md`.
//!
//! - Keys: `{ns}:lease:{KEY}`, `{ns}:fence:{KEY}`, `{ns}:flag:{KEY}` where the
//!   braces around KEY are literal: a Redis Cluster hash tag, so the lease
//!   and its fence counter always share a slot.
//! - Acquire: one Lua script doing `SET lease "token description" NX PX
//!   ttl` and, on success, raising the fence counter (`max(counter + 1,
//!   server clock)`; atomic: no other client sees one without the other;
//!   see [`ACQUIRE_LUA`]). The holder's description rides in the lease's
//!   value after the token, so it lives and dies with the lease.
//! - Renew / release: Lua compare-and-`PEXPIRE` / compare-and-`DEL` on the
//!   token (the value's first word). Keys only ever travel as `KEYS`,
//!   values as `ARGV`; the hot paths write their commands' RESP straight
//!   into a buffer kept with the pooled connection ([`resp`]).
//! - A heartbeat tick is one pipeline: every renewal and flag read of the
//!   tick in one round trip.
//! - N-holder leases (semaphores): a sorted set of token → expiry per key,
//!   one script per operation ([`slots`]); the acquire script refuses while
//!   it exists.
//! - Push ([`crate::push`]): `set_flag` pipelines `SET {ns}:flag:{KEY}` with
//!   `PUBLISH {ns}:raised:{KEY} 1`; a process whose holds watch stop keys
//!   (or that has waiting lines) keeps ONE extra connection per adapter, on
//!   a listener thread (`mistri-flags`) that never touches the engine's
//!   schedule or deadlines, `SUBSCRIBE`d to exactly what the process needs:
//!   `{ns}:raised:{KEY}` per watched stop key, `{ns}:next:{KEY}:LINE` per
//!   waiting line — never a pattern, so a message reaches only the
//!   processes that watch or wait for that key. The set follows the
//!   registry's interests, batched when the listener next wakes
//!   (`push::HOT_SLICE` / `COLD_SLICE`), unsubscribed after
//!   [`crate::push::LINGER`]. A message trips the holds watching that key at
//!   once. The listener checks a silent connection with a `PING` every
//!   [`PING_EVERY`]; on any error it drops the connection, reconnects
//!   (backing off 50 ms to 1 s) and, once it has subscribed the whole set
//!   again, tells the engines to read every watched flag and every line to
//!   try once (anything announced in the gap). The listener is generic over
//!   where it subscribes ([`ListenAt`]: this server, or the master the
//!   sentinels name, followed across failovers); a cluster listens by
//!   sharded pub/sub instead (`redis_shards.rs`).
//! - Waiting ([`crate::waiting`]): the release script (and `break_lease`,
//!   and a slot release) announces the release to the next live line of the
//!   key's queue only, `PUBLISH {ns}:next:{KEY}:LINE <fence>`
//!   ([`announce_lua`]); nothing when nobody is queued. `expires_in` is
//!   `PTTL`.
//!
//! Connections: a small pool (a mutex around a stack of idle connections,
//! held only to push or pop), so concurrent callers each use their own
//! connection. The pool remembers the process id: a forked child drops the
//! inherited connections (closing only its copies of the sockets) and opens
//! its own. A connection that saw an error is discarded, not reused.

use crate::adapter::{Adapter, Beat, Lease, Renewal, Renewed};
use crate::args::{millis_ceil, mint_token};
use crate::error::{Error, Result};
use crate::fork::ForkLocal;
use crate::info::{from_unix_millis, FlagInfo, HolderInfo, Identity, LeaseInfo, Listing};
use crate::push::{
    FlagWatch, FlagWatcher, Interest, Plan, Registry, Subscriptions, HOT_FOR, LISTENER_IDLE,
};
use crate::redis_sentinel::Sentinel;
use crate::redis_url::ReplicaAck;
use ::redis::{
    Client, Connection, ConnectionLike, ErrorKind, RedisError, Script, ServerErrorKind, Value,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// N-holder leases (a child module: it uses this adapter's connections).
#[path = "redis_slots.rs"]
pub(crate) mod slots;

/// The default key namespace.
pub const DEFAULT_NAMESPACE: &str = "mistri:locks";
/// The default URL.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379/0";
/// Connect, read and write timeout of every connection.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_IDLE: usize = 16;
/// About how many bytes of a heartbeat batch are built before they are
/// sent (see `beat_on`).
const BEAT_CHUNK: usize = 64 * 1024;
/// The shortest socket timeout set (a zero timeout means "block forever"
/// to the OS, and redis-rs refuses it).
const MIN_IO: Duration = Duration::from_millis(1);

/// `KEYS[1]` lease, `KEYS[2]` fence counter, `KEYS[3]` (optional) N-holder
/// slots, `KEYS[4]` and `KEYS[5]` (optional) the queue of waiting lines
/// `{ns}:queue:{KEY}` and their deadlines `{ns}:queued:{KEY}`; `ARGV[1]`
/// token, `ARGV[2]` ttl in ms, `ARGV[3]` (optional) holder label, `ARGV[4]`
/// heartbeat in ms, `ARGV[5]` and `ARGV[6]` (optional, a waiter's) line id
/// and queue entry ttl in ms. Returns the new fencing number, or 0 when the
/// lease is taken (and then writes nothing but the waiter's queue entry).
///
/// The fence is `max(counter + 1, server TIME in µs)`, and the counter is
/// set to it ([`crate::fence`]): a counter lost with the data (restart
/// without persistence, `FLUSHALL`, failover, eviction) restarts above every
/// fence issued before. `TIME` before a write needs effects replication, the
/// only mode since Redis 7 (default since 5). The clock is read as text:
/// `TIME`'s two parts joined (seconds, then the microseconds padded to 6
/// digits), parsed once for the comparison; when the clock wins (nearly
/// always) that text is the fence as written, and the acquired-at ms are
/// the seconds and the first 3 of those digits: no number formatting on
/// the server. A counter that wins is written with `%.0f` (exact: below
/// 2^53, a Lua double is).
///
/// With `ARGV[3]`, the lease's value is the token followed by the holder's
/// description (`TOKEN TTL_MS FENCE ACQUIRED_MS HEARTBEAT_MS LABEL`, see
/// [`holder_from`]): the description lives and dies with the lease, and an
/// acquire writes two keys, the lease and the counter. Callers that pass two
/// arguments store the bare token, as old clients did.
///
/// With `KEYS[3]`, the N-holder lease key `{ns}:slots:{KEY}`: refused (0)
/// while it exists, i.e. while a slot is live ([`slots`]).
///
/// With `KEYS[4]`, the queue (`docs/PROTOCOL.md`, "Waiting"): a sorted set,
/// member = line id, score = enqueue time (ms, server clock), beside a hash
/// line id -> liveness deadline (ms). Dead entries (deadline passed) are
/// pruned from the head; while a live entry other than the caller's line
/// heads the queue the acquire is refused, even of a free lease. A refused
/// waiter (`ARGV[5]`) is added (`ZADD NX`: it keeps its place) and its
/// deadline refreshed; one that acquires leaves the queue. Both keys expire
/// `ARGV[6]` ms after the last refresh.
///
/// The common case, a plain acquire (no `ARGV[5]`) with neither slots nor a
/// queue, is told apart by ONE `EXISTS KEYS[3] KEYS[4]` returning 0 (a
/// caller without those keys counts the lease twice instead: any live lease
/// takes the full path, which refuses it); then the script runs `TIME`,
/// that `EXISTS`, `GET` of the counter, `SET … NX PX` and `SET` of the
/// counter: 5 calls. Anything else takes the full path: the slots check,
/// the queue's pruning, and a refused waiter's queue entry (written at the
/// end, so no closure or table is made per call).
pub const ACQUIRE_LUA: &str = "\
local now = redis.call('TIME')
local us = string.sub('00000' .. now[2], -6)
local clock = now[1] .. us
local floor = tonumber(clock)
local line = ARGV[5]
local free = true
if line or redis.call('EXISTS', KEYS[3] or KEYS[1], KEYS[4] or KEYS[1]) > 0 then
  if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then
    free = false
  elseif KEYS[4] and (line or redis.call('EXISTS', KEYS[4]) == 1) then
    local ms = math.floor(floor / 1000)
    while true do
      local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
      if not head or head == line then
        break
      end
      local d = tonumber(redis.call('HGET', KEYS[5], head))
      if d and d > ms then
        free = false
        break
      end
      redis.call('ZREM', KEYS[4], head)
      redis.call('HDEL', KEYS[5], head)
    end
  end
end
if free then
  local counter = tonumber(redis.call('GET', KEYS[2]))
  local fence, text = floor, clock
  if counter and counter + 1 >= floor then
    fence = counter + 1
    text = string.format('%.0f', fence)
  end
  local value = ARGV[1]
  if ARGV[3] then
    value = ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. text .. ' ' .. now[1] .. string.sub(us, 1, 3)
      .. ' ' .. (ARGV[4] or '0') .. ' ' .. ARGV[3]
  end
  if redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
    redis.call('SET', KEYS[2], text)
    if line then
      redis.call('ZREM', KEYS[4], line)
      redis.call('HDEL', KEYS[5], line)
    end
    return fence
  end
end
if line then
  local ms = math.floor(floor / 1000)
  redis.call('ZADD', KEYS[4], 'NX', string.format('%.0f', ms), line)
  redis.call('HSET', KEYS[5], line, string.format('%.0f', ms + tonumber(ARGV[6])))
  redis.call('PEXPIRE', KEYS[4], ARGV[6])
  redis.call('PEXPIRE', KEYS[5], ARGV[6])
end
return 0";

/// `KEYS[1]` queue, `KEYS[2]` queue deadlines (see [`ACQUIRE_LUA`]);
/// `ARGV[1]` line id: takes the line out of the queue. Returns 0.
pub const LEAVE_QUEUE_LUA: &str = "\
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 0";

/// [`LEAVE_QUEUE_LUA`] (a script: on Redis Cluster it runs as one
/// operation on the key's slot like the others).
pub(crate) static LEAVE_QUEUE: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new(LEAVE_QUEUE_LUA));

/// [`BREAK_LUA`], hashed once per process.
pub(crate) static BREAK: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new(BREAK_LUA));

/// The keys of [`BREAK_LUA`] for `key`.
pub(crate) fn break_keys(ns: &str, key: &str) -> Vec<String> {
    ["lease", "info", "slots", "holders", "queue", "queued"]
        .iter()
        .map(|kind| format!("{ns}:{kind}:{{{key}}}"))
        .collect()
}

/// The queue entry ttl in ms ([`crate::waiting::QUEUE_ENTRY_TTL`]).
pub(crate) fn queue_ttl_ms() -> u64 {
    millis_ceil(crate::waiting::QUEUE_ENTRY_TTL)
}

/// `KEYS[1]` lease; `ARGV[1]` token, `ARGV[2]` ttl in ms, `ARGV[3]`
/// (optional) the least life in ms the lease must have left. 1 if renewed,
/// 0 if the token does not own the key, -1 if it does but less than
/// `ARGV[3]` ms of its life is left (a renewal that arrived too late: not
/// applied).
///
/// The token owns the key when the value is the token or starts with the
/// token and a space (a described lease). A renewal writes nothing but the
/// expiry; only one with another ttl than the description's rewrites the
/// value, to record it (the time of the last renewal is derived from the
/// ttl and the time left when the description is read).
pub const RENEW_LUA: &str = "\
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local head = ARGV[1] .. ' ' .. ARGV[2] .. ' '
local same = v == ARGV[1] or string.sub(v, 1, #head) == head
if not same and string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return 0
end
local floor = tonumber(ARGV[3]) or 0
if floor > 0 and redis.call('PTTL', KEYS[1]) < floor then
  return -1
end
if same then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
redis.call('SET', KEYS[1], head .. (string.match(v, '^%S+ %S+ (.*)$') or ''), 'PX', ARGV[2])
return 1";

/// The Lua function that announces a release to the next waiting line
/// only (`docs/PROTOCOL.md`, "Waiting"): `announce(queue, deadlines,
/// prefix, message, verb)` looks at the first few lines of the key's queue
/// (`{ns}:queue:{KEY}`, deadlines in `{ns}:queued:{KEY}`) and publishes
/// `message` on `prefix .. line` (`{ns}:next:{KEY}:LINE`) for the first
/// live one, with `verb` (`PUBLISH`; `SPUBLISH` on a cluster), by
/// `pcall`: a server without `SPUBLISH` (Redis < 7) still releases, and the
/// line retries on its timers. No queue: one `EXISTS`, nothing published.
/// Used by every release script.
macro_rules! announce_lua {
    () => {
        "\
local function announce(queue, deadlines, prefix, message, verb)
  if not queue or not prefix or redis.call('EXISTS', queue) == 0 then
    return
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for _, line in ipairs(redis.call('ZRANGE', queue, 0, 7)) do
    local d = tonumber(redis.call('HGET', deadlines, line))
    if d and d > now then
      redis.pcall(verb or 'PUBLISH', prefix .. line, message)
      return
    end
  end
end
"
    };
}
pub(crate) use announce_lua;

/// `KEYS[1]` lease, `KEYS[2]` and `KEYS[3]` (optional) the key's queue of
/// waiting lines and their deadlines; `ARGV[1]` token, `ARGV[2]`
/// (optional) the prefix of the lines' channels (`{ns}:next:{KEY}:`),
/// `ARGV[3]` the message (the lease's fence), `ARGV[4]` (optional) the
/// publish command (`SPUBLISH` on a cluster). 1 if deleted (and then
/// announced to the next live line of the queue, if any: see
/// [`announce_lua`]), 0 if the token does not own the key. Ownership as in
/// [`RENEW_LUA`] (the value is the token, or starts with it and a space),
/// tested with a plain `string.find` at position 1 and the next byte: no
/// string is built.
pub const RELEASE_LUA: &str = concat!(
    announce_lua!(),
    "\
local v = redis.call('GET', KEYS[1])
local t = ARGV[1]
if v and (v == t or (string.find(v, t, 1, true) == 1 and string.byte(v, #t + 1) == 32)) then
  local n = redis.call('DEL', KEYS[1])
  announce(KEYS[2], KEYS[3], ARGV[2], ARGV[3] or '0', ARGV[4])
  return n
end
return 0"
);

/// `KEYS[1]` lease, `KEYS[2]` description, `KEYS[3]` slots, `KEYS[4]`
/// their descriptions, `KEYS[5]` and `KEYS[6]` the queue and its
/// deadlines; `ARGV[1]` the lines' channel prefix, `ARGV[2]` (optional)
/// the publish command. Deletes the lease and the slots, answers how many
/// of them were there, and announces the release (message `0`) to the
/// next line like a release does.
pub const BREAK_LUA: &str = concat!(
    announce_lua!(),
    "\
local n = redis.call('DEL', KEYS[1], KEYS[3])
redis.call('DEL', KEYS[2], KEYS[4])
if n > 0 then
  announce(KEYS[5], KEYS[6], ARGV[1], '0', ARGV[2])
end
return n"
);

#[path = "redis_resp.rs"]
pub(crate) mod resp;
use resp::Resp;

/// A pooled connection and what the hot paths keep with it.
struct Con {
    con: Connection,
    /// The RESP of the command(s) being sent: reused, so an operation
    /// allocates nothing for its arguments.
    buf: Vec<u8>,
    /// The read and write timeout the socket has now (`None`: unknown).
    aimed: Option<Duration>,
}

struct Pool {
    idle: Vec<Con>,
    /// With a sentinel: the [`Sentinel::epoch`] the idle connections were
    /// opened in.
    epoch: u64,
}

impl Pool {
    /// A forked child's pool: empty. The parent's sockets are closed (our
    /// copies only; nothing is written to them) if its pool can be had
    /// without blocking, else leaked with the parent's pool.
    fn for_child(parent: &Mutex<Pool>) -> Mutex<Pool> {
        if let Some(mut pool) = parent.try_lock() {
            pool.idle.clear();
        }
        Mutex::new(Pool {
            idle: Vec::new(),
            epoch: 0,
        })
    }
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
    pool: ForkLocal<Mutex<Pool>>,
    /// The watchers of this adapter's flag listener (one per process).
    push: ForkLocal<Arc<Registry>>,
    acquire: Script,
    renew: Script,
    release: Script,
    /// `redis+sentinel://`: how the master is found (then `client` is
    /// unused). Shared with the flag listener, which follows failovers.
    sentinel: Option<Arc<Sentinel>>,
    /// Opt-in `WAIT` after acquire and renewals.
    replicas: ReplicaAck,
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
            pool: ForkLocal::new(
                Mutex::new(Pool {
                    idle: Vec::new(),
                    epoch: 0,
                }),
                Pool::for_child,
            ),
            push: crate::push::fork_local_registry(),
            acquire: Script::new(ACQUIRE_LUA),
            renew: Script::new(RENEW_LUA),
            release: Script::new(RELEASE_LUA),
            sentinel: None,
            replicas: ReplicaAck::default(),
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

    /// The pub/sub channel on which raising the flag `key` is announced.
    pub fn raised_channel(&self, key: &str) -> String {
        format!("{}:raised:{{{key}}}", self.namespace)
    }

    /// The pub/sub channel on which releases of the lease on `key` were
    /// announced to every listener before per-line announcements (kept for
    /// the protocol document; nothing new publishes on it).
    pub fn released_channel(&self, key: &str) -> String {
        format!("{}:released:{{{key}}}", self.namespace)
    }

    /// The prefix of the channels on which a release of `key` is announced
    /// to the next waiting line: `{ns}:next:{KEY}:` followed by the line's
    /// id.
    pub fn line_channel_prefix(&self, key: &str) -> String {
        format!("{}:next:{{{key}}}:", self.namespace)
    }

    /// The Redis key of the holder description of the lease on `key`.
    pub fn info_key(&self, key: &str) -> String {
        format!("{}:info:{{{key}}}", self.namespace)
    }

    /// The connect/read/write timeout: every operation's wall-clock bound.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A pooled connection, or a new one connected within `deadline`.
    fn checkout(&self, deadline: Instant) -> Result<Con> {
        if let Some(sentinel) = &self.sentinel {
            sentinel.check_if_due(deadline);
        }
        {
            let mut pool = self.pool.get().lock();
            let epoch = self.master_epoch();
            if pool.epoch != epoch {
                // The sentinels' master was forgotten since these opened.
                pool.idle.clear();
                pool.epoch = epoch;
            }
            if let Some(con) = pool.idle.pop() {
                return Ok(con);
            }
        }
        // Connecting also runs a setup pipeline of two replies, each of
        // which may wait out the read timeout: give each step a third.
        let left = self.left(deadline)?;
        let con = self.connect(left, deadline).map_err(|e| self.map_err(e))?;
        Ok(Con {
            con,
            buf: Vec::new(),
            aimed: None,
        })
    }

    /// Puts back a connection checked out when [`Redis::master_epoch`]
    /// was `epoch` (one of an earlier epoch is dropped).
    fn checkin(&self, mut con: Con, epoch: u64) {
        // Keep only a small buffer pooled. A beat's stays under this (it is
        // sent every BEAT_CHUNK bytes), so it is not allocated again.
        if con.buf.capacity() > 2 * BEAT_CHUNK {
            con.buf = Vec::new();
        }
        let mut pool = self.pool.get().lock();
        if pool.idle.len() < MAX_IDLE && con.con.is_open() && epoch == self.master_epoch() {
            pool.idle.push(con);
        }
    }

    /// Time left until `deadline`, or the error that says there is none.
    fn left(&self, deadline: Instant) -> Result<Duration> {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| *d >= MIN_IO)
            .ok_or_else(|| {
                Error::Connection(format!(
                    "Redis at {} did not answer in time (deadline passed)",
                    self.addr
                ))
            })
    }

    /// Points both socket timeouts at `deadline`. A socket already aimed
    /// within a millisecond of it is left alone (most operations start with
    /// the full timeout left, as the one before did): no system call.
    fn aim(&self, con: &mut Con, deadline: Instant) -> Result<()> {
        let left = self.left(deadline)?;
        if con.aimed.is_some_and(|t| t.abs_diff(left) < MIN_IO) {
            return Ok(());
        }
        con.aimed = None;
        con.con
            .set_read_timeout(Some(left))
            .and_then(|()| con.con.set_write_timeout(Some(left)))
            .map_err(|e| self.map_err(e))?;
        con.aimed = Some(left);
        Ok(())
    }

    /// Runs `f` on a pooled connection whose every read and write ends by
    /// `now + timeout`. The connection goes back to the pool only if `f`
    /// succeeded: after an error or a timeout its state is unknown (late
    /// replies may still arrive), so it is dropped.
    fn with_con<T>(
        &self,
        f: impl FnOnce(&mut Con, Instant) -> ::redis::RedisResult<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + self.timeout;
        let epoch = self.master_epoch();
        let mut con = self.checkout(deadline)?;
        self.aim(&mut con, deadline)?;
        match f(&mut con, deadline) {
            Ok(v) => {
                self.checkin(con, epoch);
                Ok(v)
            }
            Err(e) => Err(self.map_err(e)),
        }
    }

    /// Runs `script` with EVALSHA, falling back to EVAL (which also caches
    /// it) after a server restart or SCRIPT FLUSH, each step bounded by
    /// `deadline`. `args` writes the `keys` keys and `argc` arguments.
    fn eval_with(
        &self,
        con: &mut Con,
        deadline: Instant,
        script: &Script,
        source: &str,
        (keys, argc): (usize, usize),
        args: impl Fn(&mut Resp<'_>),
    ) -> ::redis::RedisResult<Value> {
        let send = |con: &mut Con, source: Option<&str>| {
            con.buf.clear();
            let mut w = Resp::new(&mut con.buf);
            w.eval(script.get_hash(), source, keys, argc);
            args(&mut w);
            con.con.req_packed_command(&con.buf)
        };
        match send(con, None)? {
            Value::ServerError(e) if e.code() == "NOSCRIPT" => {
                if let Some(left) = deadline.checked_duration_since(Instant::now()) {
                    con.aimed = None;
                    con.con.set_read_timeout(Some(left.max(MIN_IO)))?;
                }
                send(con, Some(source))?.extract_error()
            }
            other => other.extract_error(),
        }
    }

    /// [`Redis::eval_with`] of string keys and arguments (the N-holder
    /// scripts), its reply converted to `T`.
    fn eval<T: ::redis::FromRedisValue>(
        &self,
        con: &mut Con,
        deadline: Instant,
        script: &Script,
        source: &str,
        keys: &[String],
        args: &[String],
    ) -> ::redis::RedisResult<T> {
        let reply = self.eval_with(
            con,
            deadline,
            script,
            source,
            (keys.len(), args.len()),
            |w| {
                for k in keys.iter().chain(args) {
                    w.bulk(k.as_bytes());
                }
            },
        )?;
        Ok(::redis::from_redis_value(reply)?)
    }

    fn map_err(&self, e: RedisError) -> Error {
        self.note_error(&e);
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

    /// One tick on one connection: everything sent at once, each reply
    /// read with the time left until `deadline` (so a stalled server costs
    /// the tick's budget once, not once per reply). Returns the raw reply
    /// of each item, or the I/O error that ended the tick; the caller drops
    /// the connection after an error.
    fn beat_on(
        &self,
        con: &mut Con,
        renewals: &[Renewal<'_>],
        flags: &[&str],
        deadline: Instant,
    ) -> Result<Vec<Value>> {
        // The batch is written in pieces of about BEAT_CHUNK bytes, each
        // sent before the next is built: the buffer stays small however
        // many holds there are (100,000 renewals would be ~20 MB), and the
        // server starts on the first renewals while the rest are built.
        // The replies are read once everything is sent (Redis queues them
        // meanwhile; it never waits for its client to read).
        con.buf.clear();
        let sha = self.renew.get_hash();
        let mut aimed_at = Instant::now();
        self.aim(con, deadline)?;
        let mut flush = |con: &mut Con, last: bool| -> Result<()> {
            let full = con.buf.len() >= BEAT_CHUNK;
            if con.buf.is_empty() || !(full || last) {
                return Ok(());
            }
            if aimed_at.elapsed() >= MIN_IO {
                self.aim(con, deadline)?;
                aimed_at = Instant::now();
            }
            con.con
                .send_packed_command(&con.buf)
                .map_err(|e| self.map_err(e))?;
            con.buf.clear();
            Ok(())
        };
        for r in renewals {
            let mut w = Resp::new(&mut con.buf);
            if r.lease.slotted() {
                let (keys, args) = slots::renew_call(&self.namespace, r);
                w.eval(
                    slots::SCRIPTS.renew.get_hash(),
                    None,
                    keys.len(),
                    args.len(),
                );
                for k in keys.iter().chain(&args) {
                    w.bulk(k.as_bytes());
                }
            } else {
                w.eval(sha, None, 1, 3)
                    .key(&self.namespace, "lease", r.lease.key())
                    .bulk(r.lease.token().as_bytes())
                    .int(millis_ceil(r.ttl))
                    .int(min_left_ms(r.min_left));
            }
            flush(con, false)?;
        }
        for key in flags {
            Resp::new(&mut con.buf)
                .command(2)
                .bulk(b"EXISTS")
                .key(&self.namespace, "flag", key);
            flush(con, false)?;
        }
        flush(con, true)?;
        let count = renewals.len() + flags.len();
        let mut replies = Vec::with_capacity(count);
        for _ in 0..count {
            // Re-aim the read timeout whenever a millisecond has passed,
            // so no read can run past the deadline by more than that.
            if aimed_at.elapsed() >= MIN_IO {
                self.aim(con, deadline)?;
                aimed_at = Instant::now();
            }
            replies.push(con.con.recv_response().map_err(|e| self.map_err(e))?);
        }
        Ok(replies)
    }
}

impl Redis {
    /// The lease on `key` and its description, read in one `MULTI`.
    fn info_on(&self, con: &mut Con, key: &str) -> ::redis::RedisResult<Option<LeaseInfo>> {
        let (pttl, value, (secs, micros)): (i64, Option<Vec<u8>>, (u64, u64)) = ::redis::pipe()
            .atomic()
            .cmd("PTTL")
            .arg(self.lease_key(key))
            .cmd("GET")
            .arg(self.lease_key(key))
            .cmd("TIME")
            .query(&mut con.con)?;
        if pttl == -2 {
            return Ok(None);
        }
        let time_left = u64::try_from(pttl).ok().map(Duration::from_millis);
        let now_ms = secs * 1000 + micros / 1000;
        Ok(Some(LeaseInfo::exclusive(
            key.to_owned(),
            time_left,
            value.and_then(|v| holder_from(&v, time_left, now_ms)),
        )))
    }

    /// Every key matching `pattern`, by `SCAN` (a page per round trip).
    fn scan(&self, pattern: &str) -> Result<Vec<String>> {
        let mut cursor: u64 = 0;
        let mut found = Vec::new();
        loop {
            let (next, keys): (u64, Vec<String>) = self.with_con(|con, _| {
                ::redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(500)
                    .query(&mut con.con)
            })?;
            found.extend(keys);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        found.sort();
        found.dedup();
        Ok(found)
    }

    /// The user keys of the namespaced keys of `kind` starting with `prefix`.
    fn keys_of(&self, kind: &str, prefix: &str) -> Result<Vec<String>> {
        user_keys(&self.namespace, kind, prefix, |pattern| self.scan(pattern))
    }
}

/// The user keys (`KEY` of `NS:kind:{KEY}`) starting with `prefix`, found by
/// `scan` (SCAN of one server, or of every master of a cluster) with a
/// glob-escaped pattern.
pub(crate) fn user_keys(
    namespace: &str,
    kind: &str,
    prefix: &str,
    scan: impl FnOnce(&str) -> Result<Vec<String>>,
) -> Result<Vec<String>> {
    let head = format!("{namespace}:{kind}:{{");
    let pattern = format!("{}*", glob_escape(&format!("{head}{prefix}")));
    Ok(scan(&pattern)?
        .into_iter()
        .filter_map(|k| {
            k.strip_prefix(&head)
                .and_then(|rest| rest.strip_suffix('}'))
                .map(str::to_owned)
        })
        .filter(|k| k.starts_with(prefix) && !k.is_empty())
        .collect())
}

/// Where a listener subscribes: one server, the master the sentinels name
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
/// ([`crate::push`]): `{ns}:raised:{KEY}` for each watched stop key and
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
const SUBSCRIBE_CHUNK: usize = 512;

/// The channel of `interest` in `namespace`.
pub(crate) fn channel_of(namespace: &str, interest: &Interest) -> String {
    match interest {
        Interest::Flag(key) => format!("{namespace}:raised:{{{key}}}"),
        Interest::Line { key, line } => format!("{namespace}:next:{{{key}}}:{line}"),
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

enum Listened {
    /// Nobody watches any more.
    Retired,
    /// The connection failed after it was subscribed.
    Lost,
}

/// The holder description in a lease's value (`TOKEN TTL_MS FENCE
/// ACQUIRED_MS HEARTBEAT_MS LABEL`, written by [`ACQUIRE_LUA`]), read when
/// the lease had `time_left` and the server's clock said `now_ms`; `None`
/// for a bare token (a client that stores no description). The token is
/// dropped here and never leaves.
///
/// The last renewal is not stored (a renewal writes only the expiry): it is
/// when the lease had its whole ttl left, `now − (ttl − time_left)`.
pub(crate) fn holder_from(
    value: &[u8],
    time_left: Option<Duration>,
    now_ms: u64,
) -> Option<HolderInfo> {
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.splitn(6, ' ');
    let _token = parts.next()?;
    let mut num = || parts.next()?.parse::<u64>().ok();
    let (ttl_ms, fence, acquired_ms, heartbeat_ms) = (num()?, num()?, num()?, num()?);
    let label = parts.next()?;
    let renewed_ms = match time_left {
        Some(left) => now_ms
            .saturating_sub(ttl_ms.saturating_sub(left.as_millis() as u64))
            .clamp(acquired_ms.min(now_ms), now_ms),
        None => acquired_ms,
    };
    Some(HolderInfo {
        label: label.to_owned(),
        fence,
        acquired_at: from_unix_millis(acquired_ms),
        renewed_at: from_unix_millis(renewed_ms),
        ttl: Duration::from_millis(ttl_ms),
        heartbeat: Duration::from_millis(heartbeat_ms),
    })
}

/// `text` with Redis glob metacharacters escaped, for `SCAN MATCH`.
pub(crate) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `ARGV[3]` of the renew script: at least `d`, in whole milliseconds
/// (rounded up, so the condition is never weaker than asked); 0 for none.
pub(crate) fn min_left_ms(d: Duration) -> u64 {
    if d.is_zero() {
        0
    } else {
        millis_ceil(d)
    }
}

/// What a renew script's reply means; anything else is an error.
pub(crate) fn renewed_from(value: &Value, addr: &str) -> Result<Renewed> {
    match value {
        Value::Int(1) => Ok(Renewed::Yes),
        Value::Int(0) => Ok(Renewed::NotHeld),
        Value::Int(-1) => Ok(Renewed::TooLate),
        other => Err(item_error(other, addr)),
    }
}

/// What an EXISTS reply means; anything else is an error.
pub(crate) fn flag_from(value: &Value, addr: &str) -> Result<bool> {
    match value {
        Value::Int(n @ (0 | 1)) => Ok(*n == 1),
        other => Err(item_error(other, addr)),
    }
}

fn item_error(value: &Value, addr: &str) -> Error {
    match value {
        Value::ServerError(e) => {
            Error::Backend(format!("Redis at {addr} answered with an error: {e:?}"))
        }
        other => Error::Backend(format!(
            "Redis at {addr} sent an unexpected reply: {other:?}"
        )),
    }
}

fn is_noscript(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

/// Takes a password out of an error message that quotes the URL.
pub(crate) fn redact(message: &str, url: &str) -> String {
    match url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
    {
        Some((userinfo, _)) if !userinfo.is_empty() => message.replace(userinfo, "***"),
        _ => message.to_owned(),
    }
}

impl Redis {
    /// The exclusive lease (`limit` 1) or one of `limit` slots; in `line`
    /// of the key's wait queue when given ([`crate::waiting`]).
    fn acquire_one(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        if limit <= 1 {
            return self.acquire_exclusive(key, ttl, who, line);
        }
        self.acquire_slot(key, ttl, who, limit, line)
    }

    /// The exclusive acquire; `line`: a waiter's line ([`ACQUIRE_LUA`]'s
    /// queue).
    fn acquire_exclusive(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        let token = mint_token()?;
        let argc = if line.is_some() { 6 } else { 4 };
        let (fence, acked): (u64, bool) = self.with_con(|con, deadline| {
            let reply =
                self.eval_with(con, deadline, &self.acquire, ACQUIRE_LUA, (5, argc), |w| {
                    w.key(&self.namespace, "lease", key)
                        .key(&self.namespace, "fence", key)
                        .key(&self.namespace, "slots", key)
                        .key(&self.namespace, "queue", key)
                        .key(&self.namespace, "queued", key)
                        .bulk(token.as_bytes())
                        .int(millis_ceil(ttl))
                        .bulk(who.label.as_bytes())
                        .int(min_left_ms(who.heartbeat));
                    if let Some(line) = line {
                        w.bulk(line.as_bytes()).int(queue_ttl_ms());
                    }
                })?;
            let fence: u64 = ::redis::from_redis_value(reply)?;
            let acked = self.wait_replicas(con, deadline, fence > 0)?;
            Ok((fence, acked))
        })?;
        let lease = (fence > 0).then(|| Lease::new(key, token, fence));
        match lease {
            Some(lease) if !acked => Err(self.unreplicated_acquire(&lease)),
            lease => Ok(lease),
        }
    }
}

impl Adapter for Redis {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn io_timeout(&self) -> Duration {
        self.timeout
    }

    fn acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lease>> {
        self.acquire_as(key, ttl, &Identity::of_process())
    }

    fn acquire_as(&self, key: &str, ttl: Duration, who: &Identity) -> Result<Option<Lease>> {
        self.acquire_exclusive(key, ttl, who, None)
    }

    fn acquire_queued(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        line: &str,
    ) -> Result<Option<Lease>> {
        self.acquire_one(key, ttl, who, limit, Some(line))
    }

    fn leave_queue(&self, key: &str, line: &str) -> Result<()> {
        self.with_con(|con, deadline| {
            self.eval_with(con, deadline, &LEAVE_QUEUE, LEAVE_QUEUE_LUA, (2, 1), |w| {
                w.key(&self.namespace, "queue", key)
                    .key(&self.namespace, "queued", key)
                    .bulk(line.as_bytes());
            })
        })
        .map(drop)
    }

    fn renew_within(&self, renewal: &Renewal<'_>) -> Result<Renewed> {
        if renewal.lease.slotted() {
            return self.renew_slot(renewal);
        }
        let (reply, acked): (Value, bool) = self.with_con(|con, deadline| {
            let reply = self.eval_with(con, deadline, &self.renew, RENEW_LUA, (1, 3), |w| {
                w.key(&self.namespace, "lease", renewal.lease.key())
                    .bulk(renewal.lease.token().as_bytes())
                    .int(millis_ceil(renewal.ttl))
                    .int(min_left_ms(renewal.min_left));
            })?;
            let acked = self.wait_replicas(con, deadline, reply == Value::Int(1))?;
            Ok((reply, acked))
        })?;
        if !acked {
            // With a sentinel the master may have moved: look again.
            self.forget_master();
        }
        self.acked(renewed_from(&reply, &self.addr), acked)
    }

    fn release(&self, lease: &Lease) -> Result<bool> {
        if lease.slotted() {
            return self.release_slot(lease);
        }
        let reply = self.with_con(|con, deadline| {
            self.eval_with(con, deadline, &self.release, RELEASE_LUA, (3, 3), |w| {
                let (ns, key) = (&self.namespace, lease.key());
                w.key(ns, "lease", key)
                    .key(ns, "queue", key)
                    .key(ns, "queued", key)
                    .bulk(lease.token().as_bytes())
                    .key_then(ns, "next", key, ":")
                    .int(lease.fence());
            })
        })?;
        Ok(reply == Value::Int(1))
    }

    fn held(&self, key: &str) -> Result<bool> {
        self.with_con(|con, _| {
            ::redis::cmd("EXISTS")
                .arg(self.lease_key(key))
                .arg(self.slots_key(key))
                .query::<i64>(&mut con.con)
        })
        .map(|n| n >= 1)
    }

    fn acquire_limited(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
    ) -> Result<Option<Lease>> {
        self.acquire_one(key, ttl, who, limit, None)
    }

    fn expires_in(&self, key: &str) -> Result<Option<Duration>> {
        self.slot_expires_in(key)
    }

    fn break_lease(&self, key: &str) -> Result<bool> {
        self.with_con(|con, deadline| {
            self.eval::<i64>(
                con,
                deadline,
                &BREAK,
                BREAK_LUA,
                &break_keys(&self.namespace, key),
                &[self.line_channel_prefix(key)],
            )
        })
        .map(|n| n >= 1)
    }

    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()> {
        // One round trip; the SET is applied before the message goes out,
        // so a listener that hears it finds the flag up.
        self.with_con(|con, _| {
            ::redis::pipe()
                .cmd("SET")
                .arg(self.flag_key(key))
                .arg("1")
                .arg("PX")
                .arg(millis_ceil(ttl))
                .ignore()
                .cmd("PUBLISH")
                .arg(self.raised_channel(key))
                .arg("1")
                .ignore()
                .query::<()>(&mut con.con)
        })
    }

    fn watch_flags(&self, watcher: Weak<dyn FlagWatcher>) -> Option<FlagWatch> {
        let at: Arc<dyn ListenAt> = match &self.sentinel {
            Some(sentinel) => sentinel.clone(),
            None => Arc::new(self.client.clone()),
        };
        let listener = Listener::new(at, &self.namespace, self.timeout);
        self.push.get().watch(watcher, move |registry| {
            crate::push::spawn("mistri-flags", move || listener.run(&registry))
        })
    }

    fn flag(&self, key: &str) -> Result<bool> {
        self.with_con(|con, _| {
            ::redis::cmd("EXISTS")
                .arg(self.flag_key(key))
                .query::<i64>(&mut con.con)
        })
        .map(|n| n == 1)
    }

    fn clear_flag(&self, key: &str) -> Result<()> {
        self.with_con(|con, _| {
            ::redis::cmd("DEL")
                .arg(self.flag_key(key))
                .query::<()>(&mut con.con)
        })
    }

    fn info(&self, key: &str) -> Result<Option<LeaseInfo>> {
        match self.with_con(|con, _| self.info_on(con, key))? {
            Some(info) => Ok(Some(info)),
            None => self.slot_info(key),
        }
    }

    fn list(&self, prefix: &str) -> Result<Listing> {
        let mut listing = Listing::default();
        let mut keys = self.keys_of("lease", prefix)?;
        keys.extend(self.keys_of("slots", prefix)?);
        keys.sort();
        keys.dedup();
        for key in keys {
            // Gone between the scan and now: not live, not listed.
            if let Some(info) = self.info(&key)? {
                listing.leases.push(info);
            }
        }
        for key in self.keys_of("flag", prefix)? {
            let pttl: i64 = self.with_con(|con, _| {
                ::redis::cmd("PTTL")
                    .arg(self.flag_key(&key))
                    .query(&mut con.con)
            })?;
            if pttl != -2 {
                listing.flags.push(FlagInfo {
                    key,
                    time_left: u64::try_from(pttl).ok().map(Duration::from_millis),
                });
            }
        }
        listing.sort();
        Ok(listing)
    }

    fn beat(&self, renewals: &[Renewal<'_>], flags: &[&str], deadline: Instant) -> Result<Beat> {
        if renewals.is_empty() && flags.is_empty() {
            return Ok(Beat::default());
        }
        let deadline = deadline.min(Instant::now() + self.timeout);
        let epoch = self.master_epoch();
        let mut con = self.checkout(deadline)?;
        // Any error below drops `con`: a timed-out connection may still
        // deliver late replies, which must never be read as this tick's.
        let mut replies = self.beat_on(&mut con, renewals, flags, deadline)?;
        // After a server restart or SCRIPT FLUSH the renewals answer
        // NOSCRIPT: load the script and send those renewals once more.
        let again: Vec<usize> = (0..renewals.len())
            .filter(|i| is_noscript(&replies[*i]))
            .collect();
        if !again.is_empty() {
            self.aim(&mut con, deadline)?;
            self.renew.load(&mut con.con).map_err(|e| self.map_err(e))?;
            if renewals.iter().any(|r| r.lease.slotted()) {
                slots::SCRIPTS
                    .renew
                    .load(&mut con.con)
                    .map_err(|e| self.map_err(e))?;
            }
            let retry: Vec<Renewal<'_>> = again.iter().map(|i| renewals[*i]).collect();
            let answers = self.beat_on(&mut con, &retry, &[], deadline)?;
            for (i, answer) in again.into_iter().zip(answers) {
                replies[i] = answer;
            }
        }
        let acked = self.after_beat(&mut con, deadline, &replies[..renewals.len()])?;
        self.checkin(con, epoch);
        let (renewed, up) = replies.split_at(renewals.len());
        Ok(Beat {
            renewals: renewed
                .iter()
                .map(|v| self.acked(renewed_from(v, &self.addr), acked))
                .collect(),
            flags: up.iter().map(|v| flag_from(v, &self.addr)).collect(),
        })
    }
}

/// Scale-out: how a connection is found (one server, or the master a
/// sentinel names), what an error means for that choice, and replica
/// acknowledgement (`WAIT`). See `docs/SCALE-OUT.md`.
impl Redis {
    /// A [`Redis`] whose master is found through `sentinel` (the
    /// `redis+sentinel://` form of [`crate::redis_url::open`]).
    pub(crate) fn open_sentinel(
        sentinel: Sentinel,
        namespace: &str,
        replicas: ReplicaAck,
    ) -> Result<Self> {
        // `client` is never used with a sentinel; any parsable URL will do.
        let mut redis = Self::with_timeout("redis://127.0.0.1/", namespace, DEFAULT_TIMEOUT)?;
        redis.addr = sentinel.describe();
        redis.sentinel = Some(Arc::new(sentinel));
        Ok(redis.replicated(replicas))
    }

    /// This adapter with replica acknowledgement as `replicas` says.
    pub fn replicated(mut self, replicas: ReplicaAck) -> Self {
        self.replicas = replicas;
        self
    }

    /// The replica acknowledgement asked for.
    pub fn replica_ack(&self) -> ReplicaAck {
        self.replicas
    }

    /// With a sentinel, the master's address as last resolved.
    pub fn sentinel_master(&self) -> Option<String> {
        self.sentinel.as_deref().and_then(Sentinel::master_addr)
    }

    /// With a sentinel, how many times its master was forgotten (0 without).
    fn master_epoch(&self) -> u64 {
        self.sentinel.as_deref().map_or(0, Sentinel::epoch)
    }

    /// A new connection, opened within `left` (and by `deadline`).
    fn connect(&self, left: Duration, deadline: Instant) -> ::redis::RedisResult<Connection> {
        match &self.sentinel {
            Some(sentinel) => sentinel.connect(deadline),
            // Connecting also runs a setup pipeline of two replies, each of
            // which may wait out the read timeout: give each step a third.
            None => self
                .client
                .get_connection_with_timeout((left / 3).max(MIN_IO)),
        }
    }

    /// With a sentinel: after a connection error or a `READONLY` reply the
    /// master may have moved, so forget it and the pooled connections to it.
    fn note_error(&self, e: &RedisError) {
        let moved = e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_timeout()
            || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
            || e.kind() == ErrorKind::Server(ServerErrorKind::MasterDown);
        if moved {
            self.forget_master();
        }
    }

    fn forget_master(&self) {
        if let Some(sentinel) = &self.sentinel {
            // Bumps the epoch: the pool drops what it holds on next use.
            sentinel.forget();
        }
    }

    /// `WAIT` for the replicas after a write on `con` (when asked for and
    /// `wrote`): whether enough acknowledged. The wait is capped to three
    /// quarters of the time left, so its reply arrives by `deadline`.
    fn wait_replicas(
        &self,
        con: &mut Con,
        deadline: Instant,
        wrote: bool,
    ) -> ::redis::RedisResult<bool> {
        if !self.replicas.enabled() || !wrote {
            return Ok(true);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        // WAIT 0 would block forever: never send it.
        let ms = millis_ceil(self.replicas.timeout.min(left * 3 / 4)).max(1);
        con.aimed = None;
        con.con.set_read_timeout(Some(left.max(MIN_IO)))?;
        let acked: u64 = ::redis::cmd("WAIT")
            .arg(self.replicas.min_replicas)
            .arg(ms)
            .query(&mut con.con)?;
        Ok(acked >= u64::from(self.replicas.min_replicas))
    }

    /// A renewal that applied but was not acknowledged is not confirmed.
    fn acked(&self, renewed: Result<Renewed>, acked: bool) -> Result<Renewed> {
        match renewed {
            Ok(Renewed::Yes) if !acked => Err(Error::Backend(format!(
                "Redis at {}: renewal applied but not confirmed: fewer than {} replica(s) \
                 acknowledged it within {:?} (min_replicas)",
                self.addr, self.replicas.min_replicas, self.replicas.timeout
            ))),
            other => other,
        }
    }

    /// After a beat's replies: notes a `READONLY` (the master moved) and
    /// waits for the replicas if any renewal applied.
    fn after_beat(&self, con: &mut Con, deadline: Instant, renewals: &[Value]) -> Result<bool> {
        let readonly = |v: &Value| matches!(v, Value::ServerError(e) if e.code() == "READONLY");
        if renewals.iter().any(readonly) {
            self.forget_master();
        }
        let wrote = renewals.iter().any(|v| *v == Value::Int(1));
        let acked = self
            .wait_replicas(con, deadline, wrote)
            .map_err(|e| self.map_err(e))?;
        // A WAIT that fails with a sentinel may mean the master moved:
        // look again, so the next tick writes where the replicas are.
        if !acked {
            self.forget_master();
        }
        Ok(acked)
    }

    /// An acquire that was not acknowledged in time: undone (deleted by its
    /// token, best effort), and reported as an error, not a refusal.
    fn unreplicated_acquire(&self, lease: &Lease) -> Error {
        let undone = match self.release(lease) {
            Ok(true) => "released it",
            Ok(false) => "it is gone already",
            Err(_) => "could not release it (it expires with its ttl)",
        };
        // With a sentinel the master may have moved: look again.
        self.forget_master();
        Error::Backend(format!(
            "Redis at {}: acquired {:?} but not confirmed: fewer than {} replica(s) \
             acknowledged it within {:?} (min_replicas); {undone}",
            self.addr,
            lease.key(),
            self.replicas.min_replicas,
            self.replicas.timeout
        ))
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
        assert_eq!(r.info_key("job"), "ns:info:{job}");
        assert_eq!(r.raised_channel("stop"), "ns:raised:{stop}");
        assert_eq!(r.released_channel("job"), "ns:released:{job}");
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
    fn scan_patterns_are_escaped() {
        assert_eq!(
            glob_escape("ns:lease:{a*b?[c]\\"),
            "ns:lease:{a\\*b\\?\\[c\\]\\\\"
        );
    }

    #[test]
    fn descriptions_are_read_from_the_lease_value() {
        let value = b"0123456789abcdef0123456789abcdef 3000 7 1000000 500 h:1 ruby";
        // 2,500 ms left of 3,000 at 1,002,000: renewed at 1,001,500.
        let info = holder_from(value, Some(Duration::from_millis(2500)), 1_002_000).unwrap();
        assert_eq!(info.label, "h:1 ruby");
        assert_eq!(info.fence, 7);
        assert_eq!(info.ttl, Duration::from_millis(3000));
        assert_eq!(info.heartbeat, Duration::from_millis(500));
        assert_eq!(info.acquired_at, from_unix_millis(1_000_000));
        assert_eq!(info.renewed_at, from_unix_millis(1_001_500));
        // Never after the read, nor before the acquire.
        let long = holder_from(value, Some(Duration::from_millis(9000)), 1_002_000).unwrap();
        assert_eq!(long.renewed_at, from_unix_millis(1_002_000));
        let early = holder_from(value, Some(Duration::ZERO), 1_002_000).unwrap();
        assert_eq!(early.renewed_at, from_unix_millis(1_000_000));
        assert_eq!(
            holder_from(value, None, 1_002_000).unwrap().renewed_at,
            info.acquired_at
        );
        // A bare token, or anything else, describes nobody.
        assert!(holder_from(b"sometoken", Some(Duration::ZERO), 0).is_none());
        assert!(holder_from(b"tok 1 2 x 4 label", None, 0).is_none());
        assert!(holder_from(b"tok 1 2 3 4", None, 0).is_none());
        assert!(holder_from(b"tok 1 2 3 4 ", None, 0).is_some());
    }

    /// The short path writes the clock's fence as TIME's two parts joined
    /// (microseconds padded to 6 digits): the same number the clock gave,
    /// in the reply, the counter and the description, whatever the digits.
    #[test]
    fn clock_fences_are_written_as_the_server_clock_said() {
        let server = mistri_locks_testkit::RedisServer::start();
        let mut con = Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let script = Script::new(ACQUIRE_LUA);
        let keys = ["t:lease:{k}", "t:fence:{k}", "t:slots:{k}", "t:queue:{k}"];
        let time_us = |con: &mut Connection| -> u64 {
            let (s, us): (u64, u64) = ::redis::cmd("TIME").query(con).unwrap();
            s * 1_000_000 + us
        };
        // Until a reading in the first tenth of a second (fewer than 6
        // microsecond digits) and one after it were seen: within ~1 s.
        let (mut short, mut long) = (0, 0);
        let start = std::time::Instant::now();
        while short == 0 || long < 50 {
            assert!(start.elapsed() < Duration::from_secs(20), "{short} {long}");
            let before = time_us(&mut con);
            let fence: u64 = script
                .key(&keys[..])
                .key("t:queued:{k}")
                .arg("tok")
                .arg(5000)
                .arg("a label")
                .arg(250)
                .invoke(&mut con)
                .unwrap();
            let after = time_us(&mut con);
            assert!(
                before <= fence && fence <= after,
                "{before} {fence} {after}"
            );
            if fence % 1_000_000 < 100_000 {
                short += 1;
            } else {
                long += 1;
            }
            let value: String = ::redis::cmd("GET").arg(keys[0]).query(&mut con).unwrap();
            let ms = fence / 1000;
            assert_eq!(value, format!("tok 5000 {fence} {ms} 250 a label"));
            let counter: String = ::redis::cmd("GET").arg(keys[1]).query(&mut con).unwrap();
            assert_eq!(counter, fence.to_string());
            let info = holder_from(value.as_bytes(), None, ms).unwrap();
            assert_eq!((info.fence, info.label.as_str()), (fence, "a label"));
            let _: i64 = ::redis::cmd("DEL").arg(keys[0]).query(&mut con).unwrap();
        }
        // A caller of two keys (an old client) is refused while the lease is
        // held, and the counter does not move.
        let held: u64 = script
            .key(&keys[..4])
            .arg("a")
            .arg(5000)
            .invoke(&mut con)
            .unwrap();
        assert!(held > 0);
        let old: u64 = script
            .key(&keys[..2])
            .arg("b")
            .arg(5000)
            .invoke(&mut con)
            .unwrap();
        assert_eq!(old, 0);
        let counter: String = ::redis::cmd("GET").arg(keys[1]).query(&mut con).unwrap();
        assert_eq!(counter, held.to_string());
        // ...and gets the lease once it is free.
        let _: i64 = ::redis::cmd("DEL").arg(keys[0]).query(&mut con).unwrap();
        let old: u64 = script
            .key(&keys[..2])
            .arg("b")
            .arg(5000)
            .invoke(&mut con)
            .unwrap();
        assert!(old > held);
        let value: String = ::redis::cmd("GET").arg(keys[0]).query(&mut con).unwrap();
        assert_eq!(value, "b");
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
