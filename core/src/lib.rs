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
//! `docs/PROTOCOL.md`; one server, or the master Sentinel names),
//! [`RedisCluster`] and [`Postgres`] (tables in a PostgreSQL database). [`open`] picks one from a URL.
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

// The layers, lower never importing higher (docs/ARCHITECTURE.md):
// error, args, options, runtime → contract → signal, stats, waiting →
// backend → hold → job → locks → operator. `python3 scripts/check_cycles.py core/src` checks it.
// Modules whose path did not change stay reachable (hidden) for one
// release; the documented API is the list below.
#[doc(hidden)]
pub mod args;
mod backend;
mod contract;
#[doc(hidden)]
pub mod error;
#[doc(hidden)]
pub mod hold;
pub mod job;
#[doc(hidden)]
pub mod locks;
pub mod operator;
mod options;
mod runtime;
#[doc(hidden)]
pub mod signal;
#[doc(hidden)]
pub mod stats;
#[doc(hidden)]
pub mod waiting;

// The public API, one list.
pub use args::MAX_LIMIT;
pub use args::{
    check_key, check_label, check_namespace, duration_from_secs, fork_generation,
    wait_timeout_from_secs, MAX_NAME_BYTES,
};
pub use backend::local::{default_path as local_default_path, Local};
pub use backend::memory::Memory;
pub use backend::mysql::MySql;
pub use backend::postgres::Postgres;
pub use backend::redis::cluster::RedisCluster;
pub use backend::redis::url::ReplicaAck;
pub use backend::redis::{Redis, DEFAULT_NAMESPACE, DEFAULT_URL, SETTINGS_CHECK_EVERY};
pub use backend::{
    check_family, family_of, open, open_with, schemes_of, ConnectionParts, Family, OpenOptions,
};
pub use contract::adapter::{Adapter, Beat, Lease, Renewal, Renewed};
pub use contract::info::{FlagInfo, HolderInfo, Identity, LeaseInfo, Listing, WaitingInfo};
pub use contract::push::{FlagWatch, FlagWatcher};
pub use contract::{QUEUE_ENTRY_TTL, QUEUE_REFRESH, SAFETY_POLL};
pub use error::{Error, Result};
pub use hold::engine::{default_margin, MAX_TICK, MIN_HEARTBEAT};
pub use hold::{
    Hold, HoldOptions, Interruption, ReleaseOutcome, FLAG_TTL, HEARTBEAT, LEASE_TTL, MIN_HOLD_TTL,
};
pub use locks::global::{configure, hold, locks, start_hold};
pub use locks::stop::StopOutcome;
pub use locks::Locks;
pub use options::{nearest as nearest_name, OptionValue};
pub use runtime::IDLE_EXIT;
pub use signal::{delivery, AbortSignal, CallbackHandle, WaitOutcome, WakeToken};
pub use stats::{Event, EventHookHandle, EventKind, LostCause, StatValue, StatsSnapshot};
pub use waiting::{AcquireOptions, Poll, WaitWaker, Waiting};

/// Pieces the faces and the tests share that are not part of the
/// contract: the host's language in labels, the script texts, the Cluster
/// slot of a key, the listener's counters and timings.
#[doc(hidden)]
pub mod internals {
    pub use crate::backend::local::{
        user_default_path, BELL_BUCKETS, BUSY_TIMEOUT, DEFAULT_BASE, PATH_ENV, PRUNE_EVERY,
    };
    pub use crate::backend::mysql::{
        DEFAULT_PREFIX as MYSQL_PREFIX, DEFAULT_TIMEOUT as MYSQL_TIMEOUT,
    };
    pub use crate::backend::postgres::{
        DEFAULT_SCHEMA as POSTGRES_SCHEMA, DEFAULT_TIMEOUT as POSTGRES_TIMEOUT,
    };
    pub use crate::backend::redis::cluster::{slot_of, MAX_ROUNDS};
    pub use crate::backend::redis::{
        ACQUIRE_LUA, BREAK_LUA, LEAVE_QUEUE_LUA, RELEASE_LUA, RENEW_LUA,
    };
    pub use crate::contract::info::{default_label, set_language, unix_millis};
    pub use crate::contract::listen::{COLD_SLICE, HOT_FOR, HOT_SLICE, LISTENER_IDLE, PING_EVERY};
    pub use crate::contract::push::{messages_heard, LINGER};
    pub use crate::hold::engine::SUBSCRIBE_AFTER;
    pub use crate::waiting::observe::{observe_rung_tries, RungTry};
}
