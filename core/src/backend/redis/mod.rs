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
//! - Push ([`crate::contract::push`]): `set_flag` pipelines `SET {ns}:flag:{KEY}` with
//!   `PUBLISH {ns}:raised:{KEY} 1`; a process whose holds watch stop keys
//!   (or that has waiting lines) keeps ONE extra connection per adapter, on
//!   a listener thread (`mistri-flags`) that never touches the engine's
//!   schedule or deadlines, `SUBSCRIBE`d to exactly what the process needs:
//!   `{ns}:raised:{KEY}` per watched stop key, `{ns}:next:{KEY}:LINE` per
//!   waiting line — never a pattern, so a message reaches only the
//!   processes that watch or wait for that key. The set follows the
//!   registry's interests, batched when the listener next wakes
//!   (`listen::HOT_SLICE` / `COLD_SLICE`; a cold read is cut short by the
//!   listener's own `{ns}:wake:{ID}` channel, `listener.rs`), unsubscribed after
//!   [`crate::contract::push::LINGER`]. A message trips the holds watching that key at
//!   once. The listener's life is the one every network backend shares
//!   ([`crate::contract::listen`]): it checks a silent connection with a
//!   `PING` every [`crate::contract::listen::PING_EVERY`]; on any error it drops the connection, reconnects
//!   (backing off 50 ms to 1 s) and, once it has subscribed the whole set
//!   again, tells the engines to read every watched flag and every line to
//!   try once (anything announced in the gap). The listener is generic over
//!   where it subscribes ([`ListenAt`]: this server, or the master the
//!   sentinels name, followed across failovers); a cluster listens by
//!   sharded pub/sub instead (`cluster/shards.rs`).
//! - Waiting ([`crate::waiting`]): the release script (and `break_lease`,
//!   and a slot release) announces the release to the next live line of the
//!   key's queue only (of an N-holder key, to the first `free` live lines,
//!   `free` being its free slots), `PUBLISH {ns}:next:{KEY}:LINE <fence>`
//!   ([`announce_lua`]); nothing when nobody is queued. `expires_in` is
//!   `PTTL`.
//!
//! Connections: a small pool (`runtime/pool.rs`, shared with the Cluster
//! and PostgreSQL: a mutex around a stack of idle connections, held only to
//! push or pop), so concurrent callers each use their own connection. The
//! pool is fork-local: a forked child drops the inherited connections
//! (closing only its copies of the sockets) and opens its own. A
//! connection that saw an error is discarded, not reused; one found dropped
//! (closed or reset by the server, also the listener's) empties the pool:
//! a restarted server closed every idle connection too.

pub(crate) mod cluster;
mod io;
mod keys;
mod listener;
mod listing;
mod ops;
mod replies;
pub(crate) mod resp;
mod scripts;
pub(crate) mod sentinel;
mod server;
mod settings;
mod settings_watch;
pub(crate) mod slots;
pub(crate) mod url;

pub use scripts::{ACQUIRE_LUA, BREAK_LUA, LEAVE_QUEUE_LUA, RELEASE_LUA, RENEW_LUA};
pub use server::{Redis, DEFAULT_NAMESPACE};
pub use settings::SETTINGS_CHECK_EVERY;
pub use url::{DEFAULT_TIMEOUT, DEFAULT_URL};
