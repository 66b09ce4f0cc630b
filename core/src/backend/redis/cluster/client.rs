//! The cluster's nodes: connections per master, routing each item of a
//! batch to its slot's owner, following MOVED and ASK, reloading the map,
//! replica acknowledgement; what a node's error means.

use super::map::slot_map_from;
use super::map::slot_of;
use super::map::Redirect;
use super::map::Route;
use super::map::SlotMap;
use crate::args::millis_ceil;
use crate::backend::redis::io::{self, Peer, MIN_IO};
use crate::backend::redis::keys::key_of;
use crate::backend::redis::replies::{holder_from, min_left_ms};
use crate::backend::redis::scripts::{ACQUIRE_LUA, RELEASE_LUA, RENEW_LUA};
use crate::backend::redis::slots::{self as slot, SCRIPTS as SLOT_SCRIPTS};
use crate::backend::redis::url::DEFAULT_TIMEOUT;
use crate::backend::redis::url::{ReplicaAck, UrlParts};
use crate::contract::adapter::Renewal;
use crate::contract::info::LeaseInfo;
use crate::contract::push::Registry;
use crate::error::{Error, Result};
use crate::runtime::fork::ForkLocal;
use crate::runtime::pool::IdlePool;
use ::redis::{Client, Cmd, Connection, ConnectionLike, RedisError, Script, Value};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rounds of redirections one batch follows before giving up on an item.
pub const MAX_ROUNDS: usize = 5;

/// The lease's time left, its value (token and holder description) and
/// the server's clock in one atomic read (a cluster has no cross-node
/// `MULTI`, and one script is one round trip).
pub(crate) const INFO_LUA: &str = "\
return {redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[1]), redis.call('TIME')}";

/// `KEYS[1]` flag; `ARGV[1]` ttl in ms, `ARGV[2]` its channel. Raises the
/// flag, then announces it by sharded pub/sub on the flag's slot owner
/// (`SPUBLISH`, so the message stays on that shard instead of crossing the
/// cluster bus to every node), in one script so the message never goes out
/// from a node that redirected the `SET`. By `pcall`: on a Redis without
/// `SPUBLISH` (< 7) the flag is still raised, and watchers see it at their
/// next tick.
pub(crate) const RAISE_LUA: &str = "\
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
redis.pcall('SPUBLISH', ARGV[2], '1')
return 1";

pub(crate) struct State {
    pub(crate) map: SlotMap,
    pub(crate) clients: HashMap<String, Client>,
    /// With `min_replicas=all`: per node, the most replicas seen connected
    /// to it (a new connection's check, a `WAIT`'s reply), never lowered.
    pub(crate) replicas_connected: HashMap<String, u32>,
}

impl State {
    pub(crate) fn for_child(parent: &Mutex<State>) -> Mutex<State> {
        // Keep the parent's map if it can be had without blocking (the
        // idle sockets are in `RedisCluster::idle`).
        let map = parent
            .try_lock()
            .map(|s| s.map.clone())
            .unwrap_or_else(SlotMap::empty);
        Mutex::new(State {
            map,
            clients: HashMap::new(),
            replicas_connected: HashMap::new(),
        })
    }
}

/// One command of a batch.
#[derive(Clone)]
pub(crate) struct Op {
    pub(crate) slot: u16,
    pub(crate) cmd: Cmd,
    /// The `EVAL` form to send after a `NOSCRIPT`.
    pub(crate) eval: Option<Cmd>,
    /// A write that replica acknowledgement must cover.
    pub(crate) write: bool,
}

/// An item in flight: its op's index, where it goes, and whether to send
/// it as `EVAL`.
pub(crate) type Pending = (usize, Route, bool);

/// One item's answer: the reply and whether enough replicas acknowledged
/// the pipeline it was in (true when not asked for).
pub(crate) type Answer = Result<(Value, bool)>;

