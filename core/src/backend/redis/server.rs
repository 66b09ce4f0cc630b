//! The single server's (or Sentinel's master's) connections: the pool,
//! deadlines on every call, error mapping, the pipelined beat, key naming,
//! listing, and how a connection is found (one server, or the master a
//! sentinel names) and replica acknowledgement.

use super::io::{self, Peer, MIN_IO};
use super::keys::{key_of, line_channel};
use super::replies::glob_escape;
use super::replies::holder_from;
use super::replies::min_left_ms;
use super::replies::redact;
use super::resp::Resp;
use super::scripts::ACQUIRE_LUA;
use super::scripts::RELEASE_LUA;
use super::scripts::RENEW_LUA;
use super::sentinel::Sentinel;
use super::settings::{check_eviction, check_replicas};
use super::slots;
use super::url::ReplicaAck;
use super::url::DEFAULT_TIMEOUT;
use crate::args::millis_ceil;
use crate::contract::adapter::{Adapter, Lease, Renewal, Renewed};
use crate::contract::info::LeaseInfo;
use crate::contract::push::Registry;
use crate::error::{Error, Result};
use crate::runtime::fork::ForkLocal;
use crate::runtime::pool::IdlePool;
use ::redis::{
    Client, Connection, ConnectionLike, ErrorKind, RedisError, Script, ServerErrorKind, Value,
};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The default key namespace.
pub const DEFAULT_NAMESPACE: &str = "mistri:locks";

/// About how many bytes of a heartbeat batch are built before they are
/// sent (see `beat_on`).
pub(crate) const BEAT_CHUNK: usize = 64 * 1024;

