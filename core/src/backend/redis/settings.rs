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
//!   and the fixes. A policy changed at run time is found by the engine's
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
pub(crate) fn check_eviction(con: &mut Connection, addr: &str) -> ::redis::RedisResult<()> {
    let info: String = ::redis::cmd("INFO").arg("memory").query(con)?;
    match evicting_policy(&info) {
        None => Ok(()),
        Some((policy, maxmemory)) => Err(::redis::RedisError::from((
            ::redis::ErrorKind::InvalidClientConfig,
            "unsafe memory policy",
            eviction_risk(addr, &policy, maxmemory),
        ))),
    }
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

/// The policy and `maxmemory` of an `INFO memory` reply, if `maxmemory` is
/// set and the policy may evict a key with a TTL.
pub(crate) fn evicting_policy(info: &str) -> Option<(String, u64)> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let maxmemory: u64 = field("maxmemory")?.parse().ok()?;
    let policy = field("maxmemory_policy")?;
    let evicts = policy.starts_with("allkeys-") || policy.starts_with("volatile-");
    (maxmemory > 0 && evicts).then(|| (policy.to_owned(), maxmemory))
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
    use super::evicting_policy;

    #[test]
    fn an_evicting_policy_with_maxmemory_is_found() {
        let info = |max: u64, policy: &str| {
            format!("# Memory\r\nused_memory:1\r\nmaxmemory:{max}\r\nmaxmemory_human:1M\r\nmaxmemory_policy:{policy}\r\n")
        };
        assert_eq!(
            evicting_policy(&info(1 << 20, "volatile-ttl")),
            Some(("volatile-ttl".into(), 1 << 20))
        );
        assert!(evicting_policy(&info(1 << 20, "allkeys-lru")).is_some());
        assert_eq!(evicting_policy(&info(1 << 20, "noeviction")), None);
        assert_eq!(evicting_policy(&info(0, "allkeys-lru")), None);
        assert_eq!(evicting_policy("# Memory\r\n"), None);
    }
}
