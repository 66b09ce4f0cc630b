//! The [`Adapter`] of [`Local`]: each operation one statement or one short
//! transaction.

use super::store::lease_info;
use super::store::now_ns;
use super::store::ns;
use super::store::Local;
use super::store::BUSY_TIMEOUT;
use super::store::INFO_SELECT;
use crate::contract::adapter::acquire_dispatch;
use crate::contract::adapter::{Adapter, Beat, Lease, Renewal, Renewed};
use crate::contract::info::{FlagInfo, LeaseInfo, Listing};
use crate::contract::push::{FlagWatch, FlagWatcher};
use crate::error::{Error, Result};
use rusqlite::{params, OptionalExtension, TransactionBehavior};
use std::sync::Weak;
use std::time::{Duration, Instant};

impl Adapter for Local {
    acquire_dispatch!();

    crate::contract::adapter::acquire_reading_flag_in_process!();

    fn name(&self) -> &'static str {
        "local"
    }

    fn io_timeout(&self) -> Duration {
        BUSY_TIMEOUT
    }

    fn leave_queue(&self, key: &str, line: &str) -> Result<()> {
        // A leaving line that a release may have rung (one of the first
        // `w` live lines: `w` the free slots of an N-holder lease, at least
        // 1) rings the line that moves up into those `w`: the leaving line
        // now leaves without trying, and the next one must not sleep on
        // its timers while the key is free.
        let next = self.with_con(true, |con, now| {
            let tx = con.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let w = self.free_slots(&tx, key, now)?.0.max(1);
            let mut ahead = self.queue_head(&tx, key, now, w.saturating_add(1))?;
            let told = ahead.iter().take(w as usize).any(|l| l == line);
            tx.prepare_cached("DELETE FROM queue WHERE key = ?1 AND line = ?2")?
                .execute(params![key, line])?;
            tx.commit()?;
            Ok(match told && ahead.len() > w as usize {
                true => ahead.pop(),
                false => None,
            })
        })?;
        if let Some(next) = next {
            self.ring_next(key, &next);
        }
        Ok(())
    }

    fn renew_within(&self, renewal: &Renewal<'_>) -> Result<Renewed> {
        self.with_con(true, |con, now| self.renew_in(con, renewal, now))
    }

    fn release(&self, lease: &Lease) -> Result<bool> {
        self.release_until(lease, Instant::now() + BUSY_TIMEOUT)
    }

    fn release_by(&self, lease: &Lease, deadline: Instant) -> Result<bool> {
        // Waiting for the database's write lock ends at the earlier one.
        self.release_until(lease, deadline.min(Instant::now() + BUSY_TIMEOUT))
    }

    fn held(&self, key: &str) -> Result<bool> {
        self.with_con(false, |con, now| {
            Ok(self.live_lease(con, key, now)?.is_some() || self.slots_live(con, key, now)?)
        })
    }

    fn break_lease(&self, key: &str) -> Result<bool> {
        let (broken, next) = self.with_con(true, |con, now| {
            let tx = con.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx
                .prepare_cached(
                    "DELETE FROM leases WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3",
                )?
                .execute(params![key, now, self.boot])?;
            tx.prepare_cached("DELETE FROM leases WHERE key = ?1")?
                .execute(params![key])?;
            // Every slot is free after a break: as many lines as the limit.
            let limit = self.free_slots(&tx, key, now)?.1;
            let slots = self.break_slots_in(&tx, key, now)?;
            let broken = n == 1 || slots;
            let next = self.next_lines(&tx, key, broken, now, limit)?;
            tx.commit()?;
            Ok((broken, next))
        })?;
        self.ring_lines(key, &next);
        Ok(broken)
    }

    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()> {
        self.with_con(true, |con, now| {
            con.prepare_cached(
                "INSERT OR REPLACE INTO flags (key, expires_ns, boot) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![key, now.saturating_add(ns(ttl)), self.boot])?;
            Ok(())
        })?;
        // After the commit: a listener that wakes finds the flag up.
        self.ring_raised(key);
        Ok(())
    }

    #[cfg(target_os = "linux")]
    fn watch_flags(&self, watcher: Weak<dyn FlagWatcher>) -> Option<FlagWatch> {
        let db = self.path.clone();
        self.push.get().watch(watcher, move |registry| {
            crate::contract::listen::spawn("mistri-flags", move || {
                super::doorbell::run(&db, &registry)
            })
        })
    }

    fn flag(&self, key: &str) -> Result<bool> {
        self.with_con(false, |con, now| self.flag_in(con, key, now))
    }

    fn clear_flag(&self, key: &str) -> Result<()> {
        self.with_con(true, |con, _| {
            con.prepare_cached("DELETE FROM flags WHERE key = ?1")?
                .execute(params![key])?;
            Ok(())
        })
    }

    fn info(&self, key: &str) -> Result<Option<LeaseInfo>> {
        self.with_con(false, |con, now| {
            con.prepare_cached(&format!(
                "{INFO_SELECT} WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3"
            ))?
            .query_row(params![key, now, self.boot], |r| lease_info(r, now))
            .optional()?
            .map_or_else(|| self.slot_info_in(con, key, now), |info| Ok(Some(info)))
        })
    }

    fn expires_in(&self, key: &str) -> Result<Option<Duration>> {
        self.with_con(false, |con, now| self.expires_in_con(con, key, now))
    }

    fn list(&self, prefix: &str) -> Result<Listing> {
        let mut listing = self.with_con(false, |con, now| {
            // One read transaction: leases and flags of one moment.
            let tx = con.transaction_with_behavior(TransactionBehavior::Deferred)?;
            let live = "substr(key, 1, length(?1)) = ?1 AND expires_ns > ?2 AND boot = ?3";
            let leases = tx
                .prepare_cached(&format!("{INFO_SELECT} WHERE {live} ORDER BY key"))?
                .query_map(params![prefix, now, self.boot], |r| lease_info(r, now))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut leases = leases;
            leases.extend(self.slot_list_in(&tx, prefix, now)?);
            let flags = tx
                .prepare_cached(&format!(
                    "SELECT key, expires_ns FROM flags WHERE {live} ORDER BY key"
                ))?
                .query_map(params![prefix, now, self.boot], |r| {
                    let expires: i64 = r.get(1)?;
                    Ok(FlagInfo {
                        key: r.get(0)?,
                        time_left: Some(Duration::from_nanos(
                            u64::try_from(expires.saturating_sub(now)).unwrap_or(0),
                        )),
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let queued = tx
                .prepare_cached(&format!(
                    "SELECT key, since_ns FROM queue WHERE {live} ORDER BY key"
                ))?
                .query_map(params![prefix, now, self.boot], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            tx.commit()?;
            let mut listing = Listing {
                leases,
                flags,
                waiting: Vec::new(),
            };
            for lines in queued.chunk_by(|a, b| a.0 == b.0) {
                listing.add_waiting(
                    lines[0].0.clone(),
                    lines.iter().map(|(_, since)| *since),
                    |since| Duration::from_nanos(u64::try_from(now - since).unwrap_or(0)),
                );
            }
            Ok(listing)
        })?;
        listing.sort();
        Ok(listing)
    }

    fn beat(&self, renewals: &[Renewal<'_>], flags: &[&str], deadline: Instant) -> Result<Beat> {
        if renewals.is_empty() && flags.is_empty() {
            return Ok(Beat::default());
        }
        if deadline <= Instant::now() {
            return Err(Error::Connection(format!(
                "local lock database {}: no time left for this tick",
                self.path.display()
            )));
        }
        // One transaction for the whole tick: one write lock, one fsync.
        // Waiting for a lock is bounded by the tick's deadline.
        self.with_con_until(!renewals.is_empty(), deadline, |con, _| {
            let tx = con.transaction_with_behavior(if renewals.is_empty() {
                TransactionBehavior::Deferred
            } else {
                TransactionBehavior::Immediate
            })?;
            let now = now_ns();
            let renewed = renewals
                .iter()
                .map(|r| self.renew_in(&tx, r, now))
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let up = flags
                .iter()
                .map(|key| self.flag_in(&tx, key, now))
                .collect::<rusqlite::Result<Vec<_>>>()?;
            tx.commit()?;
            Ok(Beat {
                renewals: renewed.into_iter().map(Ok).collect(),
                flags: up.into_iter().map(Ok).collect(),
                server_clock: None,
            })
        })
    }
}
