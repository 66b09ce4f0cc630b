//! Holder inspection: who holds a lease, since when, with which fence —
//! and what leases and flags are live under a prefix.
//!
//! Every acquire stores an [`Identity`] (a label the holder chooses,
//! default `host:pid language`, and the hold's heartbeat) next to the lease,
//! **atomically with it**: on Redis in the lease's own value, after the
//! token (one key, expiring with the lease); on Local as columns of the
//! lease row; on Memory in the lease's entry. Every renewal moves its
//! last-renewal time (Local and Memory stamp it; on Redis it follows from
//! the ttl and the time left), so a holder that died shows a last-renewal
//! age that grows until the lease expires. The owner token is never shown.
//! `docs/PROTOCOL.md` has the layout.
//!
//! Reading is one atomic step too ([`crate::Adapter::info`]): the lease's
//! time left, and the stored description only if it belongs to the lease
//! that is there now (a lease taken by a client that writes no description
//! shows `holder: None`).
//!
//! Stop key: a hold's stop key is part of its description, so an operator
//! or a job face can find which flag stops a lease's holder. It is stored
//! inside the label field every backend already has (label, the byte 0x1F,
//! the stop key: [`Identity::stored_label`], [`unpack_label`]), so no
//! backend's layout or schema changes and an older reader shows it as part
//! of the label (`docs/PROTOCOL.md`, "Holder descriptions").
//!
//! N-holder leases (semaphores): each slot stores its own description the
//! same way (Redis: a field of the hash `NS:holders:{KEY}`; Local: columns
//! of the slot's row; Memory: the slot's entry), and [`LeaseInfo`] lists
//! them all in `holders`, with the limit in `limit`.
//!
//! Times shown to people are wall-clock ([`SystemTime`]); time left is the
//! backend's own expiry clock, so it is right even where clocks disagree.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a holder says about itself when it acquires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Free text, e.g. `build-7:4120 ruby` (the default, [`default_label`]).
    pub label: String,
    /// The heartbeat of the hold (zero for a plain acquire).
    pub heartbeat: Duration,
    /// The stop key the hold watches (`None` for a plain acquire or a hold
    /// without one): operators and job faces stop a hold by raising it.
    pub stop_key: Option<String>,
}

impl Identity {
    /// The default identity of this process, with no heartbeat.
    pub fn of_process() -> Self {
        Identity {
            label: default_label(),
            heartbeat: Duration::ZERO,
            stop_key: None,
        }
    }

    /// The label as every backend stores it beside the lease: the label,
    /// then [`STOP_KEY_MARK`] and the stop key if the hold has one (module
    /// header, "Stop key"). Read back by [`unpack_label`].
    pub(crate) fn stored_label(&self) -> std::borrow::Cow<'_, str> {
        match &self.stop_key {
            None => std::borrow::Cow::Borrowed(&self.label),
            Some(stop) => {
                let mut stored = String::with_capacity(self.label.len() + 1 + stop.len());
                stored.push_str(&self.label);
                stored.push(STOP_KEY_MARK);
                stored.push_str(stop);
                std::borrow::Cow::Owned(stored)
            }
        }
    }
}

/// The byte between a stored label and the hold's stop key (ASCII unit
/// separator, 0x1F), which no label may contain ([`crate::args::check_label`]).
pub(crate) const STOP_KEY_MARK: char = '\u{1f}';

/// A stored label ([`Identity::stored_label`]) as the label and the stop
/// key.
pub(crate) fn unpack_label(mut stored: String) -> (String, Option<String>) {
    match stored.find(STOP_KEY_MARK) {
        None => (stored, None),
        Some(at) => {
            let stop = stored[at + STOP_KEY_MARK.len_utf8()..].to_owned();
            stored.truncate(at);
            (stored, Some(stop))
        }
    }
}

/// What [`crate::Adapter::info`] found about a live lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The key (without the namespace).
    pub key: String,
    /// How long the lease lives unless renewed (the backend's clock). `None`
    /// for a lease with no expiry (written by hand, not by a client).
    pub time_left: Option<Duration>,
    /// The holder's description; `None` when the holder stored none (an
    /// older client) or it can't be told apart from an earlier holder's.
    /// Always `None` for an N-holder lease: see `holders`.
    pub holder: Option<HolderInfo>,
    /// Every holder's description, by fence: the exclusive lease's (the
    /// same as `holder`, none if that is `None`), or each live slot's of an
    /// N-holder lease (its `time_left` is then the longest-lived slot's).
    pub holders: Vec<HolderInfo>,
    /// 1 for an exclusive lease; for an N-holder lease the limit the
    /// newest live holder acquired with.
    pub limit: u32,
}

impl LeaseInfo {
    /// The description of an exclusive lease.
    pub fn exclusive(key: String, time_left: Option<Duration>, holder: Option<HolderInfo>) -> Self {
        LeaseInfo {
            key,
            time_left,
            holders: holder.iter().cloned().collect(),
            holder,
            limit: 1,
        }
    }

    /// The description of an N-holder lease with live `holders` (each
    /// with the limit it acquired with, and its expiry as time left);
    /// `None` when there are none.
    pub fn slotted(key: String, holders: Vec<(HolderInfo, u32, Duration)>) -> Option<Self> {
        let time_left = holders.iter().map(|(_, _, left)| *left).max()?;
        let mut holders = holders;
        holders.sort_by_key(|(h, _, _)| h.fence);
        let limit = holders.last().map_or(1, |(_, limit, _)| *limit);
        Some(LeaseInfo {
            key,
            time_left: Some(time_left),
            holder: None,
            holders: holders.into_iter().map(|(h, _, _)| h).collect(),
            limit,
        })
    }
}

