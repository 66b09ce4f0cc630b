//! [`RedisCluster`]: leases and flags on a Redis Cluster, with the same keys,
//! scripts and value formats as [`crate::Redis`] (`docs/PROTOCOL.md`). Every
//! key of one user KEY carries the hash tag `{KEY}`, so a lease, its fence
//! counter, its description and the flag of the same name share a slot and
//! every script touches one node.
//!
//! Routing is this module's, built on the redis crate's plain
//! `Connection`s, pipelines and error replies. The crate's sync
//! `ClusterConnection` (its `cluster` feature) can't keep
//! the engine's bound (no call blocks past the batch's deadline): it
//! connects with a fixed timeout, sleeps between retries, refreshes slots
//! with no overall deadline, and does not retry a `MOVED` inside a pipeline.
//!
//! - Slot map: `CLUSTER SLOTS` from a known node (seeds at first), loaded
//!   lazily and again after a `MOVED` or a connection error.
//! - A batch (a heartbeat tick, or one operation) is split by slot owner:
//!   one pipeline per node, all sent before any reply is read, each reply
//!   read with the time left until the batch's deadline. So N holds on M
//!   masters cost one round trip per master per tick, in parallel.
//! - Per item, not per batch: `MOVED slot addr` updates that slot, marks the
//!   map stale, and sends the item again to `addr`; `ASK addr` sends it
//!   again to `addr` preceded by `ASKING`; `NOSCRIPT` sends it again as
//!   `EVAL`; `TRYAGAIN` / `CLUSTERDOWN` again by slot. Up to [`MAX_ROUNDS`]
//!   rounds, within the deadline. A node that can't be reached fails only
//!   its own items.
//! - Replica acknowledgement ([`ReplicaAck`]): a `WAIT` ends each node's
//!   pipeline that carries a write, on the same connection.
//!
//! Connections: a pool per node address (fork-local, like
//! [`crate::Redis`]'s); a connection that saw an error or a timeout is
//! dropped, never reused. The state mutex is held only to read the map or
//! push/pop a connection, never during I/O.
//!
//! Push ([`crate::contract::push`]) by sharded pub/sub (`redis_shards.rs`):
//! `set_flag` runs one script on the flag's slot owner that `SET`s the flag
//! and then `SPUBLISH`es `{ns}:raised:{KEY}`; releases announce to the next
//! waiting line with `SPUBLISH {ns}:next:{KEY}:LINE`. A message stays on
//! the shard that owns the key (a classic `PUBLISH` would cross the cluster
//! bus to every node). The listener subscribes each channel on its slot's
//! owner and follows slot moves and failovers.

use crate::args::{millis_ceil, mint_token};
use crate::backend::redis::io::{self, Peer};
use crate::backend::redis::keys::key_of;
use crate::backend::redis::replies::{flag_from, holder_from, min_left_ms, renewed_from};
use crate::backend::redis::scripts::{
    break_keys, queue_ttl_ms, ACQUIRE_LUA, BREAK, BREAK_LUA, LEAVE_QUEUE, LEAVE_QUEUE_LUA,
    RELEASE_LUA, RENEW_LUA,
};
use crate::backend::redis::slots::{self as slot, SCRIPTS as SLOT_SCRIPTS};
use crate::backend::redis::url::{ReplicaAck, UrlParts};
use crate::backend::redis::DEFAULT_TIMEOUT;
use crate::contract::adapter::acquire_dispatch;
use crate::contract::adapter::{Adapter, Beat, Lease, Renewal, Renewed};
use crate::contract::info::{FlagInfo, Identity, LeaseInfo, Listing};
use crate::contract::push::{FlagWatch, FlagWatcher, Registry};
use crate::error::{Error, Result};
use crate::runtime::fork::ForkLocal;
use ::redis::{Client, Cmd, Connection, ConnectionLike, RedisError, Script, Value};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Push by sharded pub/sub (a child module: it uses the slot map).
mod shards;

/// Rounds of redirections one batch follows before giving up on an item.
pub const MAX_ROUNDS: usize = 5;
const SLOTS: usize = 16_384;
const NO_NODE: u16 = u16::MAX;
const MAX_IDLE: usize = 16;
const MIN_IO: Duration = Duration::from_millis(1);

