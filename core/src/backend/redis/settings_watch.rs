//! The heartbeat's run-time check of the memory policy ([`super::settings`]):
//! one `INFO memory` per adapter and server per period, for a single
//! server or Sentinel's current master ([`Redis::memory_risk`]) and for
//! every master of a Cluster ([`RedisCluster::memory_risk`]). Apart from
//! the checks themselves so that `settings` (used by the connect paths of
//! `server` and `cluster::client`) imports neither.

use super::cluster::{self, RedisCluster};
use super::io::MIN_IO;
use super::server::Redis;
use super::settings::{evicting_policy, eviction_risk, SETTINGS_CHECK_EVERY};
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
