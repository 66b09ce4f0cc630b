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

use super::cluster::{self, RedisCluster};
use super::io::MIN_IO;
use super::server::Redis;
use super::url::ReplicaAck;
use crate::error::{Error, Result};
use ::redis::Connection;
use std::time::{Duration, Instant};

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
/// the Cluster promotes); off, no round trip (`None`).
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
    Ok(None)
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

impl Redis {
    /// How often the heartbeat reads the memory policy: the URL's
    /// `settings_check=SECONDS`, else [`SETTINGS_CHECK_EVERY`]; never with
    /// `eviction=accept`.
    pub(crate) fn settings_every(&self) -> Option<Duration> {
        (!self.accept_eviction)
            .then(|| self.replicas.settings_check.unwrap_or(SETTINGS_CHECK_EVERY))
    }

    /// One `INFO memory` of the master (with a sentinel: the one it names
    /// now), by `deadline`: the risk of an evicting policy, if it has one.
    /// A new connection refused by the connect-time checks is that risk
    /// too (its Config error says which).
    pub(crate) fn memory_risk(&self, deadline: Instant) -> Result<Option<String>> {
        let info = self.with_con_by(Some(deadline), |con, _| {
            ::redis::cmd("INFO")
                .arg("memory")
                .query::<String>(&mut con.con)
        });
        match info {
            Ok(info) => Ok(evicting_policy(&info).map(|(policy, maxmemory)| {
                // With a sentinel: the master it named for this read.
                eviction_risk(&self.master_named(), &policy, maxmemory)
            })),
            Err(Error::Config(refused)) => Ok(Some(refused)),
            Err(e) => Err(e),
        }
    }
}

impl RedisCluster {
    /// How often the heartbeat reads every master's memory policy (as
    /// [`Redis::settings_every`]).
    pub(crate) fn settings_every(&self) -> Option<Duration> {
        (!self.replicas.accept_eviction)
            .then(|| self.replicas.settings_check.unwrap_or(SETTINGS_CHECK_EVERY))
    }

    /// One `INFO memory` of every master of the slot map, each by its
    /// share of the time left until `deadline`: the risks found (each
    /// master's, joined).
    pub(crate) fn memory_risk(&self, deadline: Instant) -> Result<Option<String>> {
        self.refresh_if_stale(deadline)?;
        let masters = self.state.get().lock().map.masters();
        let mut risks = Vec::new();
        let mut failed = None;
        for (i, addr) in masters.iter().enumerate() {
            let share = cluster::client::left(deadline, addr)?
                / u32::try_from(masters.len() - i).unwrap_or(1);
            let by = Instant::now() + share.max(MIN_IO);
            let info = self.checkout(addr, by).and_then(|mut con| {
                cluster::client::aim(&con, by, addr)?;
                let info: String = ::redis::cmd("INFO")
                    .arg("memory")
                    .query(&mut con)
                    .map_err(|e| cluster::client::map_err(e, addr))?;
                self.checkin(addr, con);
                Ok(info)
            });
            match info {
                Ok(info) => risks.extend(
                    evicting_policy(&info).map(|(policy, max)| eviction_risk(addr, &policy, max)),
                ),
                Err(Error::Config(refused)) => risks.push(refused),
                Err(e) => failed = Some(e),
            }
        }
        match (risks.is_empty(), failed) {
            (true, Some(e)) => Err(e),
            _ => Ok((!risks.is_empty()).then(|| risks.join("; "))),
        }
    }
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
