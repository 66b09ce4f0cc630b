//! The [`Adapter`] of [`MySql`]: each operation one `CALL` (one short
//! transaction) or one autocommit statement; the beat one short
//! transaction in one round trip ([`super::sql`]).

use super::conn::Row;
use super::poller::Poller;
use super::sql::{hex, hex_or_null, NOW_US};
use super::MySql;
use crate::args::millis_ceil;
use crate::contract::adapter::acquire_dispatch;
use crate::contract::adapter::{Adapter, Beat, Lease, Renewal, Renewed};
use crate::contract::info::{
    from_unix_millis, unpack_label, FlagInfo, HolderInfo, Identity, LeaseInfo, Listing, WaitingInfo,
};
use crate::contract::push::{FlagWatch, FlagWatcher};
use crate::error::{Error, Result};
use crate::runtime::token::mint_token;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Weak;
use std::time::{Duration, Instant};

/// 0 for no duration, else whole ms rounded up.
fn ms_or_zero(d: Duration) -> u64 {
    if d.is_zero() {
        0
    } else {
        millis_ceil(d)
    }
}

/// The columns of a lease row as `info` and `list` read them: key, fence,
/// limit, ms left, acquired ms, renewed ms, ttl ms, heartbeat ms, label.
fn lease_columns() -> String {
    format!(
        "k, fence, lim, FLOOR((expires_us - {NOW_US}) / 1000), FLOOR(acquired_us / 1000), \
         FLOOR(renewed_us / 1000), ttl_ms, heartbeat_ms, label"
    )
}

/// The most SQL one beat statement carries (then it is split).
const BEAT_BYTES: usize = 8 << 20;

/// One acquire in 64 also sweeps a few long-dead rows of other keys.
const SWEEP_ONE_IN: u32 = 64;

impl MySql {
    fn ns(&self) -> String {
        hex(self.namespace.as_bytes())
    }

    fn unexpected(&self, what: &str, rows: &[Row]) -> Error {
        Error::Backend(format!(
            "MySQL at {} sent an unexpected {what} reply: {rows:?}",
            self.addr
        ))
    }

    /// The one integer a statement answered (`None` for SQL NULL).
    fn int_of(&self, what: &str, rows: &[Row]) -> Result<Option<i64>> {
        match rows {
            [row] if row.len() == 1 => match row[0].as_deref() {
                None => Ok(None),
                Some(t) => t
                    .parse::<i64>()
                    .map(Some)
                    .map_err(|_| self.unexpected(what, rows)),
            },
            _ => Err(self.unexpected(what, rows)),
        }
    }

    /// Acquire of an exclusive lease (`limit` 1) or of one slot.
    fn acquire_row(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        let token = mint_token()?;
        let call = self.p(&format!(
            "CALL @Pacquire({}, {}, {}, {}, {}, {}, {}, {}, {})",
            self.ns(),
            hex(key.as_bytes()),
            hex(token.as_bytes()),
            millis_ceil(ttl),
            hex(who.stored_label().as_bytes()),
            ms_or_zero(who.heartbeat),
            limit.max(1),
            hex_or_null(line),
            millis_ceil(crate::contract::QUEUE_ENTRY_TTL),
        ));
        let rows = self.run(&call)?;
        let fence = self.int_of("acquire", &rows)?.unwrap_or(0);
        if getrandom::u32().unwrap_or(1).is_multiple_of(SWEEP_ONE_IN) {
            self.sweep();
        }
        let fence = u64::try_from(fence).unwrap_or(0);
        Ok((fence > 0).then(|| {
            if limit > 1 {
                Lease::slot(key, token, fence, limit)
            } else {
                Lease::new(key, token, fence)
            }
        }))
    }

    /// Deletes a few rows dead for over a minute, of any key (best effort).
    fn sweep(&self) {
        let old = format!("{NOW_US} - 60000000");
        let _ = self.run(&self.p(&format!(
            "DELETE FROM @Pleases WHERE expires_us < {old} LIMIT 32; \
             DELETE FROM @Pflags WHERE expires_us < {old} LIMIT 32; \
             DELETE FROM @Pqueue WHERE deadline_us < {old} LIMIT 32"
        )));
    }

