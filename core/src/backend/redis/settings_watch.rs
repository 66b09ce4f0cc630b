//! The heartbeat's run-time check of the memory policy ([`super::settings`]):
//! one `INFO memory` per adapter and server per period, for a single
//! server or Sentinel's current master ([`Redis::memory_risk`]) and for
//! every master of a Cluster ([`RedisCluster::memory_risk`]). Apart from
//! the checks themselves so that `settings` (used by the connect paths of
//! `server` and `cluster::client`) imports neither.

use super::cluster::{self, RedisCluster};
use super::io::MIN_IO;
use super::server::Redis;
use super::settings::{
    eviction_risk, memory_policy, needs_info, refused_by_server, unreadable_policy, Policy,
    SETTINGS_CHECK_EVERY,
};
use crate::error::{Error, Result};
use std::time::{Duration, Instant};

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
    /// too (its Config error says which). Fails closed: `INFO` refused or
    /// a reply whose policy can't be read is an error naming the check
    /// (the engine counts it and tells the holds, [`run_time_verdict`]).
    pub(crate) fn memory_risk(&self, deadline: Instant) -> Result<Option<String>> {
        // A refused INFO is the server's answer on a sound connection: kept
        // in the pool (`Ok` to `with_con_by`), the refusal carried inside.
        let info = self
            .with_con_by(Some(deadline), |con, _| {
                match ::redis::cmd("INFO")
                    .arg("memory")
                    .query::<String>(&mut con.con)
                {
                    Ok(info) => Ok(Ok(info)),
                    Err(e) if refused_by_server(&e) => {
                        Ok(Err(needs_info(&self.master_named(), &e)))
                    }
                    Err(e) => Err(e),
                }
            })
            .and_then(|answer| answer.map_err(Error::Config));
        // With a sentinel: the master it named for this read.
        run_time_verdict(info, &self.master_named())
    }
}

/// The verdict of one run-time `INFO memory` of the server at `addr`: a
/// risk, none, or an error (the check could not be made: told and counted
/// by the engine).
fn run_time_verdict(info: Result<String>, addr: &str) -> Result<Option<String>> {
    match info {
        Ok(info) => match memory_policy(&info) {
            Policy::Safe => Ok(None),
            Policy::Evicting(policy, maxmemory) => {
                Ok(Some(eviction_risk(addr, &policy, maxmemory)))
            }
            Policy::Unreadable(why) => Err(Error::Config(unreadable_policy(addr, &why))),
        },
        // A refusal naming the check (INFO not granted or renamed) is
        // the check failing, not a policy found.
        Err(Error::Config(refused)) if refused.contains("memory-policy check") => {
            Err(Error::Config(refused))
        }
        Err(Error::Config(refused)) => Ok(Some(refused)),
        Err(e) => Err(e),
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
                let info: String = match ::redis::cmd("INFO").arg("memory").query(&mut con) {
                    Ok(info) => info,
                    Err(e) if refused_by_server(&e) => {
                        self.checkin(addr, con);
                        return Err(Error::Config(needs_info(addr, &e)));
                    }
                    Err(e) => return Err(cluster::client::map_err(e, addr)),
                };
                self.checkin(addr, con);
                Ok(info)
            });
            match run_time_verdict(info, addr) {
                Ok(risk) => risks.extend(risk),
                Err(e) => failed = Some(e),
            }
        }
        match (risks.is_empty(), failed) {
            (true, Some(e)) => Err(e),
            _ => Ok((!risks.is_empty()).then(|| risks.join("; "))),
        }
    }
}
