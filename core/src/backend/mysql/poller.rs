//! The tick poll of a [`super::MySql`] adapter, as the push source of the
//! one listener lifecycle ([`crate::contract::listen`]): MySQL has no
//! LISTEN/NOTIFY, so one connection per process and adapter, on the
//! listener's thread, asks every [`POLL_EVERY`] with ONE query about
//! everything the process watches: which of its stop flags are raised, and
//! which of its waiting lines may take their lease now (the key has a free
//! slot and the line is among the first lines that may take it). Each
//! answer is delivered as an announcement would be (a raise; a release to
//! the line), so the waiting layer and the holds need nothing else. Level,
//! not edge: an answer is found again at the next poll while it holds, so
//! a release between two polls is never lost. Nothing is watched: no
//! query (the listener retires).

use super::conn::Conn;
use super::sql::{hex, NOW_US};
use super::url::MyConfig;
use crate::contract::listen::{self, Heard, PushSource};
use crate::contract::push::{Interest, Registry};
use crate::error::Result;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// How often the poll runs while something is watched: the stop and
/// hand-off latency's floor (p99 ≤ the period + a round trip; 5 queries a
/// second per watching process; `docs/MYSQL.md` has the study).
pub(crate) const POLL_EVERY: Duration = Duration::from_millis(200);

/// A poller (see the module header).
pub(crate) struct Poller(listen::Listener<Polled>);

impl Poller {
    pub(crate) fn new(cfg: MyConfig, namespace: &str, timeout: Duration) -> Self {
        Poller(listen::Listener::new(
            Polled {
                cfg,
                namespace: namespace.to_owned(),
            },
            timeout,
        ))
    }

    /// Runs until nobody watches (the listener thread's body).
    pub(crate) fn run(&self, registry: &Registry) {
        self.0.run(registry);
    }
}

/// MySQL's part of the lifecycle.
pub(crate) struct Polled {
    cfg: MyConfig,
    namespace: String,
}

/// The poller's connection and what it asks about.
pub(crate) struct PollCon {
    con: Conn,
    /// Names of the watched interests ([`Polled::channel_of`]).
    names: BTreeSet<String>,
    next: Instant,
}

/// The name of a flag interest (`f`, NUL, key) or a line's (`l`, NUL, key,
/// NUL, line): keys and lines hold no NUL.
fn name_of(interest: &Interest) -> String {
    match interest {
        Interest::Flag(key) => format!("f\0{key}"),
        Interest::Line { key, line } => format!("l\0{key}\0{line}"),
    }
}

impl Polled {
    /// The one query of a poll: the raised flags and the lines that may
    /// take their key now, as `(name, "")` rows.
    fn query(&self, names: &BTreeSet<String>) -> Option<String> {
        let ns = hex(self.namespace.as_bytes());
        let (mut flags, mut lines) = (Vec::new(), Vec::new());
        for name in names {
            let mut parts = name.split('\0');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("f"), Some(key), None) => flags.push(hex(key.as_bytes())),
                (Some("l"), Some(key), Some(line)) => {
                    lines.push(format!(
                        "({},{})",
                        hex(key.as_bytes()),
                        hex(line.as_bytes())
                    ));
                }
                _ => {}
            }
        }
        let mut selects = Vec::new();
        if !flags.is_empty() {
            selects.push(format!(
                "SELECT 'f', k, NULL FROM @Pflags WHERE ns = {ns} AND k IN ({}) AND expires_us > {NOW_US}",
                flags.join(",")
            ));
        }
        if !lines.is_empty() {
            // live: the key's live leases; cap: their limit (1 when none
            // is live: at least the head may take it); ahead: the live
            // lines before this one.
            selects.push(format!(
                "SELECT 'l', q.k, q.line FROM @Pqueue q \
                 LEFT JOIN (SELECT k, COUNT(*) AS live, MAX(lim) AS cap FROM @Pleases \
                   WHERE ns = {ns} AND expires_us > {NOW_US} GROUP BY k) s ON s.k = q.k \
                 WHERE q.ns = {ns} AND (q.k, q.line) IN ({}) AND q.deadline_us > {NOW_US} \
                 AND COALESCE(s.live, 0) < COALESCE(s.cap, 1) \
                 AND (SELECT COUNT(*) FROM @Pqueue a WHERE a.ns = q.ns AND a.k = q.k \
                   AND a.deadline_us > {NOW_US} AND (a.queued_us < q.queued_us \
                   OR (a.queued_us = q.queued_us AND a.line < q.line))) \
                   < GREATEST(COALESCE(s.cap, 1) - COALESCE(s.live, 0), 1)",
                lines.join(",")
            ));
        }
        (!selects.is_empty())
            .then(|| super::sql::with_prefix(&selects.join(" UNION ALL "), &self.cfg.prefix))
    }

    fn poll(&self, con: &mut PollCon, deadline: Instant, heard: &mut Heard) -> Result<()> {
        con.next = Instant::now() + POLL_EVERY;
        let Some(sql) = self.query(&con.names) else {
            return Ok(());
        };
        let rows = con
            .con
            .query(&sql, deadline)?
            .map_err(|e| e.into_error(&self.cfg.describe()))?;
        for row in rows {
            let cell = |i: usize| row.get(i).and_then(|c| c.as_deref());
            match (cell(0), cell(1), cell(2)) {
                (Some("f"), Some(key), _) => heard.push((format!("f\0{key}"), b"1".to_vec())),
                (Some("l"), Some(key), Some(line)) => {
                    heard.push((format!("l\0{key}\0{line}"), b"0".to_vec()));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl PushSource for Polled {
    type Con = PollCon;
    /// Interests per batch (nothing is sent: the poll reads them all).
    const CHUNK: usize = 4096;

    fn connect(&self, deadline: Instant) -> Result<PollCon> {
        Ok(PollCon {
            con: Conn::connect(&self.cfg, deadline)?,
            names: BTreeSet::new(),
            next: Instant::now(),
        })
    }

    fn channel_of(&self, interest: &Interest) -> String {
        name_of(interest)
    }

    fn subscribe(
        &self,
        con: &mut PollCon,
        names: &[String],
        on: bool,
        _deadline: Instant,
        _heard: &mut Heard,
    ) -> Result<()> {
        for name in names {
            if on {
                con.names.insert(name.clone());
            } else {
                con.names.remove(name);
            }
        }
        Ok(())
    }

    /// Sleeps until `until` or the next poll, whichever is first; polls
    /// when it is due.
    fn read(&self, con: &mut PollCon, until: Instant, heard: &mut Heard) -> Result<()> {
        let now = Instant::now();
        if now < con.next {
            std::thread::sleep(con.next.min(until) - now);
        }
        if Instant::now() >= con.next {
            let deadline = Instant::now() + POLL_EVERY.max(Duration::from_secs(2));
            self.poll(con, deadline, heard)?;
        }
        Ok(())
    }

    /// The polls are the liveness check.
    fn ping(&self, con: &mut PollCon, _deadline: Instant, _heard: &mut Heard) -> Result<()> {
        let _ = con;
        Ok(())
    }
}