/// A Redis Cluster backend (`redis+cluster://h1:p1,h2:p2`). Cheap to share:
/// wrap it in [`crate::Locks`] once and clone that.
///
/// # Examples
/// ```no_run
/// use mistri_locks::Locks;
/// let locks = Locks::redis("redis+cluster://10.0.0.1:7000,10.0.0.2:7000", "mistri:locks")?;
/// # Ok::<(), mistri_locks::Error>(())
/// ```
pub struct RedisCluster {
    pub(crate) parts: UrlParts,
    pub(crate) namespace: String,
    pub(crate) timeout: Duration,
    pub(crate) replicas: ReplicaAck,
    pub(crate) state: ForkLocal<Mutex<State>>,
    /// Idle connections per node address.
    pub(crate) idle: IdlePool<Connection>,
    pub(crate) acquire: Script,
    pub(crate) renew: Script,
    pub(crate) release: Script,
    pub(crate) raise: Script,
    /// The masters of the last slot map, shared with the flag listener.
    pub(crate) known: ForkLocal<Arc<Mutex<Vec<String>>>>,
    /// The watchers of this adapter's flag listener (one per process).
    pub(crate) push: ForkLocal<Arc<Registry>>,
    /// The beats' per-master server clocks ([`super::clock`]).
    pub(crate) clock: ForkLocal<Mutex<super::clock::ClusterClock>>,
}

impl RedisCluster {
    /// An adapter for the cluster whose seed nodes `parts` lists. Connects
    /// lazily: the first operation loads the slot map.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad namespace; [`Error::Config`]
    /// for a database other than 0 (a cluster has only one).
    pub(crate) fn open(parts: UrlParts, namespace: &str, replicas: ReplicaAck) -> Result<Self> {
        // The namespace rules (and the rustls provider) are Redis's.
        crate::backend::redis::server::Redis::with_timeout(
            "redis://127.0.0.1/",
            namespace,
            DEFAULT_TIMEOUT,
        )?;
        if parts.path.iter().any(|db| db != "0") {
            return Err(Error::Config(
                "cannot use Redis URL: a Redis Cluster has only database 0".into(),
            ));
        }
        if parts.base == "rediss" {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        Ok(RedisCluster {
            parts,
            namespace: namespace.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            replicas,
            state: ForkLocal::new(
                Mutex::new(State {
                    map: SlotMap::empty(),
                    clients: HashMap::new(),
                    replicas_connected: HashMap::new(),
                }),
                State::for_child,
            ),
            idle: IdlePool::default(),
            acquire: Script::new(ACQUIRE_LUA),
            renew: Script::new(RENEW_LUA),
            release: Script::new(RELEASE_LUA),
            raise: Script::new(RAISE_LUA),
            known: ForkLocal::new(Arc::default(), |_| Arc::default()),
            push: crate::contract::push::fork_local_registry(),
            clock: ForkLocal::new(Mutex::new(Default::default()), |_| {
                Mutex::new(Default::default())
            }),
        })
    }

    pub(crate) fn key(&self, kind: &str, key: &str) -> String {
        key_of(&self.namespace, kind, key)
    }

    /// The replica acknowledgement asked for.
    pub fn replica_ack(&self) -> ReplicaAck {
        self.replicas
    }

    /// The masters of the last slot map (loading it if needed).
    ///
    /// # Errors
    /// [`Error::Connection`] when no node answers `CLUSTER SLOTS`.
    pub fn masters(&self) -> Result<Vec<String>> {
        let deadline = Instant::now() + self.timeout;
        self.refresh_if_stale(deadline)?;
        Ok(self.state.get().lock().map.masters())
    }

    pub(crate) fn seeds(&self) -> String {
        self.parts.hosts.join(",")
    }

    // ------------------------------------------------------ connections

    pub(crate) fn client(&self, addr: &str) -> Result<Client> {
        if let Some(c) = self.state.get().lock().clients.get(addr) {
            return Ok(c.clone());
        }
        let url = self
            .parts
            .node_url(addr, None, self.parts.userinfo.as_deref());
        let client = Client::open(url)
            .map_err(|e| Error::Config(format!("cannot use cluster node address {addr}: {e}")))?;
        self.state
            .get()
            .lock()
            .clients
            .insert(addr.to_owned(), client.clone());
        Ok(client)
    }

    pub(crate) fn checkout(&self, addr: &str, deadline: Instant) -> Result<Connection> {
        if let Some(con) = self.idle.take(addr, 0) {
            return Ok(con);
        }
        let left = left(deadline, addr)?;
        let mut con = self
            .client(addr)?
            .get_connection_with_timeout((left / 3).max(MIN_IO))
            .map_err(|e| map_err(e, addr))?;
        if !self.replicas.accept_eviction {
            // Every new connection to every node the operations reach
            // (each master) reads its memory policy.
            crate::backend::redis::settings::check_eviction(&mut con, addr)
                .map_err(|e| map_err(e, addr))?;
        }
        // Each master's replica count, as on one server (a replica node
        // reached as a seed has none connected, and passes).
        if let Some(n) =
            crate::backend::redis::settings::check_replicas(&mut con, addr, self.replicas)
                .map_err(|e| map_err(e, addr))?
        {
            // The most seen on this master, never lowered (as on one
            // server: `Redis::replicas_seen`).
            let mut state = self.state.get().lock();
            let seen = state.replicas_connected.entry(addr.to_owned()).or_insert(0);
            *seen = (*seen).max(n);
        }
        Ok(con)
    }

    pub(crate) fn checkin(&self, addr: &str, con: Connection) {
        if con.is_open() {
            self.idle.put(addr, 0, con);
        }
    }

    /// Something about `addr` failed: the topology may have changed.
    pub(crate) fn suspect(&self) {
        self.state.get().lock().map.stale = true;
    }

    // --------------------------------------------------------- slot map

    pub(crate) fn refresh_if_stale(&self, deadline: Instant) -> Result<()> {
        let (stale, known) = {
            let state = self.state.get().lock();
            (state.map.stale, state.map.masters())
        };
        if !stale {
            return Ok(());
        }
        // Known masters first (they know the newest map), then the seeds.
        let mut candidates = known;
        for seed in &self.parts.hosts {
            if !candidates.contains(seed) {
                candidates.push(seed.clone());
            }
        }
        let mut why = Vec::new();
        for (i, addr) in candidates.iter().enumerate() {
            let share = left(deadline, addr)? / u32::try_from(candidates.len() - i).unwrap_or(1);
            match self.slots_from(addr, Instant::now() + share.max(MIN_IO)) {
                Ok(map) => {
                    let masters = map.masters();
                    self.state.get().lock().map = map;
                    *self.known.get().lock() = masters;
                    return Ok(());
                }
                Err(e) => why.push(e.to_string()),
            }
        }
        Err(Error::Connection(format!(
            "no Redis Cluster node answered CLUSTER SLOTS (seeds {}): {}",
            self.seeds(),
            why.join("; ")
        )))
    }

    pub(crate) fn slots_from(&self, addr: &str, deadline: Instant) -> Result<SlotMap> {
        let mut con = self.checkout(addr, deadline)?;
        aim(&con, deadline, addr)?;
        let reply: Value = ::redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut con)
            .map_err(|e| map_err(e, addr))?;
        self.checkin(addr, con);
        slot_map_from(reply, addr)
    }

