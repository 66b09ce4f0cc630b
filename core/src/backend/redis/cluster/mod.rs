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
//! Connections: a stack per node address in the shared idle pool
//! (`runtime/pool.rs`, fork-local, as [`crate::Redis`]'s); a connection
//! that saw an error or a timeout is dropped, never reused. The state
//! mutex is held only to read the map, the pool's only to push or pop a
//! connection; neither during I/O.
//!
//! Push ([`crate::contract::push`]) by sharded pub/sub (`shards.rs`):
//! `set_flag` runs one script on the flag's slot owner that `SET`s the flag
//! and then `SPUBLISH`es `{ns}:raised:{KEY}`; releases announce to the next
//! waiting line with `SPUBLISH {ns}:next:{KEY}:LINE`. A message stays on
//! the shard that owns the key (a classic `PUBLISH` would cross the cluster
//! bus to every node). The listener subscribes each channel on its slot's
//! owner and follows slot moves and failovers.

pub(crate) mod client;
mod clock;
mod map;
mod ops;
/// Push by sharded pub/sub.
mod shards;
#[cfg(test)]
mod tests;

pub use client::{RedisCluster, MAX_ROUNDS};
pub use map::slot_of;
