//! The [`Adapter`] of [`Postgres`]: each operation one statement on a
//! pooled connection ([`super::sql`]).

use super::conn::Row;
use super::listener::Listener;
use super::sql::{int_array, text_array};
use super::url::Listen;
use super::Postgres;
use crate::args::millis_ceil;
use crate::contract::adapter::acquire_dispatch;
use crate::contract::adapter::{Adapter, Beat, Lease, Renewal, Renewed};
use crate::contract::info::{
    from_unix_millis, unpack_label, FlagInfo, HolderInfo, Identity, LeaseInfo, Listing, WaitingInfo,
};
use crate::contract::push::{FlagWatch, FlagWatcher};
use crate::error::{Error, Result};
use crate::runtime::token::mint_token;
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

/// `$1` ns, `$2` prefix: the keys under the prefix with live waiting lines
/// (the `queue` table, [`crate::WaitingInfo`]), how many, and the ms the
/// head line has waited, by the database clock. Plain SQL over the table:
/// no schema function.
pub(crate) const LIST_QUEUES: &str = "SELECT q.key, count(*), \
     floor(extract(epoch FROM (clock_timestamp() - min(q.queued_at))) * 1000)::bigint \
     FROM @S.queue q WHERE q.ns = $1 AND left(q.key, length($2)) = $2 \
     AND q.deadline > clock_timestamp() GROUP BY q.key ORDER BY q.key";