    // ----------------------------------------------------------- batches

    /// Runs `ops` by `deadline`: one pipeline per node per round, redirected
    /// items again in the next round. One answer per op, in order.
    pub(crate) fn run(&self, ops: &[Op], deadline: Instant) -> Vec<Answer> {
        let _held = crate::runtime::eintr::HostSignalsHeld::new(); // no EINTR on a host thread
        let mut answers: Vec<Option<Answer>> = vec![None; ops.len()];
        let mut pending: Vec<Pending> = (0..ops.len()).map(|i| (i, Route::Slot, false)).collect();
        let mut last_reply: HashMap<usize, Value> = HashMap::new();
        for _round in 0..MAX_ROUNDS {
            if pending.is_empty() {
                break;
            }
            if let Err(e) = self.refresh_if_stale(deadline) {
                // Without a map, items routed by slot have nowhere to go;
                // redirected ones still do.
                if self.state.get().lock().map.masters().is_empty() {
                    for (i, _, _) in pending.drain(..) {
                        answers[i] = Some(Err(e.clone()));
                    }
                    break;
                }
            }
            // Group by node, in first-seen order.
            let mut groups: Vec<(String, Vec<Pending>)> = Vec::new();
            {
                let state = self.state.get().lock();
                for (i, route, eval) in pending.drain(..) {
                    let addr = match &route {
                        Route::Slot => state
                            .map
                            .node_of(ops[i].slot)
                            .map(str::to_owned)
                            .or_else(|| state.map.masters().first().cloned()),
                        Route::Moved(a) | Route::Ask(a) => Some(a.clone()),
                    };
                    let Some(addr) = addr else {
                        answers[i] = Some(Err(Error::Connection(format!(
                            "no Redis Cluster node serves slot {}",
                            ops[i].slot
                        ))));
                        continue;
                    };
                    match groups.iter_mut().find(|(a, _)| *a == addr) {
                        Some((_, items)) => items.push((i, route, eval)),
                        None => groups.push((addr, vec![(i, route, eval)])),
                    }
                }
            }
            // Send every node's pipeline, then read them all.
            let mut sent = Vec::new();
            for (addr, items) in groups {
                match self.send_group(&addr, ops, &items, deadline) {
                    Ok((con, waits)) => sent.push((addr, items, con, waits)),
                    Err(e) => {
                        self.suspect();
                        for (i, _, _) in items {
                            answers[i] = Some(Err(e.clone()));
                        }
                    }
                }
            }
            for (addr, items, mut con, waits) in sent {
                match self.read_group(&mut con, &addr, &items, waits, deadline) {
                    Ok((replies, acked)) => {
                        self.checkin(&addr, con);
                        for ((i, route, eval), reply) in items.into_iter().zip(replies) {
                            match self.next_route(&reply, &route) {
                                Some(Redirect::To(next)) => pending.push((i, next, eval)),
                                Some(Redirect::AsEval) => pending.push((i, route, true)),
                                None => {
                                    answers[i] = Some(Ok((reply, acked || !ops[i].write)));
                                    continue;
                                }
                            }
                            last_reply.insert(i, reply);
                        }
                    }
                    Err(e) => {
                        // `con` is dropped: late replies must never be read
                        // as another batch's.
                        self.suspect();
                        for (i, _, _) in items {
                            answers[i] = Some(Err(e.clone()));
                        }
                    }
                }
            }
        }
        for (i, _, _) in pending {
            // Still redirected after the last round: its last reply says why.
            let reply = last_reply.remove(&i).unwrap_or(Value::Nil);
            answers[i] = Some(Ok((reply, false)));
        }
        answers
            .into_iter()
            .map(|a| {
                a.unwrap_or_else(|| {
                    Err(Error::Connection(
                        "Redis Cluster did not answer in time (deadline passed)".into(),
                    ))
                })
            })
            .collect()
    }

