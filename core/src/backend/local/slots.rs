//! N-holder leases and the queue of waiting lines on Local.

use super::store::holder_from;
use super::store::ms;
use super::store::now_ns;
use super::store::ns;
use super::store::Local;
use crate::contract::adapter::Lease;
use crate::contract::info::{HolderInfo, Identity, LeaseInfo};
use crate::error::Result;
use crate::runtime::token::mint_token;
use rusqlite::{params, Connection, TransactionBehavior};
use std::time::{Duration, Instant};

pub(crate) const SLOT_SELECT: &str = "SELECT key, expires_ns, holder, fence, acquired_ms, renewed_ms, ttl_ms, heartbeat_ms, lim FROM slots";

/// N-holder leases (`slots` table): the same transactions, clocks and fence
/// counter as the exclusive leases. An exclusive acquire refuses a key with
/// a live slot, a slot acquire a key with a live exclusive lease.
impl Local {
    pub(crate) fn slots_live(
        &self,
        con: &Connection,
        key: &str,
        now: i64,
    ) -> rusqlite::Result<bool> {
        con.prepare_cached(
            "SELECT EXISTS(SELECT 1 FROM slots WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3)",
        )?
        .query_row(params![key, now, self.boot], |r| r.get(0))
    }

    pub(crate) fn acquire_slot(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        let token = mint_token()?;
        self.with_con(true, |con, _| {
            // As for an exclusive acquire: the fence reaches the disk first.
            con.pragma_update(None, "synchronous", "FULL")?;
            let fence = self.acquire_slot_in(con, key, &token, ttl, who, limit, line);
            let _ = con.pragma_update(None, "synchronous", "NORMAL");
            Ok(fence?.map(|fence| Lease::slot(key, token.clone(), fence, limit)))
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire_slot_in(
        &self,
        con: &mut Connection,
        key: &str,
        token: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        line: Option<&str>,
    ) -> rusqlite::Result<Option<u64>> {
        let tx = con.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ns();
        if self.live_lease(&tx, key, now)?.is_some() {
            return self.refuse_queued(tx, key, line, now);
        }
        tx.prepare_cached("DELETE FROM slots WHERE key = ?1 AND (expires_ns <= ?2 OR boot <> ?3)")?
            .execute(params![key, now, self.boot])?;
        let live: i64 = tx
            .prepare_cached("SELECT COUNT(*) FROM slots WHERE key = ?1")?
            .query_row(params![key], |r| r.get(0))?;
        if live >= i64::from(limit) {
            return self.refuse_queued(tx, key, line, now);
        }
        // Free slots go to the first `free` live lines queued (a line
        // further back, or a plain acquire, gets one only if fewer wait).
        let free = u32::try_from(i64::from(limit) - live).unwrap_or(0);
        let ahead = self.queue_head(&tx, key, now, free)?;
        let mine = line.is_some_and(|l| ahead.iter().any(|a| a == l));
        if !mine && ahead.len() >= free as usize {
            return self.refuse_queued(tx, key, line, now);
        }
        if let Some(line) = line {
            self.leave_queued(&tx, key, line, now)?;
        }
        let floor = i64::try_from(crate::contract::fence::floor_now()).unwrap_or(i64::MAX);
        let fence: i64 = tx
            .prepare_cached(
                "UPDATE meta SET value = max(value + 1, ?1) WHERE name = 'fence' RETURNING value",
            )?
            .query_row(params![floor], |r| r.get(0))?;
        tx.prepare_cached(
            "INSERT INTO slots (key, token, expires_ns, boot, lim, holder, fence, acquired_ms, renewed_ms, ttl_ms, heartbeat_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9, ?10)",
        )?
        .execute(params![
            key,
            token,
            now.saturating_add(ns(ttl)),
            self.boot,
            i64::from(limit),
            who.stored_label(),
            fence,
            floor / 1000,
            ms(ttl),
            ms(who.heartbeat)
        ])?;
        tx.commit()?;
        Ok(Some(fence as u64))
    }

    /// The release of `lease` (an exclusive lease or a slot), waiting for
    /// locks until `deadline` at the latest.
    pub(crate) fn release_until(&self, lease: &Lease, deadline: Instant) -> Result<bool> {
        let delete = if lease.slotted() {
            "DELETE FROM slots WHERE key = ?1 AND token = ?2 AND expires_ns > ?3 AND boot = ?4"
        } else {
            "DELETE FROM leases WHERE key = ?1 AND token = ?2 AND expires_ns > ?3 AND boot = ?4"
        };
        self.delete_owned(delete, lease, deadline)
    }

    /// A release: `delete` (parameters key, token, now, boot) of the live
    /// row `lease` owns, and in the same transaction the lines of the key's
    /// queue to tell: the next one, or for a slot the first `free` live
    /// ones (`free` = the slot's limit − live slots after the release, at
    /// least 1: the lines the slot acquire lets take them, so two releases
    /// in a row reach two lines). After the commit their doorbells are
    /// rung (a line that wakes finds its slot free). True if the row was
    /// deleted.
    pub(crate) fn delete_owned(
        &self,
        delete: &str,
        lease: &Lease,
        deadline: Instant,
    ) -> Result<bool> {
        let (deleted, next) = self.with_con_until(true, deadline, |con, now| {
            let tx = con.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx.prepare_cached(delete)?.execute(params![
                lease.key(),
                lease.token(),
                now,
                self.boot
            ])?;
            let count = if lease.slotted() {
                let live: i64 = tx
                    .prepare_cached(
                        "SELECT count(*) FROM slots WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3",
                    )?
                    .query_row(params![lease.key(), now, self.boot], |r| r.get(0))?;
                u32::try_from(i64::from(lease.limit()) - live).unwrap_or(0)
            } else {
                1
            };
            let next = self.next_lines(&tx, lease.key(), n == 1, now, count)?;
            tx.commit()?;
            Ok((n == 1, next))
        })?;
        self.ring_lines(lease.key(), &next);
        Ok(deleted)
    }

    /// Deletes every slot of `key`: whether one was live.
    pub(crate) fn break_slots_in(
        &self,
        con: &Connection,
        key: &str,
        now: i64,
    ) -> rusqlite::Result<bool> {
        let live = self.slots_live(con, key, now)?;
        con.prepare_cached("DELETE FROM slots WHERE key = ?1")?
            .execute(params![key])?;
        Ok(live)
    }

    /// The live slots of the keys `filter` selects (`?1`), grouped by key.
    pub(crate) fn slot_infos(
        &self,
        con: &Connection,
        filter: &str,
        arg: &str,
        now: i64,
    ) -> rusqlite::Result<Vec<LeaseInfo>> {
        let rows = con
            .prepare_cached(&format!(
                "{SLOT_SELECT} WHERE {filter} AND expires_ns > ?2 AND boot = ?3 ORDER BY key"
            ))?
            .query_map(params![arg, now, self.boot], |r| {
                let key: String = r.get(0)?;
                let expires: i64 = r.get(1)?;
                let limit: i64 = r.get(8)?;
                let left =
                    Duration::from_nanos(u64::try_from(expires.saturating_sub(now)).unwrap_or(0));
                Ok((key, holder_from(r, 2)?, limit, left))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut infos = Vec::new();
        let mut group: Vec<(HolderInfo, u32, Duration)> = Vec::new();
        let mut rows = rows.into_iter().peekable();
        while let Some((key, holder, limit, left)) = rows.next() {
            if let Some(holder) = holder {
                group.push((holder, u32::try_from(limit).unwrap_or(u32::MAX), left));
            }
            if rows.peek().is_none_or(|next| next.0 != key) {
                infos.extend(LeaseInfo::slotted(key, std::mem::take(&mut group)));
            }
        }
        Ok(infos)
    }

    pub(crate) fn slot_info_in(
        &self,
        con: &Connection,
        key: &str,
        now: i64,
    ) -> rusqlite::Result<Option<LeaseInfo>> {
        Ok(self.slot_infos(con, "key = ?1", key, now)?.pop())
    }

    pub(crate) fn slot_list_in(
        &self,
        con: &Connection,
        prefix: &str,
        now: i64,
    ) -> rusqlite::Result<Vec<LeaseInfo>> {
        self.slot_infos(con, "substr(key, 1, length(?1)) = ?1", prefix, now)
    }

    pub(crate) fn expires_in_con(
        &self,
        con: &Connection,
        key: &str,
        now: i64,
    ) -> rusqlite::Result<Option<Duration>> {
        let soonest: Option<i64> = con
            .prepare_cached(
                "SELECT coalesce((SELECT expires_ns FROM leases WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3), (SELECT min(expires_ns) FROM slots WHERE key = ?1 AND expires_ns > ?2 AND boot = ?3))",
            )?
            .query_row(params![key, now, self.boot], |r| r.get(0))?;
        Ok(soonest.map(|at| Duration::from_nanos(u64::try_from(at - now).unwrap_or(0))))
    }
}