/// The lease's time left, its value (token and holder description) and
/// the server's clock in one atomic read (a cluster has no cross-node
/// `MULTI`, and one script is one round trip).
const INFO_LUA: &str = "\
return {redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[1]), redis.call('TIME')}";

/// `KEYS[1]` flag; `ARGV[1]` ttl in ms, `ARGV[2]` its channel. Raises the
/// flag, then announces it by sharded pub/sub on the flag's slot owner
/// (`SPUBLISH`, so the message stays on that shard instead of crossing the
/// cluster bus to every node), in one script so the message never goes out
/// from a node that redirected the `SET`. By `pcall`: on a Redis without
/// `SPUBLISH` (< 7) the flag is still raised, and watchers see it at their
/// next tick.
const RAISE_LUA: &str = "\
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
redis.pcall('SPUBLISH', ARGV[2], '1')
return 1";

#[derive(Clone)]
pub(crate) struct SlotMap {
    /// Node index per slot, or [`NO_NODE`].
    owner: Vec<u16>,
    nodes: Vec<String>,
    stale: bool,
}

impl SlotMap {
    fn empty() -> Self {
        SlotMap {
            owner: vec![NO_NODE; SLOTS],
            nodes: Vec::new(),
            stale: true,
        }
    }

    pub(crate) fn node_of(&self, slot: u16) -> Option<&str> {
        let i = *self.owner.get(usize::from(slot))?;
        self.nodes.get(usize::from(i)).map(String::as_str)
    }

    fn set(&mut self, slot: u16, addr: &str) {
        let i = match self.nodes.iter().position(|n| n == addr) {
            Some(i) => i,
            None => {
                self.nodes.push(addr.to_owned());
                self.nodes.len() - 1
            }
        };
        if let Some(o) = self.owner.get_mut(usize::from(slot)) {
            *o = u16::try_from(i).unwrap_or(NO_NODE);
        }
    }

    /// The nodes that own at least one slot.
    pub(crate) fn masters(&self) -> Vec<String> {
        let mut used = vec![false; self.nodes.len()];
        for &o in &self.owner {
            if let Some(u) = used.get_mut(usize::from(o)) {
                *u = true;
            }
        }
        self.nodes
            .iter()
            .zip(used)
            .filter(|(_, u)| *u)
            .map(|(n, _)| n.clone())
            .collect()
    }
}

struct State {
    map: SlotMap,
    idle: HashMap<String, Vec<Connection>>,
    clients: HashMap<String, Client>,
}

impl State {
    fn for_child(parent: &Mutex<State>) -> Mutex<State> {
        // Keep the parent's map if it can be had without blocking; never
        // its sockets.
        let map = parent
            .try_lock()
            .map(|s| s.map.clone())
            .unwrap_or_else(SlotMap::empty);
        Mutex::new(State {
            map,
            idle: HashMap::new(),
            clients: HashMap::new(),
        })
    }
}

/// Where one item goes in a round.
#[derive(Clone, Debug)]
enum Route {
    Slot,
    Moved(String),
    Ask(String),
}

/// One command of a batch.
#[derive(Clone)]
struct Op {
    slot: u16,
    cmd: Cmd,
    /// The `EVAL` form to send after a `NOSCRIPT`.
    eval: Option<Cmd>,
    /// A write that replica acknowledgement must cover.
    write: bool,
}

/// An item in flight: its op's index, where it goes, and whether to send
/// it as `EVAL`.
type Pending = (usize, Route, bool);