    /// Sends one node's pipeline: `ASKING` before each asked item, a `WAIT`
    /// at the end if a write is in it and acknowledgement is asked for.
    /// Returns the connection and whether a `WAIT` was sent.
    pub(crate) fn send_group(
        &self,
        addr: &str,
        ops: &[Op],
        items: &[Pending],
        deadline: Instant,
    ) -> Result<(Connection, bool)> {
        let mut con = self.checkout(addr, deadline)?;
        let mut pipe = ::redis::pipe();
        for (i, route, eval) in items {
            if matches!(route, Route::Ask(_)) {
                pipe.cmd("ASKING");
            }
            let op = &ops[*i];
            let cmd = match (&op.eval, eval) {
                (Some(e), true) => e,
                _ => &op.cmd,
            };
            pipe.add_command(cmd.clone());
        }
        let waits = self.replicas.enabled() && items.iter().any(|(i, _, _)| ops[*i].write);
        if waits {
            let left = deadline.saturating_duration_since(Instant::now());
            // WAIT 0 would block forever: never send it.
            let ms = millis_ceil(self.replicas.timeout.min(left * 3 / 4)).max(1);
            pipe.cmd("WAIT").arg(self.wanted_replicas(addr)).arg(ms);
        }
        aim(&con, deadline, addr)?;
        con.send_packed_command(&pipe.get_packed_pipeline())
            .map_err(|e| map_err(e, addr))?;
        Ok((con, waits))
    }

    /// How many replicas a `WAIT` on `addr` asks for ([`ReplicaAck::wanted`]).
    fn wanted_replicas(&self, addr: &str) -> u32 {
        let connected = (self.state.get().lock().replicas_connected.get(addr)).copied();
        self.replicas.wanted(connected.unwrap_or(0))
    }