/// The description a holder stored with its lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderInfo {
    /// The holder's label ([`Identity::label`]).
    pub label: String,
    /// The fencing number of this acquisition.
    pub fence: u64,
    /// When it was acquired (wall clock, for display).
    pub acquired_at: SystemTime,
    /// When it was last renewed (at first, the acquire time).
    pub renewed_at: SystemTime,
    /// The ttl of the last acquire or renewal.
    pub ttl: Duration,
    /// The hold's heartbeat; zero for a plain acquire.
    pub heartbeat: Duration,
    /// The stop key the hold watches ([`Identity::stop_key`]).
    pub stop_key: Option<String>,
}

/// A live flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagInfo {
    /// The flag's key (without the namespace).
    pub key: String,
    /// How long it stays up unless cleared; `None` if it has no expiry.
    pub time_left: Option<Duration>,
}

/// The waiting lines of one key: the backend's queue of waiters
/// ([`crate::waiting`], `docs/PROTOCOL.md` "Waiting").
///
/// A line is one process's waiters on the key through one handle (Redis,
/// its Sentinel and Cluster modes, Local, Postgres keep one queue entry
/// per line); on Memory, whose only process is this one, each waiting
/// caller counts as a line. Only live entries count: a crashed process's
/// entry stops counting when it would stop holding a free lease back
/// ([`crate::contract::QUEUE_ENTRY_TTL`] after its last try).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingInfo {
    /// The key (without the namespace).
    pub key: String,
    /// Live lines queued for the key (at least 1).
    pub lines: u32,
    /// How long the line at the head of the queue has waited (since it
    /// joined the queue; the backend's clock, at millisecond precision on
    /// Redis and Postgres).
    pub oldest_wait: Duration,
}

/// The live leases and flags under a prefix, and the keys with waiting
/// lines, each sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// Live leases.
    pub leases: Vec<LeaseInfo>,
    /// Raised flags.
    pub flags: Vec<FlagInfo>,
    /// Keys with live waiting lines (a key may be listed here and not in
    /// `leases`: for the moment between a release and the head line's
    /// acquire).
    pub waiting: Vec<WaitingInfo>,
}

impl Listing {
    /// Sorts every list by key.
    pub fn sort(&mut self) {
        self.leases.sort_by(|a, b| a.key.cmp(&b.key));
        self.flags.sort_by(|a, b| a.key.cmp(&b.key));
        self.waiting.sort_by(|a, b| a.key.cmp(&b.key));
    }

    /// The waiting lines of `key`, if any (`waiting` must be sorted:
    /// [`Listing::sort`]).
    pub fn waiting_for(&self, key: &str) -> Option<&WaitingInfo> {
        self.waiting
            .binary_search_by(|w| w.key.as_str().cmp(key))
            .ok()
            .map(|i| &self.waiting[i])
    }

    /// Adds the waiting lines of `key` from the enqueue times of its live
    /// lines, as ages at the backend's `now` (any unit the caller likes, as
    /// long as `to_duration` turns an age into a [`Duration`]). Nothing
    /// when there are none.
    pub(crate) fn add_waiting<T: Copy + Ord>(
        &mut self,
        key: String,
        since: impl IntoIterator<Item = T>,
        age: impl Fn(T) -> Duration,
    ) {
        let mut lines = 0u32;
        let mut oldest: Option<T> = None;
        for t in since {
            lines = lines.saturating_add(1);
            oldest = Some(oldest.map_or(t, |o| o.min(t)));
        }
        if let Some(t) = oldest {
            self.waiting.push(WaitingInfo {
                key,
                lines,
                oldest_wait: age(t),
            });
        }
    }
}

static LANGUAGE: OnceLock<&'static str> = OnceLock::new();
static HOST: OnceLock<String> = OnceLock::new();

/// Names the language of this process in default labels (`"python"`,
/// `"ruby"`, `"c"`; `"rust"` when never called). The first call wins; a face
/// calls it once when it loads. Returns whether this call set it.
pub fn set_language(language: &'static str) -> bool {
    LANGUAGE.set(language).is_ok()
}

/// The language named in default labels.
pub fn language() -> &'static str {
    LANGUAGE.get().copied().unwrap_or("rust")
}

/// This host's name (`gethostname`), or `unknown-host`.
pub fn host_name() -> &'static str {
    HOST.get_or_init(|| {
        let mut buf = [0u8; 256];
        // SAFETY: `buf` is writable for `buf.len()` bytes; gethostname writes
        // at most that many and we stop at the first NUL (or the end).
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        let len = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        match std::str::from_utf8(&buf[..len]) {
            Ok(name) if rc == 0 && !name.is_empty() => name.to_owned(),
            _ => "unknown-host".to_owned(),
        }
    })
}

/// The default label: `host:pid language`, e.g. `build-7:4120 ruby`. The pid
/// is read each time, so a forked child describes itself, not its parent.
pub fn default_label() -> String {
    format!("{}:{} {}", host_name(), std::process::id(), language())
}

/// Milliseconds since 1970 of a wall-clock time (0 before 1970).
pub fn unix_millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The wall-clock time `ms` milliseconds after 1970.
pub fn from_unix_millis(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_label_names_host_pid_and_language() {
        let label = default_label();
        assert!(
            label.ends_with(&format!(":{} {}", std::process::id(), language())),
            "{label}"
        );
        assert!(!host_name().is_empty());
    }

    #[test]
    fn millis_round_trip() {
        let t = from_unix_millis(1_700_000_000_123);
        assert_eq!(unix_millis(t), 1_700_000_000_123);
    }
}