    fn acquire_exclusive(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        self.acquire_row(key, ttl, who, 1, line)
    }

    fn acquire_slot(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        self.acquire_row(key, ttl, who, limit, line)
    }

    /// A lease row as its holder's description, limit and time left.
    fn holder_of(&self, row: &Row) -> Result<(String, HolderInfo, u32, Duration)> {
        let bad = || {
            Error::Backend(format!(
                "MySQL at {} sent a bad lease row: {row:?}",
                self.addr
            ))
        };
        let num = |i: usize| -> Result<i64> {
            row.get(i)
                .and_then(|c| c.as_deref())
                .and_then(|t| t.parse::<i64>().ok())
                .ok_or_else(bad)
        };
        let ms = |i: usize| -> Result<u64> { Ok(u64::try_from(num(i)?).unwrap_or(0)) };
        let key = row.first().and_then(|c| c.clone()).ok_or_else(bad)?;
        let label = row.get(8).and_then(|c| c.clone()).ok_or_else(bad)?;
        let (label, stop_key) = unpack_label(label);
        let holder = HolderInfo {
            label,
            stop_key,
            fence: ms(1)?,
            acquired_at: from_unix_millis(ms(4)?),
            renewed_at: from_unix_millis(ms(5)?),
            ttl: Duration::from_millis(ms(6)?),
            heartbeat: Duration::from_millis(ms(7)?),
        };
        let limit = u32::try_from(num(2)?).unwrap_or(1).max(1);
        Ok((key, holder, limit, Duration::from_millis(ms(3)?)))
    }

    /// The live rows of one key as its description.
    fn info_of(&self, key: &str, rows: &[Row]) -> Result<Option<LeaseInfo>> {
        let mut holders = Vec::with_capacity(rows.len());
        for row in rows {
            let (_, holder, limit, left) = self.holder_of(row)?;
            holders.push((holder, limit, left));
        }
        match holders.as_slice() {
            [] => Ok(None),
            [(holder, 1, left)] => Ok(Some(LeaseInfo::exclusive(
                key.to_owned(),
                Some(*left),
                Some(holder.clone()),
            ))),
            _ => Ok(LeaseInfo::slotted(key.to_owned(), holders)),
        }
    }