    /// Reads one node's replies, each with the time left until `deadline`.
    pub(crate) fn read_group(
        &self,
        con: &mut Connection,
        addr: &str,
        items: &[Pending],
        waits: bool,
        deadline: Instant,
    ) -> Result<(Vec<Value>, bool)> {
        let mut replies = Vec::with_capacity(items.len());
        let mut aimed_at = Instant::now();
        let mut recv = |con: &mut Connection| -> Result<Value> {
            if aimed_at.elapsed() >= MIN_IO {
                aim(con, deadline, addr)?;
                aimed_at = Instant::now();
            }
            con.recv_response().map_err(|e| map_err(e, addr))
        };
        for (_, route, _) in items {
            if matches!(route, Route::Ask(_)) {
                recv(con)?; // ASKING's +OK
            }
            replies.push(recv(con)?);
        }
        let acked = if waits {
            match recv(con)? {
                Value::Int(n) => {
                    let wanted = self.wanted_replicas(addr);
                    if n > i64::from(wanted) && self.replicas.min_replicas == ReplicaAck::ALL {
                        // `all`, and more replied than seen: all of them.
                        let mut state = self.state.get().lock();
                        let seen = state.replicas_connected.entry(addr.to_owned()).or_insert(0);
                        *seen = (*seen).max(u32::try_from(n).unwrap_or(u32::MAX));
                    }
                    n >= i64::from(wanted)
                }
                _ => false,
            }
        } else {
            true
        };
        Ok((replies, acked))
    }

    /// Where an item goes next, if its reply redirects it.
    pub(crate) fn next_route(&self, reply: &Value, route: &Route) -> Option<Redirect> {
        let Value::ServerError(e) = reply else {
            return None;
        };
        let target = || {
            e.details()
                .and_then(|d| d.split_whitespace().nth(1))
                .map(str::to_owned)
        };
        match e.code() {
            "MOVED" => {
                let addr = target()?;
                if let Some(slot) = e
                    .details()
                    .and_then(|d| d.split_whitespace().next())
                    .and_then(|s| s.parse::<u16>().ok())
                {
                    let mut state = self.state.get().lock();
                    state.map.set(slot, &addr);
                    state.map.stale = true;
                }
                Some(Redirect::To(Route::Moved(addr)))
            }
            "ASK" => Some(Redirect::To(Route::Ask(target()?))),
            "TRYAGAIN" | "CLUSTERDOWN" => {
                self.suspect();
                Some(Redirect::To(Route::Slot))
            }
            "NOSCRIPT" => Some(Redirect::AsEval),
            _ => {
                let _ = route;
                None
            }
        }
    }

    pub(crate) fn one(&self, op: Op) -> Result<(Value, bool)> {
        self.one_by(op, None)
    }

    /// [`RedisCluster::one`] ending by `by` if that comes before the timeout
    /// (connections that time out are dropped, as in every batch).
    pub(crate) fn one_by(&self, op: Op, by: Option<Instant>) -> Result<(Value, bool)> {
        let mut deadline = Instant::now() + self.timeout;
        if let Some(by) = by {
            deadline = deadline.min(by);
        }
        let mut answers = self.run(std::slice::from_ref(&op), deadline);
        answers.pop().unwrap_or_else(|| {
            Err(Error::Backend(
                "Redis Cluster: no answer for the command".into(),
            ))
        })
    }

    /// A plain command's reply, server errors as [`Error::Backend`].
    pub(crate) fn query(&self, op: Op) -> Result<Value> {
        self.query_by(op, None)
    }

    /// [`RedisCluster::query`] ending by `by` if that comes before the timeout.
    pub(crate) fn query_by(&self, op: Op, by: Option<Instant>) -> Result<Value> {
        let (value, _) = self.one_by(op, by)?;
        if let Value::ServerError(e) = &value {
            return Err(Error::Backend(format!(
                "Redis Cluster answered with an error: {e:?}"
            )));
        }
        Ok(value)
    }

    pub(crate) fn script_op(
        &self,
        script: &Script,
        source: &str,
        keys: &[String],
        args: &[String],
    ) -> Op {
        let build = |verb: &str, body: &str| {
            let mut cmd = ::redis::cmd(verb);
            cmd.arg(body).arg(keys.len()).arg(keys).arg(args);
            cmd
        };
        Op {
            slot: slot_of(&keys[0]),
            cmd: build("EVALSHA", script.get_hash()),
            eval: Some(build("EVAL", source)),
            write: false,
        }
    }

    pub(crate) fn plain_op(key: &str, cmd: Cmd) -> Op {
        Op {
            slot: slot_of(key),
            cmd,
            eval: None,
            write: false,
        }
    }

    pub(crate) fn renew_op(&self, r: &Renewal<'_>) -> Op {
        if r.lease.slotted() {
            return self.slot_op(
                &SLOT_SCRIPTS.renew,
                slot::SLOT_RENEW_LUA,
                slot::renew_call(&self.namespace, r),
                true,
            );
        }
        let mut op = self.script_op(
            &self.renew,
            RENEW_LUA,
            &[self.key("lease", r.lease.key())],
            &[
                r.lease.token().to_owned(),
                millis_ceil(r.ttl).to_string(),
                min_left_ms(r.min_left).to_string(),
            ],
        );
        op.write = true;
        op
    }

