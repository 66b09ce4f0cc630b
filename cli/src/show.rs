//! `status` and `list`: a table for people, `--json` for scripts,
//! `--watch` to refresh.

use crate::{Failure, EXIT_NOT_HELD};
use mistri_locks::HolderInfo;
use mistri_locks::{FlagInfo, LeaseInfo, Locks};
use serde_json::{json, Value};
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

/// What one look found: each asked-for key's lease (or `None`: free), and
/// the raised flags.
struct Look {
    leases: Vec<(String, Option<LeaseInfo>)>,
    flags: Vec<FlagInfo>,
}

pub fn status(locks: &Locks, keys: &[String], view: &View) -> Result<i32, Failure> {
    repeat(view, || {
        if keys.is_empty() {
            return look_prefix(locks, "");
        }
        let leases = keys
            .iter()
            .map(|k| Ok((k.clone(), locks.info(k)?)))
            .collect::<Result<Vec<_>, Failure>>()?;
        let flags = locks
            .list("")?
            .flags
            .into_iter()
            .filter(|f| keys.iter().any(|k| f.key.contains(k.as_str())))
            .collect();
        Ok(Look { leases, flags })
    })
    .map(|look| {
        if look.leases.iter().all(|(_, l)| l.is_some()) {
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
    let listing = locks.list(prefix)?;
    Ok(Look {
        leases: listing
            .leases
            .into_iter()
            .map(|l| (l.key.clone(), Some(l)))
            .collect(),
        flags: listing.flags,
    })
}

/// Looks once, or every `--watch` interval until interrupted; prints each.
fn repeat(view: &View, mut look: impl FnMut() -> Result<Look, Failure>) -> Result<Look, Failure> {
    loop {
        let found = look()?;
        if view.json {
            let doc = to_json(&found);
            if view.watch.is_some() {
                crate::emit(&format!("{doc}\n"));
            } else {
                let pretty = serde_json::to_string_pretty(&doc).unwrap_or_default();
                crate::emit(&format!("{pretty}\n"));
            }
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

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

fn ago(t: SystemTime) -> Duration {
    SystemTime::now().duration_since(t).unwrap_or_default()
}

/// One holder's fields, for `--json`.
fn holder_json(v: &mut Value, h: &HolderInfo) {
    v["holder"] = json!(h.label);
    v["fence"] = json!(h.fence);
    v["acquired_at_ms"] = json!(mistri_locks::internals::unix_millis(h.acquired_at));
    v["renewed_at_ms"] = json!(mistri_locks::internals::unix_millis(h.renewed_at));
    v["held_for_s"] = json!(secs(ago(h.acquired_at)));
    v["renewed_ago_s"] = json!(secs(ago(h.renewed_at)));
    v["ttl_s"] = json!(secs(h.ttl));
    v["heartbeat_s"] = json!(secs(h.heartbeat));
}

fn to_json(look: &Look) -> Value {
    let leases: Vec<Value> = look
        .leases
        .iter()
        .map(|(key, info)| match info {
            None => json!({ "key": key, "held": false }),
            Some(info) => {
                let mut v = json!({
                    "key": key,
                    "held": true,
                    "time_left_s": info.time_left.map(secs),
                    "holder": Value::Null,
                    "fence": Value::Null,
                    "limit": info.limit,
                });
                if let Some(h) = &info.holder {
                    holder_json(&mut v, h);
                }
                // Every holder (one for an exclusive lease; each slot's of
                // an N-holder lease, whose single-holder fields are null).
                v["holders"] = info
                    .holders
                    .iter()
                    .map(|h| {
                        let mut one = json!({});
                        holder_json(&mut one, h);
                        one
                    })
                    .collect();
                v
            }
        })
        .collect();
    let flags: Vec<Value> = look
        .flags
        .iter()
        .map(|f| json!({ "key": f.key, "time_left_s": f.time_left.map(secs) }))
        .collect();
    json!({ "leases": leases, "flags": flags })
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
    for (key, info) in &look.leases {
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
    if look.leases.is_empty() {
        out.push_str("no live leases\n");
    } else {
        out.push_str(&columns(&rows));
    }
    if look.flags.is_empty() {
        out.push_str("no flags up\n");
    } else {
        let mut flag_rows = vec![["FLAG UP".to_string(), "LEFT".to_string()]];
        for f in &look.flags {
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
