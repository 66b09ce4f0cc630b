//! # mistri_locks
//!
//! Cross-process leases and stop flags for hosts that run work loops in
//! several processes. A *lease* says "this is alive right now" and expires
//! unless renewed; a *flag* carries a one-bit request ("stop") between
//! processes; a [`Hold`] keeps a lease renewed on a heartbeat, watches a stop
//! flag and trips an [`AbortSignal`] when asked to stop or when the lease is
//! lost.
//!
//! Backends implement [`Adapter`]: [`Memory`] (one process), [`Local`] (the
//! processes of one host, through an SQLite file, no server), [`Redis`]
//! (any number of processes on any hosts, any language, per
//! `docs/PROTOCOL.md`; one server, or the master Sentinel names) and
//! [`RedisCluster`]. [`redis_url::open`] picks one from a URL.
//! [`Locks`] wraps one with the seed's seven token-less operations.
//!
//! ```
//! use mistri_locks::{HoldOptions, Locks};
//! use std::time::Duration;
//!
//! let locks = Locks::memory();
//! let opts = HoldOptions {
//!     ttl: Duration::from_secs(10),
//!     heartbeat: Duration::from_secs(1),
//!     stop_key: Some("stop:worker".into()),
//!     ..HoldOptions::default()
//! };
//! let hold = locks.hold("worker", opts)?.expect("nobody else holds it");
//! locks.set_flag("stop:worker", Duration::from_secs(60))?; // from anywhere
//! assert!(hold.signal().wait(Some(Duration::from_secs(5))));
//! hold.release()?;
//! # Ok::<(), mistri_locks::Error>(())
//! ```

#![warn(missing_docs)]

pub mod adapter;
pub mod args;
pub mod delivery;
mod engine;
pub mod error;
pub mod fence;
mod fork;
mod global;
pub mod hold;
pub mod info;
pub mod local;
pub mod locks;
pub mod memory;
mod notify;
pub mod push;
pub mod redis;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod redis_url;
pub mod signal;
pub mod stats;
mod sync;
pub mod waiting;

pub use adapter::{Adapter, Beat, Lease, Renewal, Renewed};
pub use args::{duration_from_secs, fork_generation, wait_timeout_from_secs};
pub use engine::{default_margin, IDLE_EXIT, MAX_TICK, MIN_HEARTBEAT};
pub use error::{Error, Result};
pub use global::{configure, hold, locks, start_hold};
pub use hold::{Hold, HoldOptions, ReleaseOutcome, FLAG_TTL, HEARTBEAT, LEASE_TTL, MIN_HOLD_TTL};
pub use info::{FlagInfo, HolderInfo, Identity, LeaseInfo, Listing};
pub use local::Local;
pub use locks::Locks;
pub use memory::Memory;
pub use push::{FlagWatch, FlagWatcher};
pub use redis::Redis;
pub use redis_cluster::RedisCluster;
pub use redis_url::ReplicaAck;
pub use signal::{AbortSignal, CallbackHandle, WaitOutcome, WakeToken};
pub use stats::{Event, EventHookHandle, EventKind, LostCause, StatsSnapshot};
pub use waiting::{AcquireOptions, Poll, WaitWaker, Waiting, MAX_LIMIT};
