//! `status` and `list`: a table for people, `--json` for scripts,
//! `--watch` to refresh.

use crate::{Failure, EXIT_NOT_HELD};
use mistri_locks::HolderInfo;
use mistri_locks::{operator, LeaseInfo, Listing, Locks};
use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

/// `text` made safe for a terminal: each C0 control byte, DEL and C1
/// control escaped (`\n`, `\r`, `\t`, `\x1b`, `\x7f`, `\u{9b}`), so a key,
/// label or flag cannot move the cursor, retitle the window (OSC), clear
/// the screen or, with a line feed, forge a row of the table. Everything
/// else (any other Unicode) is shown as it is.
pub fn term(text: &str) -> Cow<'_, str> {
    let control = |c: char| c.is_ascii_control() || ('\u{80}'..='\u{9f}').contains(&c);
    if !text.chars().any(control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii_control() => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if control(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// How to show what was found.
#[derive(clap::Args, Debug)]
pub struct View {
    /// Print JSON (one document; with --watch, one line per refresh).
    #[arg(long)]
    json: bool,
    /// Refresh every S seconds (default 1) until interrupted.
    #[arg(long, value_name = "S", num_args = 0..=1, default_missing_value = "1", value_parser = crate::duration)]
    watch: Option<Duration>,
}

/// What one look found: every lease under `prefix` (`listing.leases`), or
/// each asked-for key's lease (`keys`; `None`: free); the raised flags and
/// waiting lines to show are `listing`'s.
struct Look {
    prefix: Option<String>,
    keys: Vec<(String, Option<LeaseInfo>)>,
    listing: Listing,
}

impl Look {
    /// Each shown key and its lease (`None`: free).
    fn leases(&self) -> Vec<(&str, Option<&LeaseInfo>)> {
        match self.prefix {
            Some(_) => self
                .listing
                .leases
                .iter()
                .map(|l| (l.key.as_str(), Some(l)))
                .collect(),
            None => self
                .keys
                .iter()
                .map(|(k, l)| (k.as_str(), l.as_ref()))
                .collect(),
        }
    }

    /// The document `--json` prints: the operator's state document
    /// (`GET /api/state`), or its form for named keys.
    fn json(&self) -> String {
        let now = SystemTime::now();
        match &self.prefix {
            Some(prefix) => operator::state_json(&self.listing, prefix, now),
            None => operator::keys_json(&self.keys, &self.listing, now),
        }
    }
}

pub fn status(locks: &Locks, keys: &[String], view: &View) -> Result<i32, Failure> {
    repeat(view, || {
        if keys.is_empty() {
            return look_prefix(locks, "");
        }
        let found = keys
            .iter()
            .map(|k| Ok((k.clone(), locks.info(k)?)))
            .collect::<Result<Vec<_>, Failure>>()?;
        let mut listing = locks.list("")?;
        listing.leases.clear();
        listing
            .flags
            .retain(|f| keys.iter().any(|k| f.key.contains(k.as_str())));
        listing.waiting.retain(|w| keys.contains(&w.key));
        Ok(Look {
            prefix: None,
            keys: found,
            listing,
        })
    })
    .map(|look| {
        if look.keys.iter().all(|(_, l)| l.is_some()) {
            0
        } else {
            EXIT_NOT_HELD
        }
    })
}

pub fn list(locks: &Locks, prefix: &str, view: &View) -> Result<i32, Failure> {
    repeat(view, || look_prefix(locks, prefix)).map(|_| 0)
}

fn look_prefix(locks: &Locks, prefix: &str) -> Result<Look, Failure> {
    Ok(Look {
        prefix: Some(prefix.to_string()),
        keys: Vec::new(),
        listing: locks.list(prefix)?,
    })
}

/// Looks once, or every `--watch` interval until interrupted; prints each.
fn repeat(view: &View, mut look: impl FnMut() -> Result<Look, Failure>) -> Result<Look, Failure> {
    loop {
        let found = look()?;
        if view.json {
            crate::emit(&format!("{}\n", found.json()));
        } else {
            let mut text = String::new();
            if view.watch.is_some() {
                // Clear the screen and home the cursor.
                text.push_str("\x1b[H\x1b[2J");
            }
            text.push_str(&table(&found));
            crate::emit(&text);
        }
        match view.watch {
            None => return Ok(found),
            Some(every) => std::thread::sleep(every),
        }
    }
}

fn ago(t: SystemTime) -> Duration {
    SystemTime::now().duration_since(t).unwrap_or_default()
}

/// `0.35s`, `12.3s`, `4m05s`, `2h03m`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{s:.2}s")
    } else if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    } else {
        format!("{}h{:02}m", d.as_secs() / 3600, (d.as_secs() % 3600) / 60)
    }
}

fn table(look: &Look) -> String {
    let mut rows = vec![[
        "KEY",
        "HOLDER",
        "FENCE",
        "HELD FOR",
        "RENEWED",
        "LEFT",
        "TTL",
        "HEARTBEAT",
    ]
    .map(String::from)];
    let leases = look.leases();
    for &(key, info) in &leases {
        let row = match info {
            None => [
                term(key).into_owned(),
                "(free)".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ],
            Some(info) if info.holder.is_none() && !info.holders.is_empty() => {
                // An N-holder lease: a row per holder, `KEY [i/limit]`.
                let left = info.time_left.map(human).unwrap_or_else(|| "never".into());
                for (i, h) in info.holders.iter().enumerate() {
                    let cell = format!("{} [{}/{}]", term(key), i + 1, info.limit);
                    rows.push(holder_row(cell, h, left.clone()));
                }
                continue;
            }
            Some(info) => {
                let left = info.time_left.map(human).unwrap_or_else(|| "never".into());
                match &info.holder {
                    None => [
                        term(key).into_owned(),
                        "(not described)".into(),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                        left,
                        "-".into(),
                        "-".into(),
                    ],
                    Some(h) => holder_row(term(key).into_owned(), h, left),
                }
            }
        };
        rows.push(row);
    }
    let mut out = String::new();
    if leases.is_empty() {
        out.push_str("no live leases\n");
    } else {
        out.push_str(&columns(&rows));
    }
    if look.listing.flags.is_empty() {
        out.push_str("no flags up\n");
    } else {
        let mut flag_rows = vec![["FLAG UP".to_string(), "LEFT".to_string()]];
        for f in &look.listing.flags {
            flag_rows.push([
                term(&f.key).into_owned(),
                f.time_left.map(human).unwrap_or_else(|| "never".into()),
            ]);
        }
        out.push('\n');
        out.push_str(&columns(&flag_rows));
    }
    out
}

/// A table row for holder `h` of the lease in `key_cell`.
fn holder_row(key_cell: String, h: &HolderInfo, left: String) -> [String; 8] {
    [
        key_cell,
        term(&h.label).into_owned(),
        h.fence.to_string(),
        human(ago(h.acquired_at)),
        format!("{} ago", human(ago(h.renewed_at))),
        left,
        human(h.ttl),
        if h.heartbeat.is_zero() {
            "-".into()
        } else {
            human(h.heartbeat)
        },
    ]
}

fn columns<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::term;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(term("plain key: é ✓"), "plain key: é ✓");
        assert_eq!(
            term("a\x1b]0;title\x07b\r\nc\td\x7f\u{9b}2J\0"),
            "a\\x1b]0;title\\x07b\\r\\nc\\td\\x7f\\u{9b}2J\\x00"
        );
    }
}
