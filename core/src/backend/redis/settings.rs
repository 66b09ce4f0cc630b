//! Settings of a Redis server that can break the promise (issue 28 §1,
//! §2; `docs/RELIABILITY.md`, "Settings and promises"), read where they
//! can change: at every new connection (at connect, after every
//! reconnect, to each new master after a Sentinel switch, to every master
//! of a Cluster), and the memory policy also by the heartbeat while holds
//! are alive.
//!
//! - Eviction: `INFO memory` (it works where `CONFIG` is renamed or
//!   disabled) with `maxmemory` set and an `allkeys-*` or `volatile-*`
//!   policy is refused at connect with a Config error naming the policy
//!   and the fixes; a server that refuses `INFO`, or whose reply lacks a
//!   readable policy, is refused too (fail closed), naming the check and
//!   `eviction=accept`. A policy changed at run time is found by the engine's
//!   I/O thread within [`SETTINGS_CHECK_EVERY`] (the URL's
//!   `settings_check=SECONDS`): one `INFO memory` per adapter and server
//!   per period (a Cluster: each master; Sentinel: the master it names
//!   now), never one per hold; every hold of the engine is then told (an
//!   `at_risk` event whose reason names the policy). `eviction=accept`
//!   turns both off.
//! - Replica acknowledgement: `INFO replication` at every new connection;
//!   `min_replicas=all` waits for the replicas connected then, a number
//!   below them is refused (a `WAIT` met by fewer than all may miss the
//!   replica that is promoted).
//!
//! The heartbeat's own check is in `settings_watch`.

use super::url::ReplicaAck;
use ::redis::Connection;
use std::time::Duration;

/// How often the heartbeat reads a Redis server's memory policy while
/// holds are alive, unless the URL says `settings_check=SECONDS`.
pub const SETTINGS_CHECK_EVERY: Duration = Duration::from_secs(60);

/// Refuses a server that may evict leases: `INFO memory` (which works where
/// `CONFIG` is renamed or disabled, as on managed services) with
/// `maxmemory` set and an `allkeys-*` or `volatile-*` policy (every lease
/// has a TTL). The error names the policy and the fixes; the URL's
/// `eviction=accept` skips the check.
///
/// Fails closed (issue 39, finding 5): a server that refuses `INFO` (an ACL
/// without `+info`, `rename-command INFO ""`) is refused with
/// [`needs_info`]; a reply without a readable `maxmemory` and
/// `maxmemory_policy` (a proxy, a Redis-compatible server) with
/// [`unreadable_policy`]. Both name the check and `eviction=accept`.
pub(crate) fn check_eviction(con: &mut Connection, addr: &str) -> ::redis::RedisResult<()> {
    let info: String = match ::redis::cmd("INFO").arg("memory").query(con) {
        Ok(info) => info,
        Err(e) if refused_by_server(&e) => {
            return Err(::redis::RedisError::from((
                ::redis::ErrorKind::InvalidClientConfig,
                "memory-policy check refused",
                needs_info(addr, &e),
            )))
        }
        Err(e) => return Err(e),
    };
    let refuse = |what: &'static str, detail: String| {
        Err(::redis::RedisError::from((
            ::redis::ErrorKind::InvalidClientConfig,
            what,
            detail,
        )))
    };
    match memory_policy(&info) {
        Policy::Safe => Ok(()),
        Policy::Evicting(policy, maxmemory) => refuse(
            "unsafe memory policy",
            eviction_risk(addr, &policy, maxmemory),
        ),
        Policy::Unreadable(why) => {
            refuse("unreadable memory policy", unreadable_policy(addr, &why))
        }
    }
}

/// Whether `e` is the server's answer (an error reply: `NOPERM`, an unknown
/// command), not a connection's failure.
pub(crate) fn refused_by_server(e: &::redis::RedisError) -> bool {
    matches!(e.kind(), ::redis::ErrorKind::Server(_)) || e.code().is_some()
}

/// The refusal of a server that does not answer `INFO` (not granted,
/// renamed): the check can't be made.
pub(crate) fn needs_info(addr: &str, e: &::redis::RedisError) -> String {
    format!(
        "the memory-policy check needs INFO (grant +info, or eviction=accept): Redis at {addr} \
         answered INFO memory with {e}"
    )
}

/// The refusal of an `INFO memory` reply whose policy can't be read.
pub(crate) fn unreadable_policy(addr: &str, why: &str) -> String {
    format!(
        "the memory-policy check could not read the memory policy of Redis at {addr} ({why}; a \
         proxy or a Redis-compatible server?): an evicting policy would let two processes hold \
         one key. Make INFO memory report maxmemory and maxmemory_policy, or, if the server \
         never evicts a key with a TTL, accept the risk with eviction=accept in the URL"
    )
}