/// One item's answer: the reply and whether enough replicas acknowledged
/// the pipeline it was in (true when not asked for).
type Answer = Result<(Value, bool)>;

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
    parts: UrlParts,
    namespace: String,
    timeout: Duration,
    replicas: ReplicaAck,
    state: ForkLocal<Mutex<State>>,
    acquire: Script,
    renew: Script,
    release: Script,
    raise: Script,
    /// The masters of the last slot map, shared with the flag listener.
    known: ForkLocal<Arc<Mutex<Vec<String>>>>,
    /// The watchers of this adapter's flag listener (one per process).
    push: ForkLocal<Arc<Registry>>,
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
                    idle: HashMap::new(),
                    clients: HashMap::new(),
                }),
                State::for_child,
            ),
            acquire: Script::new(ACQUIRE_LUA),
            renew: Script::new(RENEW_LUA),
            release: Script::new(RELEASE_LUA),
            raise: Script::new(RAISE_LUA),
            known: ForkLocal::new(Arc::default(), |_| Arc::default()),
            push: crate::contract::push::fork_local_registry(),
        })
    }

    fn key(&self, kind: &str, key: &str) -> String {
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

    fn seeds(&self) -> String {
        self.parts.hosts.join(",")
    }

    // ------------------------------------------------------ connections

    fn client(&self, addr: &str) -> Result<Client> {
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

    fn checkout(&self, addr: &str, deadline: Instant) -> Result<Connection> {
        if let Some(con) = self
            .state
            .get()
            .lock()
            .idle
            .get_mut(addr)
            .and_then(Vec::pop)
        {
            return Ok(con);
        }
        let left = left(deadline, addr)?;
        self.client(addr)?
            .get_connection_with_timeout((left / 3).max(MIN_IO))
            .map_err(|e| map_err(e, addr))
    }

    fn checkin(&self, addr: &str, con: Connection) {
        let mut state = self.state.get().lock();
        let idle = state.idle.entry(addr.to_owned()).or_default();
        if idle.len() < MAX_IDLE && con.is_open() {
            idle.push(con);
        }
    }

    /// Something about `addr` failed: the topology may have changed.
    fn suspect(&self) {
        self.state.get().lock().map.stale = true;
    }

    // --------------------------------------------------------- slot map

    fn refresh_if_stale(&self, deadline: Instant) -> Result<()> {
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

    fn slots_from(&self, addr: &str, deadline: Instant) -> Result<SlotMap> {
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
    fn run(&self, ops: &[Op], deadline: Instant) -> Vec<Answer> {
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
    fn send_group(
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
            pipe.cmd("WAIT").arg(self.replicas.min_replicas).arg(ms);
        }
        aim(&con, deadline, addr)?;
        con.send_packed_command(&pipe.get_packed_pipeline())
            .map_err(|e| map_err(e, addr))?;
        Ok((con, waits))
    }

    /// Reads one node's replies, each with the time left until `deadline`.
    fn read_group(
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
                Value::Int(n) => n >= i64::from(self.replicas.min_replicas),
                _ => false,
            }
        } else {
            true
        };
        Ok((replies, acked))
    }

    /// Where an item goes next, if its reply redirects it.
    fn next_route(&self, reply: &Value, route: &Route) -> Option<Redirect> {
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

    fn one(&self, op: Op) -> Result<(Value, bool)> {
        let deadline = Instant::now() + self.timeout;
        let mut answers = self.run(std::slice::from_ref(&op), deadline);
        answers.pop().unwrap_or_else(|| {
            Err(Error::Backend(
                "Redis Cluster: no answer for the command".into(),
            ))
        })
    }

    /// A plain command's reply, server errors as [`Error::Backend`].
    fn query(&self, op: Op) -> Result<Value> {
        let (value, _) = self.one(op)?;
        if let Value::ServerError(e) = &value {
            return Err(Error::Backend(format!(
                "Redis Cluster answered with an error: {e:?}"
            )));
        }
        Ok(value)
    }

    fn script_op(&self, script: &Script, source: &str, keys: &[String], args: &[String]) -> Op {
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

    fn plain_op(key: &str, cmd: Cmd) -> Op {
        Op {
            slot: slot_of(key),
            cmd,
            eval: None,
            write: false,
        }
    }

    fn renew_op(&self, r: &Renewal<'_>) -> Op {
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

    fn slot_op(&self, script: &Script, source: &str, call: slot::Call, write: bool) -> Op {
        let mut op = self.script_op(script, source, &call.0, &call.1);
        op.write = write;
        op
    }

    fn slot_info_op(&self, key: &str) -> Op {
        self.slot_op(
            &SLOT_SCRIPTS.info,
            slot::SLOT_INFO_LUA,
            slot::info_call(&self.namespace, key),
            false,
        )
    }

    fn info_op(&self, key: &str) -> Op {
        let lease = self.key("lease", key);
        let mut cmd = ::redis::cmd("EVAL");
        cmd.arg(INFO_LUA).arg(1).arg(&lease);
        Self::plain_op(&lease, cmd)
    }

    fn info_from(&self, key: &str, value: Value) -> Result<Option<LeaseInfo>> {
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
    fn scan(&self, pattern: &str) -> Result<Vec<String>> {
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

    fn keys_of(&self, kind: &str, prefix: &str) -> Result<Vec<String>> {
        crate::backend::redis::server::user_keys(&self.namespace, kind, prefix, |pattern| {
            self.scan(pattern)
        })
    }

    fn not_replicated(&self, what: &str) -> Error {
        Error::Backend(format!(
            "Redis Cluster: {what} applied but fewer than {} replica(s) acknowledged it within \
             {:?} (min_replicas)",
            self.replicas.min_replicas, self.replicas.timeout
        ))
    }
}

enum Redirect {
    To(Route),
    AsEval,
}

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the part
/// between the first `{` and the next `}`, if not empty) or of the whole
/// key, mod 16384. The redis crate computes it too, but keeps the number
/// crate-private; the integration tests check this against the server's
/// `CLUSTER KEYSLOT`.
pub fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(bytes);
    let mut crc: u16 = 0;
    for &byte in tagged {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

/// The slot map in a `CLUSTER SLOTS` reply from `addr`.
pub(crate) fn slot_map_from(reply: Value, addr: &str) -> Result<SlotMap> {
    let host_of_asked = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let mut map = SlotMap::empty();
    let Value::Array(ranges) = reply else {
        return Err(Error::Backend(format!(
            "Redis Cluster node {addr} sent an unexpected CLUSTER SLOTS reply"
        )));
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let host = match master.first() {
            Some(Value::BulkString(h)) if !h.is_empty() && h.as_slice() != b"?" => {
                String::from_utf8_lossy(h).into_owned()
            }
            _ => host_of_asked.to_owned(),
        };
        let Some(Value::Int(port)) = master.get(1) else {
            continue;
        };
        let node = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        for slot in *start..=*end {
            if let Ok(slot) = u16::try_from(slot) {
                map.set(slot, &node);
            }
        }
    }
    if map.owner.iter().all(|&o| o == NO_NODE) {
        return Err(Error::Backend(format!(
            "Redis Cluster node {addr} serves no slots (is the cluster set up?)"
        )));
    }
    map.stale = false;
    Ok(map)
}

/// Who an error is about: the node at `addr`.
fn node(addr: &str) -> Peer<'_> {
    Peer {
        addr,
        cluster: true,
    }
}

fn left(deadline: Instant, addr: &str) -> Result<Duration> {
    io::left(deadline, node(addr))
}

fn aim(con: &Connection, deadline: Instant, addr: &str) -> Result<()> {
    io::aim(con, deadline, node(addr)).map(drop)
}

fn map_err(e: RedisError, addr: &str) -> Error {
    io::error(&e, node(addr))
}

fn unexpected(what: &str, value: &Value) -> Error {
    match value {
        Value::ServerError(e) => Error::Backend(format!(
            "Redis Cluster answered {what} with an error: {e:?}"
        )),
        other => Error::Backend(format!(
            "Redis Cluster sent an unexpected {what} reply: {other:?}"
        )),
    }
}

impl RedisCluster {
    /// The exclusive acquire; `line`: a waiter's line ([`ACQUIRE_LUA`]'s
    /// queue).
    /// One slot of an N-holder lease; `line`: a waiter's line (the
    /// queue of [`slot::SLOT_ACQUIRE_LUA`]).
    fn acquire_slot(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        let token = mint_token()?;
        let op = self.slot_op(
            &SLOT_SCRIPTS.acquire,
            slot::SLOT_ACQUIRE_LUA,
            slot::acquire_call(&self.namespace, key, &token, ttl, who, limit, line),
            true,
        );
        let (value, acked) = self.one(op)?;
        let fence = slot::fence_from(&value, "Redis Cluster")?;
        if fence == 0 {
            return Ok(None);
        }
        let lease = Lease::slot(key, token, fence, limit);
        if !acked {
            let undone = match self.release(&lease) {
                Ok(true) => "released it",
                Ok(false) => "it is gone already",
                Err(_) => "could not release it (it expires with its ttl)",
            };
            return Err(Error::Backend(format!(
                "{}; {undone}",
                self.not_replicated(&format!("acquire of a slot of {key:?}"))
            )));
        }
        Ok(Some(lease))
    }

    fn acquire_exclusive(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        let token = mint_token()?;
        let mut args = vec![
            token.clone(),
            millis_ceil(ttl).to_string(),
            who.label.clone(),
            min_left_ms(who.heartbeat).to_string(),
        ];
        if let Some(line) = line {
            args.push(line.to_owned());
            args.push(queue_ttl_ms().to_string());
        }
        let mut op = self.script_op(
            &self.acquire,
            ACQUIRE_LUA,
            &[
                self.key("lease", key),
                self.key("fence", key),
                self.key("slots", key),
                self.key("queue", key),
                self.key("queued", key),
            ],
            &args,
        );
        op.write = true;
        let (value, acked) = self.one(op)?;
        let fence = match value {
            Value::Int(n) => u64::try_from(n).unwrap_or(0),
            other => return Err(unexpected("acquire", &other)),
        };
        if fence == 0 {
            return Ok(None);
        }
        let lease = Lease::new(key, token, fence);
        if !acked {
            let undone = match self.release(&lease) {
                Ok(true) => "released it",
                Ok(false) => "it is gone already",
                Err(_) => "could not release it (it expires with its ttl)",
            };
            return Err(Error::Backend(format!(
                "{}; {undone}",
                self.not_replicated(&format!("acquire of {key:?}"))
            )));
        }
        Ok(Some(lease))
    }
}

impl Adapter for RedisCluster {
    acquire_dispatch!();

    fn name(&self) -> &'static str {
        "redis-cluster"
    }

    fn io_timeout(&self) -> Duration {
        self.timeout
    }

    fn leave_queue(&self, key: &str, line: &str) -> Result<()> {
        let mut op = self.script_op(
            &LEAVE_QUEUE,
            LEAVE_QUEUE_LUA,
            &[self.key("queue", key), self.key("queued", key)],
            &[line.to_owned()],
        );
        op.write = true;
        self.query(op).map(drop)
    }

    fn renew_within(&self, renewal: &Renewal<'_>) -> Result<Renewed> {
        let (value, acked) = self.one(self.renew_op(renewal))?;
        match renewed_from(&value, "Redis Cluster")? {
            Renewed::Yes if !acked => Err(self.not_replicated("renewal")),
            other => Ok(other),
        }
    }

    fn release(&self, lease: &Lease) -> Result<bool> {
        if lease.slotted() {
            let (keys, mut args) = slot::release_call(&self.namespace, lease);
            args.push("SPUBLISH".to_owned());
            let op = self.slot_op(
                &SLOT_SCRIPTS.release,
                slot::SLOT_RELEASE_LUA,
                (keys, args),
                true,
            );
            return match self.query(op)? {
                Value::Int(n) => Ok(n == 1),
                other => Err(unexpected("release", &other)),
            };
        }
        let op = self.script_op(
            &self.release,
            RELEASE_LUA,
            &[
                self.key("lease", lease.key()),
                self.key("queue", lease.key()),
                self.key("queued", lease.key()),
            ],
            // Announced to the next waiting line only, by sharded pub/sub
            // on the key's slot owner (no message crosses the bus).
            &[
                lease.token().to_owned(),
                format!("{}:", self.key("next", lease.key())),
                lease.fence().to_string(),
                "SPUBLISH".to_owned(),
            ],
        );
        match self.query(op)? {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected("release", &other)),
        }
    }

    fn held(&self, key: &str) -> Result<bool> {
        let k = self.key("lease", key);
        let mut cmd = ::redis::cmd("EXISTS");
        cmd.arg(&k).arg(self.key("slots", key));
        match self.query(Self::plain_op(&k, cmd))? {
            Value::Int(n) => Ok(n >= 1),
            other => Err(unexpected("EXISTS", &other)),
        }
    }

    fn expires_in(&self, key: &str) -> Result<Option<Duration>> {
        let op = self.slot_op(
            &SLOT_SCRIPTS.expires,
            slot::EXPIRES_LUA,
            slot::expires_call(&self.namespace, key),
            false,
        );
        slot::expires_from(&self.query(op)?, "Redis Cluster")
    }

    fn break_lease(&self, key: &str) -> Result<bool> {
        // Announced like a release (the single server's script).
        let keys = break_keys(&self.namespace, key);
        let args = [format!("{}:", self.key("next", key)), "SPUBLISH".to_owned()];
        match self.query(self.script_op(&BREAK, BREAK_LUA, &keys, &args))? {
            Value::Int(n) => Ok(n >= 1),
            other => Err(unexpected("break", &other)),
        }
    }

    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()> {
        let op = self.script_op(
            &self.raise,
            RAISE_LUA,
            &[self.key("flag", key)],
            &[millis_ceil(ttl).to_string(), self.key("raised", key)],
        );
        self.query(op).map(drop)
    }

    fn watch_flags(&self, watcher: Weak<dyn FlagWatcher>) -> Option<FlagWatch> {
        let listener = shards::ShardListener {
            parts: self.parts.clone(),
            known: self.known.get().clone(),
            namespace: self.namespace.clone(),
            timeout: self.timeout,
        };
        self.push.get().watch(watcher, move |registry| {
            crate::contract::push::spawn("mistri-flags", move || listener.run(&registry))
        })
    }

    fn flag(&self, key: &str) -> Result<bool> {
        let k = self.key("flag", key);
        let mut cmd = ::redis::cmd("EXISTS");
        cmd.arg(&k);
        flag_from(&self.query(Self::plain_op(&k, cmd))?, "Redis Cluster")
    }

    fn clear_flag(&self, key: &str) -> Result<()> {
        let k = self.key("flag", key);
        let mut cmd = ::redis::cmd("DEL");
        cmd.arg(&k);
        self.query(Self::plain_op(&k, cmd)).map(drop)
    }

    fn info(&self, key: &str) -> Result<Option<LeaseInfo>> {
        let value = self.query(self.info_op(key))?;
        match self.info_from(key, value)? {
            Some(info) => Ok(Some(info)),
            None => slot::info_from(key, &self.query(self.slot_info_op(key))?, "Redis Cluster"),
        }
    }

    fn list(&self, prefix: &str) -> Result<Listing> {
        let mut listing = Listing::default();
        let leases = self.keys_of("lease", prefix)?;
        for chunk in leases.chunks(500) {
            let ops: Vec<Op> = chunk.iter().map(|k| self.info_op(k)).collect();
            let answers = self.run(&ops, Instant::now() + self.timeout);
            for (key, answer) in chunk.iter().zip(answers) {
                let (value, _) = answer?;
                // Gone between the scan and now: not live, not listed.
                if let Some(info) = self.info_from(key, value)? {
                    listing.leases.push(info);
                }
            }
        }
        let slotted = self.keys_of("slots", prefix)?;
        for chunk in slotted.chunks(500) {
            let ops: Vec<Op> = chunk.iter().map(|k| self.slot_info_op(k)).collect();
            let answers = self.run(&ops, Instant::now() + self.timeout);
            for (key, answer) in chunk.iter().zip(answers) {
                let (value, _) = answer?;
                if let Some(info) = slot::info_from(key, &value, "Redis Cluster")? {
                    listing.leases.push(info);
                }
            }
        }
        let flags = self.keys_of("flag", prefix)?;
        for chunk in flags.chunks(500) {
            let ops: Vec<Op> = chunk
                .iter()
                .map(|k| {
                    let fk = self.key("flag", k);
                    let mut cmd = ::redis::cmd("PTTL");
                    cmd.arg(&fk);
                    Self::plain_op(&fk, cmd)
                })
                .collect();
            let answers = self.run(&ops, Instant::now() + self.timeout);
            for (key, answer) in chunk.iter().zip(answers) {
                match answer?.0 {
                    Value::Int(-2) => {}
                    Value::Int(pttl) => listing.flags.push(FlagInfo {
                        key: key.clone(),
                        time_left: u64::try_from(pttl).ok().map(Duration::from_millis),
                    }),
                    other => return Err(unexpected("PTTL", &other)),
                }
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
        let mut ops: Vec<Op> = renewals.iter().map(|r| self.renew_op(r)).collect();
        for key in flags {
            let k = self.key("flag", key);
            let mut cmd = ::redis::cmd("EXISTS");
            cmd.arg(&k);
            ops.push(Self::plain_op(&k, cmd));
        }
        let mut answers = self.run(&ops, deadline);
        let flag_answers = answers.split_off(renewals.len());
        Ok(Beat {
            renewals: answers
                .into_iter()
                .map(|a| {
                    let (value, acked) = a?;
                    match renewed_from(&value, "Redis Cluster")? {
                        Renewed::Yes if !acked => Err(self.not_replicated("renewal")),
                        other => Ok(other),
                    }
                })
                .collect(),
            flags: flag_answers
                .into_iter()
                .map(|a| flag_from(&a?.0, "Redis Cluster"))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests;