    /// The statement of one beat: one short transaction that locks the
    /// renewed rows first (so the clock the `UPDATE` reads is after every
    /// lock it needs), renews each group of equal ttl and least life left
    /// with one `UPDATE`, tagging the rows it renewed, then reads the
    /// outcome, the raised flags and the clock in one `SELECT`.
    fn beat_sql(&self, renewals: &[Renewal<'_>], flags: &[&str], tag: u64) -> String {
        let ns = self.ns();
        let mut out = String::new();
        // The rows of `items` by primary key: one row as equalities (a
        // one-element row `IN` is planned as a prefix range in an UPDATE,
        // which locks every row of the namespace), several as a row `IN`
        // (one point range each); the statements also force the primary
        // key (with few rows the expiry index looks cheaper, and its range
        // locks other holders' rows: beats of other processes deadlocked).
        let pairs = |items: &[&Renewal<'_>]| {
            if let [r] = items {
                return format!(
                    "ns = {ns} AND k = {} AND token = {}",
                    hex(r.lease.key().as_bytes()),
                    hex(r.lease.token().as_bytes())
                );
            }
            let mut s = String::from("(ns, k, token) IN (");
            for (i, r) in items.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                let _ = write!(
                    s,
                    "({ns},{},{})",
                    hex(r.lease.key().as_bytes()),
                    hex(r.lease.token().as_bytes())
                );
            }
            s.push(')');
            s
        };
        let all: Vec<&Renewal<'_>> = renewals.iter().collect();
        let all_pairs = pairs(&all);
        if !renewals.is_empty() {
            let mut groups: HashMap<(u64, u64), Vec<&Renewal<'_>>> = HashMap::new();
            for r in renewals {
                groups
                    .entry((millis_ceil(r.ttl), ms_or_zero(r.min_left)))
                    .or_default()
                    .push(r);
            }
            let _ = write!(
                out,
                "START TRANSACTION; SELECT COUNT(*) FROM @Pleases FORCE INDEX (PRIMARY) \
                 WHERE {all_pairs} FOR UPDATE; "
            );
            for ((ttl, min), items) in &groups {
                let _ = write!(
                    out,
                    "UPDATE @Pleases FORCE INDEX (PRIMARY) SET expires_us = {NOW_US} + {ttl} * 1000, \
                     renewed_us = {NOW_US}, ttl_ms = {ttl}, beat_tag = {tag} \
                     WHERE {} AND expires_us > {NOW_US} \
                     AND expires_us - {NOW_US} >= {min} * 1000; ",
                    pairs(items)
                );
            }
        }
        let mut selects = Vec::new();
        if !renewals.is_empty() {
            selects.push(format!(
                "SELECT 'r', k, token, IF(beat_tag = {tag}, 1, IF(expires_us > {NOW_US}, -1, 0)) \
                 FROM @Pleases FORCE INDEX (PRIMARY) WHERE {all_pairs}"
            ));
        }
        if !flags.is_empty() {
            let keys: Vec<String> = flags.iter().map(|k| hex(k.as_bytes())).collect();
            selects.push(format!(
                "SELECT 'f', k, NULL, 1 FROM @Pflags WHERE ns = {ns} AND k IN ({}) \
                 AND expires_us > {NOW_US}",
                keys.join(",")
            ));
        }
        selects.push(format!("SELECT 'c', NULL, NULL, {NOW_US}"));
        out.push_str(&selects.join(" UNION ALL "));
        if !renewals.is_empty() {
            out.push_str("; COMMIT");
        }
        self.p(&out)
    }
}

impl Adapter for MySql {
    acquire_dispatch!();