/// Replica acknowledgement at every new connection (`INFO replication`,
/// `connected_slaves`, on the node `con` reaches): with `min_replicas=all`
/// the replicas connected now (`Some(n)`; none is a Config error: nothing
/// could acknowledge); with a number below them a Config error naming both
/// numbers (a `WAIT` met by fewer than all may miss the replica Sentinel or
/// the Cluster promotes), else `Some(n)` too; off, no round trip (`None`).
pub(crate) fn check_replicas(
    con: &mut Connection,
    addr: &str,
    ack: ReplicaAck,
) -> ::redis::RedisResult<Option<u32>> {
    if !ack.enabled() {
        return Ok(None);
    }
    let info: String = ::redis::cmd("INFO").arg("replication").query(con)?;
    let n = info
        .lines()
        .find_map(|l| l.strip_prefix("connected_slaves:"))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(0);
    let refuse = |what: &'static str, detail: String| {
        Err(::redis::RedisError::from((
            ::redis::ErrorKind::InvalidClientConfig,
            what,
            detail,
        )))
    };
    if ack.min_replicas == ReplicaAck::ALL {
        if n == 0 {
            return refuse(
                "no replica",
                format!(
                    "min_replicas=all, but the Redis master at {addr} has no connected replica"
                ),
            );
        }
        return Ok(Some(n));
    }
    if ack.min_replicas < n {
        return refuse(
            "too few replicas asked for",
            too_few_replicas(ack.min_replicas, n, addr),
        );
    }
    Ok(Some(n))
}

/// The refusal of a numeric `min_replicas` below the `connected` replicas.
pub(crate) fn too_few_replicas(asked: u32, connected: u32, addr: &str) -> String {
    format!(
        "min_replicas={asked}, but the Redis master at {addr} has {connected} connected \
         replicas: a write acknowledged by {asked} of {connected} may be missing on the replica \
         that is promoted, and then two processes hold one key. Use min_replicas=all (every \
         connected replica acknowledges), or min_replicas={connected}"
    )
}

/// What an `INFO memory` reply says of the memory policy.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Policy {
    /// No `maxmemory`, or `noeviction`: no lease is evicted.
    Safe,
    /// `maxmemory` set and an `allkeys-*` or `volatile-*` policy (every
    /// lease has a TTL): the policy and `maxmemory`.
    Evicting(String, u64),
    /// `maxmemory` or `maxmemory_policy` missing or not understood: what
    /// was wrong.
    Unreadable(String),
}

/// The memory policy of an `INFO memory` reply. Fails closed: a missing
/// or unparseable field is [`Policy::Unreadable`], and so is a policy
/// that is neither `noeviction` nor `allkeys-*`/`volatile-*` while
/// `maxmemory` is set.
pub(crate) fn memory_policy(info: &str) -> Policy {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let Some(max) = field("maxmemory") else {
        return Policy::Unreadable("no maxmemory field in INFO memory".into());
    };
    let Ok(maxmemory) = max.parse::<u64>() else {
        return Policy::Unreadable(format!("maxmemory {max:?} is not a number"));
    };
    let Some(policy) = field("maxmemory_policy") else {
        return Policy::Unreadable("no maxmemory_policy field in INFO memory".into());
    };
    let evicts = policy.starts_with("allkeys-") || policy.starts_with("volatile-");
    match (maxmemory > 0, evicts) {
        (true, true) => Policy::Evicting(policy.to_owned(), maxmemory),
        (true, false) if policy != "noeviction" => {
            Policy::Unreadable(format!("maxmemory_policy {policy:?} is not one it knows"))
        }
        _ => Policy::Safe,
    }
}

/// What an evicting memory policy costs, and the fixes.
pub(crate) fn eviction_risk(addr: &str, policy: &str, maxmemory: u64) -> String {
    format!(
        "Redis at {addr} runs maxmemory-policy {policy} with maxmemory {maxmemory}: it may \
         evict a live lease, and then two processes hold one key while the holder is not told. \
         Set maxmemory-policy noeviction, or give the locks a Redis of their own; or accept the \
         risk with eviction=accept in the URL"
    )
}

#[cfg(test)]
mod eviction_tests {
    use super::{memory_policy, Policy};

    #[test]
    fn an_evicting_policy_with_maxmemory_is_found() {
        let info = |max: u64, policy: &str| {
            format!("# Memory\r\nused_memory:1\r\nmaxmemory:{max}\r\nmaxmemory_human:1M\r\nmaxmemory_policy:{policy}\r\n")
        };
        assert_eq!(
            memory_policy(&info(1 << 20, "volatile-ttl")),
            Policy::Evicting("volatile-ttl".into(), 1 << 20)
        );
        assert!(matches!(
            memory_policy(&info(1 << 20, "allkeys-lru")),
            Policy::Evicting(..)
        ));
        assert_eq!(memory_policy(&info(1 << 20, "noeviction")), Policy::Safe);
        assert_eq!(memory_policy(&info(0, "allkeys-lru")), Policy::Safe);
    }

    /// Fails closed: what can't be read is not taken as safe.
    #[test]
    fn a_missing_or_unparseable_policy_is_unreadable() {
        let unreadable = |info: &str| matches!(memory_policy(info), Policy::Unreadable(_));
        assert!(unreadable("# Memory\r\n"));
        assert!(unreadable("# Memory\r\nmaxmemory:104857600\r\n"));
        assert!(unreadable("# Memory\r\nmaxmemory_policy:noeviction\r\n"));
        assert!(unreadable(
            "# Memory\r\nmaxmemory:lots\r\nmaxmemory_policy:noeviction\r\n"
        ));
        assert!(unreadable(
            "# Memory\r\nmaxmemory:1048576\r\nmaxmemory_policy:surprise\r\n"
        ));
        // maxmemory_human is not maxmemory.
        assert!(unreadable(
            "# Memory\r\nmaxmemory_human:1M\r\nmaxmemory_policy:noeviction\r\n"
        ));
    }
}