/// A pooled connection and what the hot paths keep with it.
pub(crate) struct Con {
    pub(crate) con: Connection,
    /// The RESP of the command(s) being sent: reused, so an operation
    /// allocates nothing for its arguments.
    pub(crate) buf: Vec<u8>,
    /// The read and write timeout the socket has now (`None`: unknown).
    pub(crate) aimed: Option<Duration>,
    /// The server it goes to, as [`Redis::replicas_seen`] names it (with a
    /// sentinel, the master named when it opened).
    pub(crate) master: String,
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
    pub(crate) client: Client,
    /// `host:port` (or socket path) for messages; never the password.
    pub(crate) addr: String,
    pub(crate) namespace: String,
    pub(crate) timeout: Duration,
    /// Idle connections (one stack: every one goes to the same server),
    /// in the [`Redis::pool_epoch`] they were opened in.
    pub(crate) pool: IdlePool<Con>,
    /// How many times a connection to the server was found dropped (by an
    /// operation, or by the flag listener): the idle connections opened
    /// before are suspect then (a restarted server closed them all), and a
    /// new count empties the pool ([`Redis::pool_epoch`]). Shared with the
    /// listener.
    pub(crate) dropped: Arc<AtomicU64>,
    /// The watchers of this adapter's flag listener (one per process).
    pub(crate) push: ForkLocal<Arc<Registry>>,
    pub(crate) acquire: Script,
    pub(crate) renew: Script,
    pub(crate) release: Script,
    /// `redis+sentinel://`: how the master is found (then `client` is
    /// unused). Shared with the flag listener, which follows failovers.
    pub(crate) sentinel: Option<Arc<Sentinel>>,
    /// Opt-in `WAIT` after acquire and renewals.
    pub(crate) replicas: ReplicaAck,
    /// The URL's `eviction=accept`: run on a server whose memory policy may
    /// evict leases ([`check_eviction`]).
    pub(crate) accept_eviction: bool,
    /// With `min_replicas=all`: the master's address and the most
    /// replicas seen connected to it (by a new connection's check or a
    /// `WAIT`'s reply); each `WAIT` asks for them all. It never falls while
    /// the master stays: in a `SENTINEL FAILOVER` the replica being promoted
    /// leaves the old master first, and a connection made then saw one
    /// replica fewer, so a `WAIT` met by the replica that is not promoted
    /// counted as all (the long Sentinel soak: 19 overlaps on the N-holder
    /// key in one failover). A replica that really left makes the `WAIT`
    /// fall short, and the holds are told.
    pub(crate) replicas_seen: ForkLocal<Mutex<(String, u32)>>,
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
        crate::args::check_namespace(namespace)?;
        crate::args::check_duration("timeout", timeout)?;
        super::url::check_plain(url)?;
        if url.starts_with("rediss://") {
            // rustls needs a process-wide crypto provider; another library
            // may have installed one already, which is just as good.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = Client::open(url).map_err(|e| {
            let why = redact(&e.to_string(), url);
            Error::Config(format!(
                "cannot use Redis URL: {}",
                super::url::url_problem(url, &why)
            ))
        })?;
        let addr = client.get_connection_info().addr().to_string();
        Ok(Redis {
            client,
            addr,
            namespace: namespace.to_owned(),
            timeout,
            pool: IdlePool::default(),
            dropped: Arc::new(AtomicU64::new(0)),
            push: crate::contract::push::fork_local_registry(),
            acquire: Script::new(ACQUIRE_LUA),
            renew: Script::new(RENEW_LUA),
            release: Script::new(RELEASE_LUA),
            sentinel: None,
            replicas: ReplicaAck::default(),
            accept_eviction: false,
            replicas_seen: ForkLocal::new(Mutex::new((String::new(), 0)), |_| {
                Mutex::new((String::new(), 0))
            }),
        })
    }

    /// The key namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The Redis key of the lease on `key`.
    pub fn lease_key(&self, key: &str) -> String {
        key_of(&self.namespace, "lease", key)
    }

    /// The Redis key of the fencing counter of `key`.
    pub fn fence_key(&self, key: &str) -> String {
        key_of(&self.namespace, "fence", key)
    }

    /// The Redis key of the flag `key`.
    pub fn flag_key(&self, key: &str) -> String {
        key_of(&self.namespace, "flag", key)
    }

    /// The pub/sub channel on which raising the flag `key` is announced.
    pub fn raised_channel(&self, key: &str) -> String {
        key_of(&self.namespace, "raised", key)
    }

    /// The pub/sub channel on which releases of the lease on `key` were
    /// announced to every listener before per-line announcements (kept for
    /// the protocol document; nothing new publishes on it).
    pub fn released_channel(&self, key: &str) -> String {
        key_of(&self.namespace, "released", key)
    }

    /// The prefix of the channels on which a release of `key` is announced
    /// to the next waiting line: `{ns}:next:{KEY}:` followed by the line's
    /// id.
    pub fn line_channel_prefix(&self, key: &str) -> String {
        line_channel(&self.namespace, key, "")
    }

    /// The Redis key of the holder description of the lease on `key`.
    pub fn info_key(&self, key: &str) -> String {
        key_of(&self.namespace, "info", key)
    }

    /// The connect/read/write timeout: every operation's wall-clock bound.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A pooled connection, or a new one connected within `deadline`.
    pub(crate) fn checkout(&self, deadline: Instant) -> Result<Con> {
        if let Some(sentinel) = &self.sentinel {
            sentinel.check_if_due(deadline);
        }
        // A new epoch (the sentinels' master was forgotten, or a connection
        // found dropped, since these opened) empties the pool.
        if let Some(con) = self.pool.take("", self.pool_epoch()) {
            return Ok(con);
        }
        // Connecting also runs a setup pipeline of two replies, each of
        // which may wait out the read timeout: give each step a third.
        let left = self.left(deadline)?;
        let (con, master) = self.connect(left, deadline).map_err(|e| self.map_err(e))?;
        Ok(Con {
            con,
            buf: Vec::new(),
            aimed: None,
            master,
        })
    }

    /// Puts back a connection checked out when [`Redis::pool_epoch`]
    /// was `epoch` (one of an earlier epoch is dropped).
    pub(crate) fn checkin(&self, mut con: Con, epoch: u64) {
        // Keep only a small buffer pooled. A beat's stays under this (it is
        // sent every BEAT_CHUNK bytes), so it is not allocated again.
        if con.buf.capacity() > 2 * BEAT_CHUNK {
            con.buf = Vec::new();
        }
        if con.con.is_open() && epoch == self.pool_epoch() {
            self.pool.put("", epoch, con);
        }
    }

    /// Who this adapter's errors are about.
    pub(crate) fn peer(&self) -> Peer<'_> {
        Peer {
            addr: &self.addr,
            cluster: false,
        }
    }

    /// Time left until `deadline`, or the error that says there is none.
    pub(crate) fn left(&self, deadline: Instant) -> Result<Duration> {
        io::left(deadline, self.peer())
    }

    /// Points both socket timeouts at `deadline`. A socket already aimed
    /// within a millisecond of it is left alone (most operations start with
    /// the full timeout left, as the one before did): no system call.
    pub(crate) fn aim(&self, con: &mut Con, deadline: Instant) -> Result<()> {
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
    pub(crate) fn with_con<T>(
        &self,
        f: impl FnOnce(&mut Con, Instant) -> ::redis::RedisResult<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + self.timeout;
        self.attempt(deadline, f)?.map_err(|e| self.map_err(e))
    }

    /// [`Redis::with_con`] ending by `by` if that comes before the
    /// timeout: connecting, sending and reading all end then, and a
    /// connection that timed out is dropped (a late reply must never be
    /// read as the next command's). Used by the hold's release: host
    /// signals are held off each try ([`crate::runtime::eintr`]); a read
    /// still interrupted (EINTR after `SIGSTOP`/`SIGCONT`) drops the
    /// connection and tries again on a fresh one by the same deadline. `f`
    /// is a compare-and-delete: a retry after a delete whose answer was
    /// interrupted finds nothing and says so.
    pub(crate) fn with_con_by<T>(
        &self,
        by: Option<Instant>,
        f: impl Fn(&mut Con, Instant) -> ::redis::RedisResult<T>,
    ) -> Result<T> {
        let mut deadline = Instant::now() + self.timeout;
        if let Some(by) = by {
            deadline = deadline.min(by);
        }
        // `f` is idempotent: sent again (fresh connection) if interrupted.
        crate::runtime::eintr::retry(deadline, || {
            (self.attempt(deadline, &f).map_err(io::Failed::Setup)?).map_err(io::Failed::Reply)
        })
        .map_err(|e| match e {
            io::Failed::Setup(e) => e,
            io::Failed::Reply(e) => self.map_err(e),
        })
    }

    /// One try of `f` on a pooled connection aimed at `deadline`: the
    /// connection goes back to the pool only if `f` succeeded.
    fn attempt<T>(
        &self,
        deadline: Instant,
        f: impl FnOnce(&mut Con, Instant) -> ::redis::RedisResult<T>,
    ) -> Result<::redis::RedisResult<T>> {
        let _held = crate::runtime::eintr::HostSignalsHeld::new();
        let epoch = self.pool_epoch();
        let mut con = self.checkout(deadline)?;
        self.aim(&mut con, deadline)?;
        let done = f(&mut con, deadline);
        if done.is_ok() {
            self.checkin(con, epoch);
        }
        Ok(done)
    }

    /// Runs `script` with EVALSHA, falling back to EVAL (which also caches
    /// it) after a server restart or SCRIPT FLUSH, each step bounded by
    /// `deadline`. `args` writes the `keys` keys and `argc` arguments.
    pub(crate) fn eval_with(
        &self,
        con: &mut Con,
        deadline: Instant,
        script: &Script,
        source: &str,
        (keys, argc): (usize, usize),
        args: impl Fn(&mut Resp<'_>),
    ) -> ::redis::RedisResult<Value> {
        self.eval_reading(con, deadline, script, source, (keys, argc), args, None)
            .map(|(reply, _)| reply)
    }

    /// [`Redis::eval_with`], then `EXISTS` of the flag `flag` in the same
    /// round trip (pipelined: read after the script ran), its reply second
    /// (`None` without a flag).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn eval_reading(
        &self,
        con: &mut Con,
        deadline: Instant,
        script: &Script,
        source: &str,
        (keys, argc): (usize, usize),
        args: impl Fn(&mut Resp<'_>),
        flag: Option<&str>,
    ) -> ::redis::RedisResult<(Value, Option<Value>)> {
        let send = |con: &mut Con, source: Option<&str>| {
            con.buf.clear();
            let mut w = Resp::new(&mut con.buf);
            w.eval(script.get_hash(), source, keys, argc);
            args(&mut w);
            let Some(flag) = flag else {
                return con.con.req_packed_command(&con.buf).map(|v| (v, None));
            };
            w.command(2)
                .bulk(b"EXISTS")
                .key(&self.namespace, "flag", flag);
            con.con.send_packed_command(&con.buf)?;
            let reply = con.con.recv_response()?;
            let up = con.con.recv_response()?;
            Ok((reply, Some(up)))
        };
        match send(con, None)? {
            (Value::ServerError(e), _) if e.code() == "NOSCRIPT" => {
                if let Some(left) = deadline.checked_duration_since(Instant::now()) {
                    con.aimed = None;
                    con.con.set_read_timeout(Some(left.max(MIN_IO)))?;
                }
                let (reply, up) = send(con, Some(source))?;
                Ok((reply.extract_error()?, up))
            }
            (reply, up) => Ok((reply.extract_error()?, up)),
        }
    }

    /// [`Redis::eval_with`] of string keys and arguments (the N-holder
    /// scripts), its reply converted to `T`.
    pub(crate) fn eval<T: ::redis::FromRedisValue>(
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

    pub(crate) fn map_err(&self, e: RedisError) -> Error {
        self.note_error(&e);
        io::error(&e, self.peer())
    }

    /// One tick on one connection: everything sent at once, each reply
    /// read with the time left until `deadline` (so a stalled server costs
    /// the tick's budget once, not once per reply). Returns the raw reply
    /// of each item and, last, `TIME`'s, or the I/O error that ended the
    /// tick; the caller drops the connection after an error.
    pub(crate) fn beat_on(
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
        // The server's clock, read within the beat's round trip (the
        // engine watches it for steps): the last reply.
        Resp::new(&mut con.buf).command(1).bulk(b"TIME");
        flush(con, true)?;
        let count = renewals.len() + flags.len() + 1;
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
    pub(crate) fn info_on(
        &self,
        con: &mut Con,
        key: &str,
    ) -> ::redis::RedisResult<Option<LeaseInfo>> {
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

/// Scale-out: how a connection is found (one server, or the master a
/// sentinel names), what an error means for that choice, and replica
/// acknowledgement (`WAIT`). See `docs/SCALE-OUT.md`.
impl Redis {
    /// A [`Redis`] whose master is found through `sentinel` (the
    /// `redis+sentinel://` form of [`crate::open`]).
    pub(crate) fn open_sentinel(
        sentinel: Sentinel,
        namespace: &str,
        replicas: ReplicaAck,
    ) -> Result<Self> {
        // `client` is never used with a sentinel; any parsable URL will do.
        let mut redis = Self::with_timeout("redis://127.0.0.1/", namespace, DEFAULT_TIMEOUT)?;
        redis.addr = sentinel.describe();
        redis.sentinel = Some(Arc::new(sentinel));
        Ok(redis
            .replicated(replicas)
            .accepting_eviction(replicas.accept_eviction))
    }

    /// This adapter on a server whose `maxmemory-policy` may evict keys
    /// with a TTL (the URL's `eviction=accept`): every new connection then
    /// skips [`check_eviction`]. What it costs: an evicted lease is free
    /// for the next acquire while its holder is told only at its next
    /// renewal (`docs/RELIABILITY.md`, "Settings and promises").
    pub fn accepting_eviction(mut self, accept: bool) -> Self {
        self.accept_eviction = accept;
        self
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

    /// Who this adapter talks to, for messages: the address, and with a
    /// sentinel the master it names now first (`HOST:PORT (service …)`).
    pub(crate) fn master_named(&self) -> String {
        match self.sentinel_master() {
            Some(master) => format!("{master} ({})", self.addr),
            None => self.addr.clone(),
        }
    }

    /// The epoch of the pool's connections: the sentinels' master
    /// forgotten, or a connection found dropped ([`Redis::dropped`]),
    /// starts a new one (both counts only rise, so their sum does).
    pub(crate) fn pool_epoch(&self) -> u64 {
        self.master_epoch()
            .wrapping_add(self.dropped.load(Ordering::SeqCst))
    }

    /// With a sentinel, how many times its master was forgotten (0 without).
    pub(crate) fn master_epoch(&self) -> u64 {
        self.sentinel.as_deref().map_or(0, Sentinel::epoch)
    }

    /// A new connection, opened within `left` (and by `deadline`), and the
    /// server it goes to (with a sentinel, `MASTER (SENTINEL)`).
    pub(crate) fn connect(
        &self,
        left: Duration,
        deadline: Instant,
    ) -> ::redis::RedisResult<(Connection, String)> {
        let (mut con, addr) = match &self.sentinel {
            // Messages name the master it went to, and the sentinel.
            Some(sentinel) => {
                let (con, master) = sentinel.connect(deadline)?;
                (con, format!("{master} ({})", self.addr))
            }
            // Connecting also runs a setup pipeline of two replies, each of
            // which may wait out the read timeout: give each step a third.
            None => (
                self.client
                    .get_connection_with_timeout((left / 3).max(MIN_IO))?,
                self.addr.clone(),
            ),
        };
        if !self.accept_eviction {
            // Every new connection (at connect, after every reconnect, and
            // to each new master after a Sentinel switch) reads the policy.
            check_eviction(&mut con, &addr)?;
        }
        if let Some(n) = check_replicas(&mut con, &addr, self.replicas)? {
            let mut seen = self.replicas_seen.get().lock();
            if seen.0 == addr {
                seen.1 = seen.1.max(n);
            } else {
                *seen = (addr.clone(), n);
            }
        }
        Ok((con, addr))
    }

    /// With a sentinel: after a connection error or a `READONLY` reply the
    /// master may have moved, so forget it and the pooled connections to it.
    pub(crate) fn note_error(&self, e: &RedisError) {
        if io::is_dropped(e) {
            self.dropped.fetch_add(1, Ordering::SeqCst);
        }
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

    pub(crate) fn forget_master(&self) {
        if let Some(sentinel) = &self.sentinel {
            // Bumps the epoch: the pool drops what it holds on next use.
            sentinel.forget();
        }
    }

    /// `WAIT` for the replicas after a write on `con` (when asked for and
    /// `wrote`): whether enough acknowledged. The wait is capped to three
    /// quarters of the time left, so its reply arrives by `deadline`.
    pub(crate) fn wait_replicas(
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
        let (connected, same_master) = {
            let seen = self.replicas_seen.get().lock();
            (seen.1, seen.0 == con.master)
        };
        if !same_master {
            // A connection to a master other than the newest one seen (a
            // Sentinel switch since it opened; the old master may still take
            // writes until it is demoted, and then drops them): its count of
            // replicas is not known, and a write there is not confirmed.
            return Ok(false);
        }
        let wanted = self.replicas.wanted(connected);
        let acked: u64 = ::redis::cmd("WAIT")
            .arg(wanted)
            .arg(ms)
            .query(&mut con.con)?;
        if acked > u64::from(connected) {
            // More replicas than seen so far (one came back): all of them.
            let mut seen = self.replicas_seen.get().lock();
            seen.1 = seen.1.max(u32::try_from(acked).unwrap_or(u32::MAX));
        }
        Ok(acked >= u64::from(wanted))
    }

    /// A renewal that applied but was not acknowledged is not confirmed.
    pub(crate) fn acked(&self, renewed: Result<Renewed>, acked: bool) -> Result<Renewed> {
        match renewed {
            Ok(Renewed::Yes) if !acked => Err(Error::Backend(format!(
                "Redis at {}: renewal applied but not confirmed: fewer than {} replica(s) \
                 acknowledged it within {:?} (min_replicas)",
                self.addr,
                self.replicas.describe(),
                self.replicas.timeout
            ))),
            other => other,
        }
    }

    /// After a beat's replies: notes a `READONLY` (the master moved) and
    /// waits for the replicas if any renewal applied.
    pub(crate) fn after_beat(
        &self,
        con: &mut Con,
        deadline: Instant,
        renewals: &[Value],
    ) -> Result<bool> {
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
    pub(crate) fn unreplicated_acquire(&self, lease: &Lease) -> Error {
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
            self.replicas.describe(),
            self.replicas.timeout
        ))
    }
}