    pub(crate) fn slot_op(
        &self,
        script: &Script,
        source: &str,
        call: slot::Call,
        write: bool,
    ) -> Op {
        let mut op = self.script_op(script, source, &call.0, &call.1);
        op.write = write;
        op
    }

    pub(crate) fn slot_info_op(&self, key: &str) -> Op {
        self.slot_op(
            &SLOT_SCRIPTS.info,
            slot::SLOT_INFO_LUA,
            slot::info_call(&self.namespace, key),
            false,
        )
    }

    pub(crate) fn info_op(&self, key: &str) -> Op {
        let lease = self.key("lease", key);
        let mut cmd = ::redis::cmd("EVAL");
        cmd.arg(INFO_LUA).arg(1).arg(&lease);
        Self::plain_op(&lease, cmd)
    }

    pub(crate) fn info_from(&self, key: &str, value: Value) -> Result<Option<LeaseInfo>> {
        let Value::Array(items) = value else {
            return Err(unexpected("info", &value));
        };
        let pttl = match items.first() {
            Some(Value::Int(n)) => *n,
            _ => return Err(Error::Backend("Redis Cluster: malformed info reply".into())),
        };
        if pttl == -2 {
            return Ok(None);
        }
        let time_left = u64::try_from(pttl).ok().map(Duration::from_millis);
        let now_ms = match items.get(2) {
            Some(v) => ::redis::from_redis_value_ref::<(u64, u64)>(v)
                .map(|(secs, micros)| secs * 1000 + micros / 1000)
                .unwrap_or(0),
            None => 0,
        };
        let holder = match items.get(1) {
            Some(Value::BulkString(value)) => holder_from(value, time_left, now_ms),
            _ => None,
        };
        Ok(Some(LeaseInfo::exclusive(
            key.to_owned(),
            time_left,
            holder,
        )))
    }

    /// Every key matching `pattern` on every master, by `SCAN`.
    pub(crate) fn scan(&self, pattern: &str) -> Result<Vec<String>> {
        let _held = crate::runtime::eintr::HostSignalsHeld::new(); // no EINTR on a host thread
        let mut found = Vec::new();
        for addr in self.masters()? {
            let mut cursor: u64 = 0;
            loop {
                let deadline = Instant::now() + self.timeout;
                let mut con = self.checkout(&addr, deadline)?;
                aim(&con, deadline, &addr)?;
                let (next, keys): (u64, Vec<String>) = ::redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(500)
                    .query(&mut con)
                    .map_err(|e| map_err(e, &addr))?;
                self.checkin(&addr, con);
                found.extend(keys);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        found.sort();
        found.dedup();
        Ok(found)
    }

    pub(crate) fn keys_of(&self, kind: &str, prefix: &str) -> Result<Vec<String>> {
        crate::backend::redis::server::user_keys(&self.namespace, kind, prefix, |pattern| {
            self.scan(pattern)
        })
    }

    pub(crate) fn not_replicated(&self, what: &str) -> Error {
        Error::Backend(format!(
            "Redis Cluster: {what} applied but fewer than {} replica(s) acknowledged it within \
             {:?} (min_replicas)",
            self.replicas.describe(),
            self.replicas.timeout
        ))
    }
}

/// Who an error is about: the node at `addr`.
pub(crate) fn node(addr: &str) -> Peer<'_> {
    Peer {
        addr,
        cluster: true,
    }
}

pub(crate) fn left(deadline: Instant, addr: &str) -> Result<Duration> {
    io::left(deadline, node(addr))
}

pub(crate) fn aim(con: &Connection, deadline: Instant, addr: &str) -> Result<()> {
    io::aim(con, deadline, node(addr)).map(drop)
}

pub(crate) fn map_err(e: RedisError, addr: &str) -> Error {
    io::error(&e, node(addr))
}

pub(crate) fn unexpected(what: &str, value: &Value) -> Error {
    match value {
        Value::ServerError(e) => Error::Backend(format!(
            "Redis Cluster answered {what} with an error: {e:?}"
        )),
        other => Error::Backend(format!(
            "Redis Cluster sent an unexpected {what} reply: {other:?}"
        )),
    }
}