    fn name(&self) -> &'static str {
        "mysql"
    }

    fn io_timeout(&self) -> Duration {
        self.timeout
    }

    fn leave_queue(&self, key: &str, line: &str) -> Result<()> {
        self.run(&self.p(&format!(
            "CALL @Pleave_queue({}, {}, {})",
            self.ns(),
            hex(key.as_bytes()),
            hex(line.as_bytes())
        )))
        .map(drop)
    }

    fn renew_within(&self, renewal: &Renewal<'_>) -> Result<Renewed> {
        let beat = self.beat(
            std::slice::from_ref(renewal),
            &[],
            Instant::now() + self.timeout,
        )?;
        beat.renewals
            .into_iter()
            .next()
            .unwrap_or_else(|| Err(self.unexpected("renew", &[])))
    }

    fn release(&self, lease: &Lease) -> Result<bool> {
        self.release_by(lease, Instant::now() + self.timeout)
    }

    fn release_by(&self, lease: &Lease, deadline: Instant) -> Result<bool> {
        let rows = self.run_by(
            &self.p(&format!(
                "CALL @Prelease({}, {}, {})",
                self.ns(),
                hex(lease.key().as_bytes()),
                hex(lease.token().as_bytes())
            )),
            deadline,
        )?;
        Ok(self.int_of("release", &rows)? == Some(1))
    }

    fn held(&self, key: &str) -> Result<bool> {
        let rows = self.run(&self.p(&format!(
            "SELECT EXISTS (SELECT 1 FROM @Pleases WHERE ns = {} AND k = {} AND expires_us > {NOW_US})",
            self.ns(),
            hex(key.as_bytes())
        )))?;
        Ok(self.int_of("held", &rows)? == Some(1))
    }

    fn expires_in(&self, key: &str) -> Result<Option<Duration>> {
        let rows = self.run(&self.p(&format!(
            "SELECT CAST(CEIL((MIN(expires_us) - {NOW_US}) / 1000) AS SIGNED) FROM @Pleases \
             WHERE ns = {} AND k = {} AND expires_us > {NOW_US}",
            self.ns(),
            hex(key.as_bytes())
        )))?;
        Ok(self
            .int_of("expires_in", &rows)?
            .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
    }

    fn break_lease(&self, key: &str) -> Result<bool> {
        let rows = self.run(&self.p(&format!(
            "CALL @Pbreak({}, {})",
            self.ns(),
            hex(key.as_bytes())
        )))?;
        Ok(self.int_of("break", &rows)?.unwrap_or(0) > 0)
    }

    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()> {
        let ttl = millis_ceil(ttl);
        self.run(&self.p(&format!(
            "INSERT INTO @Pflags (ns, k, raised_us, expires_us) \
             VALUES ({}, {}, {NOW_US}, {NOW_US} + {ttl} * 1000) \
             ON DUPLICATE KEY UPDATE raised_us = {NOW_US}, expires_us = {NOW_US} + {ttl} * 1000",
            self.ns(),
            hex(key.as_bytes())
        )))
        .map(drop)
    }

    fn flag(&self, key: &str) -> Result<bool> {
        let rows = self.run(&self.p(&format!(
            "SELECT EXISTS (SELECT 1 FROM @Pflags WHERE ns = {} AND k = {} AND expires_us > {NOW_US})",
            self.ns(),
            hex(key.as_bytes())
        )))?;
        Ok(self.int_of("flag", &rows)? == Some(1))
    }

    fn clear_flag(&self, key: &str) -> Result<()> {
        self.run(&self.p(&format!(
            "DELETE FROM @Pflags WHERE ns = {} AND k = {}",
            self.ns(),
            hex(key.as_bytes())
        )))
        .map(drop)
    }

    fn watch_flags(&self, watcher: Weak<dyn FlagWatcher>) -> Option<FlagWatch> {
        let poller = Poller::new(self.cfg.clone(), &self.namespace, self.timeout);
        self.push.get().watch(watcher, move |registry| {
            crate::contract::listen::spawn("mistri-flags", move || poller.run(&registry))
        })
    }

    fn info(&self, key: &str) -> Result<Option<LeaseInfo>> {
        let rows = self.run(&self.p(&format!(
            "SELECT {} FROM @Pleases WHERE ns = {} AND k = {} AND expires_us > {NOW_US} ORDER BY fence",
            lease_columns(),
            self.ns(),
            hex(key.as_bytes())
        )))?;
        self.info_of(key, &rows)
    }

    fn list(&self, prefix: &str) -> Result<Listing> {
        let under = format!(
            "ns = {} AND LEFT(k, {}) = {}",
            self.ns(),
            prefix.len(),
            hex(prefix.as_bytes())
        );
        let rows = self.run(&self.p(&format!(
            "SELECT {} FROM @Pleases WHERE {under} AND expires_us > {NOW_US} ORDER BY k, fence",
            lease_columns()
        )))?;
        let mut listing = Listing::default();
        let mut start = 0;
        while start < rows.len() {
            let key = rows[start].first().cloned().flatten().unwrap_or_default();
            let end = rows[start..]
                .iter()
                .position(|r| r.first().cloned().flatten().as_deref() != Some(key.as_str()))
                .map_or(rows.len(), |n| start + n);
            if let Some(info) = self.info_of(&key, &rows[start..end])? {
                listing.leases.push(info);
            }
            start = end;
        }
        let flags = self.run(&self.p(&format!(
            "SELECT k, FLOOR((expires_us - {NOW_US}) / 1000) FROM @Pflags \
             WHERE {under} AND expires_us > {NOW_US} ORDER BY k"
        )))?;
        for row in flags {
            let key = row.first().cloned().flatten().unwrap_or_default();
            let left = row
                .get(1)
                .and_then(|c| c.as_deref())
                .and_then(|t| t.parse::<i64>().ok())
                .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
            listing.flags.push(FlagInfo {
                key,
                time_left: left,
            });
        }
        let queues = self.run(&self.p(&format!(
            "SELECT k, COUNT(*), FLOOR(({NOW_US} - MIN(queued_us)) / 1000) FROM @Pqueue \
             WHERE {under} AND deadline_us > {NOW_US} GROUP BY k ORDER BY k"
        )))?;
        for row in queues {
            let cell = |i: usize| row.get(i).and_then(|c| c.as_deref());
            let number = |i: usize| cell(i).and_then(|t| t.parse::<i64>().ok()).unwrap_or(0);
            listing.waiting.push(WaitingInfo {
                key: cell(0).unwrap_or_default().to_owned(),
                lines: u32::try_from(number(1)).unwrap_or(u32::MAX),
                oldest_wait: Duration::from_millis(u64::try_from(number(2)).unwrap_or(0)),
            });
        }
        listing.sort();
        Ok(listing)
    }

    fn beat(&self, renewals: &[Renewal<'_>], flags: &[&str], deadline: Instant) -> Result<Beat> {
        if renewals.is_empty() && flags.is_empty() {
            return Ok(Beat::default());
        }
        // Only a lease's holder renews its row, so a tag need only differ
        // from this process's earlier beats: a counter.
        static TAG: AtomicU64 = AtomicU64::new(0);
        let tag = TAG.fetch_add(1, Ordering::Relaxed) + 1;
        // One statement per BEAT_BYTES of renewals (about 8,000 of 1 KiB
        // keys, 50,000 of short ones): under the server's
        // `max_allowed_packet` (16 MiB on MariaDB, 64 MiB on MySQL 8).
        let mut rows = Vec::new();
        let (mut start, mut first) = (0, true);
        while first || start < renewals.len() {
            let mut end = start;
            let mut bytes = 0;
            while end < renewals.len() && (end == start || bytes < BEAT_BYTES) {
                let r = &renewals[end];
                bytes +=
                    6 * (self.namespace.len() + r.lease.key().len() + r.lease.token().len()) + 64;
                end += 1;
            }
            let its_flags = if first { flags } else { &[] };
            rows.extend(self.run_by(
                &self.beat_sql(&renewals[start..end], its_flags, tag),
                deadline,
            )?);
            (start, first) = (end, false);
        }
        let mut by_lease: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
        for (i, r) in renewals.iter().enumerate() {
            by_lease
                .entry((r.lease.key(), r.lease.token()))
                .or_default()
                .push(i);
        }
        let mut by_flag: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, k) in flags.iter().enumerate() {
            by_flag.entry(k).or_default().push(i);
        }
        // What no row names: a renewal whose row is gone, a flag that is down.
        let mut beat = Beat {
            renewals: (0..renewals.len()).map(|_| Ok(Renewed::NotHeld)).collect(),
            flags: (0..flags.len()).map(|_| Ok(false)).collect(),
            server_clock: None,
        };
        let mut clock_seen = false;
        for row in &rows {
            let cell = |i: usize| row.get(i).and_then(|c| c.as_deref());
            match (cell(0), cell(1), cell(2), cell(3)) {
                (Some("r"), Some(k), Some(t), Some(answer)) => {
                    let renewed = match answer {
                        "1" => Renewed::Yes,
                        "-1" => Renewed::TooLate,
                        _ => Renewed::NotHeld,
                    };
                    for &i in by_lease.get(&(k, t)).map_or(&[][..], Vec::as_slice) {
                        beat.renewals[i] = Ok(renewed);
                    }
                }
                (Some("f"), Some(k), _, _) => {
                    for &i in by_flag.get(k).map_or(&[][..], Vec::as_slice) {
                        beat.flags[i] = Ok(true);
                    }
                }
                (Some("c"), _, _, Some(us)) => {
                    clock_seen = true;
                    beat.server_clock = us.parse::<u64>().ok().map(Duration::from_micros);
                }
                // The row count of the locking read.
                (Some(_), None, None, None) if row.len() == 1 => {}
                _ => return Err(self.unexpected("heartbeat", &rows)),
            }
        }
        if !clock_seen {
            return Err(self.unexpected("heartbeat", &rows));
        }
        Ok(beat)
    }
}