impl Postgres {
    fn unexpected(&self, what: &str, rows: &[Row]) -> Error {
        Error::Backend(format!(
            "Postgres at {} sent an unexpected {what} reply: {rows:?}",
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

    fn bool_of(&self, what: &str, rows: &[Row]) -> Result<bool> {
        match rows {
            [row] if row.len() == 1 => match row[0].as_deref() {
                Some("t") => Ok(true),
                Some("f") => Ok(false),
                _ => Err(self.unexpected(what, rows)),
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
        let (ttl_ms, hb_ms) = (
            millis_ceil(ttl).to_string(),
            ms_or_zero(who.heartbeat).to_string(),
        );
        let line_channel = line.map(|line| self.line_channel(key, line));
        let (limit_text, queue_ms) = (
            limit.max(1).to_string(),
            millis_ceil(crate::contract::QUEUE_ENTRY_TTL).to_string(),
        );
        let rows = self.run(
            &self.sql.acquire,
            &[
                Some(&self.namespace),
                Some(key),
                Some(&token),
                Some(&ttl_ms),
                Some(&who.stored_label()),
                Some(&hb_ms),
                Some(&limit_text),
                line,
                Some(&queue_ms),
                line_channel.as_deref(),
            ],
        )?;
        let fence = self.int_of("acquire", &rows)?.unwrap_or(0);
        let fence = u64::try_from(fence).unwrap_or(0);
        Ok((fence > 0).then(|| {
            if limit > 1 {
                Lease::slot(key, token, fence, limit)
            } else {
                Lease::new(key, token, fence)
            }
        }))
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

    fn renewed(&self, answer: Option<i64>) -> Result<Renewed> {
        match answer {
            Some(1) => Ok(Renewed::Yes),
            Some(0) => Ok(Renewed::NotHeld),
            Some(-1) => Ok(Renewed::TooLate),
            other => Err(Error::Backend(format!(
                "Postgres at {} answered a renewal with {other:?}",
                self.addr
            ))),
        }
    }

    /// A lease row as its holder's description, limit and time left.
    fn holder_of(&self, row: &Row) -> Result<(String, HolderInfo, u32, Duration)> {
        let bad = || {
            Error::Backend(format!(
                "Postgres at {} sent a bad lease row: {row:?}",
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
}

impl Adapter for Postgres {
    acquire_dispatch!();

    fn name(&self) -> &'static str {
        "postgres"
    }

    fn io_timeout(&self) -> Duration {
        self.timeout
    }

    fn leave_queue(&self, key: &str, line: &str) -> Result<()> {
        self.run(
            &self.sql.leave_queue,
            &[Some(&self.namespace), Some(key), Some(line)],
        )
        .map(drop)
    }

    fn renew_within(&self, renewal: &Renewal<'_>) -> Result<Renewed> {
        let lease = renewal.lease;
        let (ttl, min) = (
            millis_ceil(renewal.ttl).to_string(),
            ms_or_zero(renewal.min_left).to_string(),
        );
        let rows = self.run(
            &self.sql.renew,
            &[
                Some(&self.namespace),
                Some(lease.key()),
                Some(lease.token()),
                Some(&ttl),
                Some(&min),
            ],
        )?;
        let answer = self.int_of("renew", &rows)?;
        self.renewed(answer)
    }

    fn release(&self, lease: &Lease) -> Result<bool> {
        self.release_by(lease, Instant::now() + self.timeout)
    }

    fn release_by(&self, lease: &Lease, deadline: Instant) -> Result<bool> {
        let fence = lease.fence().to_string();
        let rows = self.run_by(
            &self.sql.release,
            &[
                Some(&self.namespace),
                Some(lease.key()),
                Some(lease.token()),
                Some(&fence),
            ],
            deadline,
        )?;
        Ok(self.int_of("release", &rows)? == Some(1))
    }

    fn held(&self, key: &str) -> Result<bool> {
        let rows = self.run(&self.sql.held, &[Some(&self.namespace), Some(key)])?;
        self.bool_of("held", &rows)
    }

    fn expires_in(&self, key: &str) -> Result<Option<Duration>> {
        let rows = self.run(&self.sql.expires_in, &[Some(&self.namespace), Some(key)])?;
        Ok(self
            .int_of("expires_in", &rows)?
            .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
    }

    fn break_lease(&self, key: &str) -> Result<bool> {
        let rows = self.run(&self.sql.break_lease, &[Some(&self.namespace), Some(key)])?;
        Ok(self.int_of("break", &rows)?.unwrap_or(0) > 0)
    }

    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()> {
        let ttl = millis_ceil(ttl).to_string();
        let channel = self.flag_channel(key);
        self.run(
            &self.sql.set_flag,
            &[Some(&self.namespace), Some(key), Some(&ttl), Some(&channel)],
        )
        .map(drop)
    }

    fn flag(&self, key: &str) -> Result<bool> {
        let rows = self.run(&self.sql.flag, &[Some(&self.namespace), Some(key)])?;
        self.bool_of("flag", &rows)
    }

    fn clear_flag(&self, key: &str) -> Result<()> {
        self.run(&self.sql.clear_flag, &[Some(&self.namespace), Some(key)])
            .map(drop)
    }

    fn watch_flags(&self, watcher: Weak<dyn FlagWatcher>) -> Option<FlagWatch> {
        let target = match &self.cfg.listen {
            Listen::Off => return None,
            Listen::Same => self.cfg.target.clone(),
            Listen::At(t) => t.clone(),
        };
        let listener = Listener::new(self.cfg.clone(), target, &self.namespace, self.timeout);
        self.push.get().watch(watcher, move |registry| {
            crate::contract::listen::spawn("mistri-flags", move || listener.run(&registry))
        })
    }

    fn info(&self, key: &str) -> Result<Option<LeaseInfo>> {
        let rows = self.run(&self.sql.info, &[Some(&self.namespace), Some(key)])?;
        self.info_of(key, &rows)
    }

    fn list(&self, prefix: &str) -> Result<Listing> {
        let ns = Some(self.namespace.as_str());
        let rows = self.run(&self.sql.list_leases, &[ns, Some(prefix)])?;
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
        for row in self.run(&self.sql.list_flags, &[ns, Some(prefix)])? {
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
        for row in self.run(&self.sql.list_queues, &[ns, Some(prefix)])? {
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
        let keys = text_array(renewals.iter().map(|r| r.lease.key()));
        let tokens = text_array(renewals.iter().map(|r| r.lease.token()));
        let ttls = int_array(renewals.iter().map(|r| millis_ceil(r.ttl)));
        let mins = int_array(renewals.iter().map(|r| ms_or_zero(r.min_left)));
        let flag_keys = text_array(flags.iter().copied());
        let rows = self.run_by(
            &self.sql.beat,
            &[
                Some(&self.namespace),
                Some(&keys),
                Some(&tokens),
                Some(&ttls),
                Some(&mins),
                Some(&flag_keys),
            ],
            deadline,
        )?;
        let missing = || {
            Error::Backend(format!(
                "Postgres at {} left an item of the heartbeat unanswered",
                self.addr
            ))
        };
        let mut beat = Beat {
            renewals: (0..renewals.len()).map(|_| Err(missing())).collect(),
            flags: (0..flags.len()).map(|_| Err(missing())).collect(),
            // The server's clock of the last row (every row reads it).
            server_clock: rows
                .last()
                .and_then(|row| row.get(3).cloned().flatten())
                .and_then(|us| us.parse::<u64>().ok())
                .map(Duration::from_micros),
        };
        for row in &rows {
            let (Some(Some(kind)), Some(Some(i)), Some(answer)) =
                (row.first(), row.get(1), row.get(2))
            else {
                return Err(self.unexpected("heartbeat", &rows));
            };
            let Some(i) = i.parse::<usize>().ok().and_then(|i| i.checked_sub(1)) else {
                return Err(self.unexpected("heartbeat", &rows));
            };
            let answer = answer.as_deref().and_then(|a| a.parse::<i64>().ok());
            match kind.as_str() {
                "r" if i < renewals.len() => beat.renewals[i] = self.renewed(answer),
                "f" if i < flags.len() => beat.flags[i] = Ok(answer == Some(1)),
                _ => return Err(self.unexpected("heartbeat", &rows)),
            }
        }
        Ok(beat)
    }
}
