//! The listing of a single server (or Sentinel's master): one round trip
//! per `SCAN` page, not one per lease (issue 39, finding 2).
//!
//! One `SCAN` of the namespace (`NS:*`, or `NS:*:{PREFIX*` with a prefix)
//! finds every kind of key at once; the reads of a page's keys go out in
//! one pipeline together with the `SCAN` of the next page:
//! - the exclusive leases (`NS:lease:{KEY}`) and raised flags
//!   (`NS:flag:{KEY}`) of the page in ONE script ([`LIST_PAGE_LUA`]):
//!   each lease's `PTTL` and value, each flag's `PTTL`, and the server's
//!   clock, read atomically (as the `MULTI` per lease read them before);
//! - each N-holder lease (`NS:slots:{KEY}`) by [`SLOT_INFO_LUA`] and each
//!   queue of waiting lines (`NS:queue:{KEY}`) by [`QUEUE_INFO_LUA`], one
//!   `EVAL` each.
//!
//! So a listing of `n` keys costs about `n / 500 + 1` round trips, and the
//! server runs two calls per lease (`PTTL`, `GET`) and one per flag inside
//! one script per page: with 10,000 leases about 20,000 calls against the
//! 50,000 of a `MULTI`/`PTTL`/`GET`/`TIME`/`EXEC` per lease
//! (`scripts/bench`, "listing"). What is listed is what was listed before:
//! a key seen twice by `SCAN` is read once; a key with both an exclusive
//! lease and slots is listed as the exclusive lease; a lease gone between
//! the scan and its read is not listed.

use super::keys::key_of;
use super::ops::{add_waiting_from, QUEUE_INFO_LUA};
use super::replies::{glob_escape, holder_from};
use super::server::Redis;
use super::slots::{info_from, unexpected, SLOT_INFO_LUA};
use crate::contract::info::{FlagInfo, LeaseInfo, Listing};
use crate::error::Result;
use ::redis::Value;
use std::collections::HashSet;
use std::time::Duration;

/// Keys a `SCAN` page examines (`COUNT`).
pub(crate) const PAGE: usize = 500;

/// `KEYS` the page's exclusive leases, then its flags; `ARGV[1]` how many
/// leases. Returns the server's clock (`TIME`'s two parts), then each
/// lease's `PTTL` and value (nil when gone), then each flag's `PTTL`.
/// Read-only.
pub(crate) const LIST_PAGE_LUA: &str = "\
local t = redis.call('TIME')
local n = tonumber(ARGV[1])
local out = {t[1], t[2]}
for i = 1, #KEYS do
  out[#out + 1] = redis.call('PTTL', KEYS[i])
  if i <= n then
    out[#out + 1] = redis.call('GET', KEYS[i])
  end
end
return out";

/// What a key found by the scan is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lease,
    Slots,
    Queue,
    Flag,
}

const KINDS: [(Kind, &str); 4] = [
    (Kind::Lease, "lease"),
    (Kind::Slots, "slots"),
    (Kind::Queue, "queue"),
    (Kind::Flag, "flag"),
];

/// The `SCAN MATCH` pattern of `namespace`'s keys whose user key starts
/// with `prefix`: `NS:*` or `NS:*:{PREFIX*` (glob-escaped).
pub(crate) fn list_pattern(namespace: &str, prefix: &str) -> String {
    let ns = glob_escape(namespace);
    if prefix.is_empty() {
        format!("{ns}:*")
    } else {
        format!("{ns}:*:{}*", glob_escape(&format!("{{{prefix}")))
    }
}

/// The kind and user key of `name` (`NS:kind:{KEY}`), if it is one of the
/// listed kinds and its key starts with `prefix`.
fn classify(namespace: &str, prefix: &str, name: &str) -> Option<(Kind, String)> {
    let rest = name.strip_prefix(namespace)?.strip_prefix(':')?;
    KINDS.iter().find_map(|(kind, word)| {
        let key = rest
            .strip_prefix(word)?
            .strip_prefix(":{")?
            .strip_suffix('}')?;
        (!key.is_empty() && key.starts_with(prefix)).then(|| (*kind, key.to_owned()))
    })
}

/// The reads of one page's keys.
#[derive(Default)]
struct Reads {
    leases: Vec<String>,
    flags: Vec<String>,
    slots: Vec<String>,
    queues: Vec<String>,
}

impl Reads {
    fn is_empty(&self) -> bool {
        self.leases.is_empty()
            && self.flags.is_empty()
            && self.slots.is_empty()
            && self.queues.is_empty()
    }
}

/// What the listing found so far.
#[derive(Default)]
struct Found {
    listing: Listing,
    slotted: Vec<LeaseInfo>,
}

impl Redis {
    /// [`crate::Locks::list`] on this server (module header).
    pub(crate) fn list_paged(&self, prefix: &str) -> Result<Listing> {
        let ns = self.namespace().to_owned();
        let pattern = list_pattern(&ns, prefix);
        let mut seen: HashSet<String> = HashSet::new();
        let mut found = Found::default();
        // `None` once the scan is complete.
        let mut cursor = Some(0u64);
        let mut reads = Reads::default();
        while cursor.is_some() || !reads.is_empty() {
            let replies: Vec<Value> = self.with_con(|con, _| {
                let mut pipe = ::redis::pipe();
                if !reads.leases.is_empty() || !reads.flags.is_empty() {
                    let cmd = pipe
                        .cmd("EVAL")
                        .arg(LIST_PAGE_LUA)
                        .arg(reads.leases.len() + reads.flags.len());
                    for key in &reads.leases {
                        cmd.arg(key_of(&ns, "lease", key));
                    }
                    for key in &reads.flags {
                        cmd.arg(key_of(&ns, "flag", key));
                    }
                    cmd.arg(reads.leases.len());
                }
                for key in &reads.slots {
                    pipe.cmd("EVAL")
                        .arg(SLOT_INFO_LUA)
                        .arg(2)
                        .arg(key_of(&ns, "slots", key))
                        .arg(key_of(&ns, "holders", key));
                }
                for key in &reads.queues {
                    pipe.cmd("EVAL")
                        .arg(QUEUE_INFO_LUA)
                        .arg(2)
                        .arg(key_of(&ns, "queue", key))
                        .arg(key_of(&ns, "queued", key));
                }
                if let Some(at) = cursor {
                    pipe.cmd("SCAN")
                        .arg(at)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(PAGE);
                }
                pipe.query(&mut con.con)
            })?;
            let mut replies = replies.into_iter();
            self.take_reads(&reads, &mut replies, &mut found)?;
            reads = Reads::default();
            if cursor.is_some() {
                let page = replies.next().unwrap_or(Value::Nil);
                let (next, names): (u64, Vec<String>) = ::redis::from_redis_value_ref(&page)
                    .map_err(|_| unexpected("SCAN", &page, &self.addr))?;
                for name in names {
                    let Some((kind, key)) = classify(&ns, prefix, &name) else {
                        continue;
                    };
                    if !seen.insert(name) {
                        continue; // SCAN may return a key twice
                    }
                    match kind {
                        Kind::Lease => reads.leases.push(key),
                        Kind::Slots => reads.slots.push(key),
                        Kind::Queue => reads.queues.push(key),
                        Kind::Flag => reads.flags.push(key),
                    }
                }
                cursor = (next != 0).then_some(next);
            }
        }
        // An exclusive lease wins over slots on the same key (as the
        // acquire scripts refuse either while the other exists).
        let exclusive: HashSet<String> =
            found.listing.leases.iter().map(|l| l.key.clone()).collect();
        let Found {
            mut listing,
            slotted,
        } = found;
        listing.leases.extend(
            slotted
                .into_iter()
                .filter(|info| !exclusive.contains(&info.key)),
        );
        listing.sort();
        Ok(listing)
    }

    /// Reads the replies of `reads` (in the order they were sent) into
    /// `found`.
    fn take_reads(
        &self,
        reads: &Reads,
        replies: &mut impl Iterator<Item = Value>,
        found: &mut Found,
    ) -> Result<()> {
        if !reads.leases.is_empty() || !reads.flags.is_empty() {
            let page = replies.next().unwrap_or(Value::Nil);
            let bad = || unexpected("listing", &page, &self.addr);
            let Value::Array(items) = &page else {
                return Err(bad());
            };
            let number = |v: &Value| ::redis::from_redis_value_ref::<i64>(v).ok();
            let want = 2 + 2 * reads.leases.len() + reads.flags.len();
            if items.len() != want {
                return Err(bad());
            }
            let (secs, micros) = match (number(&items[0]), number(&items[1])) {
                (Some(s), Some(us)) => (s.max(0) as u64, us.max(0) as u64),
                _ => return Err(bad()),
            };
            let now_ms = secs * 1000 + micros / 1000;
            let (lease_items, flag_items) = items[2..].split_at(2 * reads.leases.len());
            for (key, pair) in reads.leases.iter().zip(lease_items.chunks(2)) {
                let pttl = number(&pair[0]).ok_or_else(bad)?;
                // Gone between the scan and now: not live, not listed.
                if pttl == -2 {
                    continue;
                }
                let time_left = u64::try_from(pttl).ok().map(Duration::from_millis);
                let holder = match &pair[1] {
                    Value::BulkString(value) => holder_from(value, time_left, now_ms),
                    _ => None,
                };
                found
                    .listing
                    .leases
                    .push(LeaseInfo::exclusive(key.clone(), time_left, holder));
            }
            for (key, item) in reads.flags.iter().zip(flag_items) {
                let pttl = number(item).ok_or_else(bad)?;
                if pttl != -2 {
                    found.listing.flags.push(FlagInfo {
                        key: key.clone(),
                        time_left: u64::try_from(pttl).ok().map(Duration::from_millis),
                    });
                }
            }
        }
        for key in &reads.slots {
            let reply = replies.next().unwrap_or(Value::Nil);
            if let Some(info) = info_from(key, &reply, &self.addr)? {
                found.slotted.push(info);
            }
        }
        for key in &reads.queues {
            let reply = replies.next().unwrap_or(Value::Nil);
            add_waiting_from(&mut found.listing, key, &reply, &self.addr)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_and_the_kinds() {
        assert_eq!(list_pattern("ns", ""), "ns:*");
        assert_eq!(list_pattern("n*s", "a?"), "n\\*s:*:{a\\?*");
        let kind = |name: &str, prefix: &str| classify("ns", prefix, name).map(|(_, k)| k);
        assert_eq!(kind("ns:lease:{a}", ""), Some("a".into()));
        assert_eq!(kind("ns:flag:{a:b}", "a"), Some("a:b".into()));
        assert_eq!(kind("ns:slots:{ab}", "b"), None);
        assert_eq!(kind("ns:fence:{a}", ""), None);
        assert_eq!(kind("ns:sub:lease:{a}", ""), None);
        assert_eq!(kind("ns:lease:{}", ""), None);
        assert_eq!(kind("nsx:lease:{a}", ""), None);
        assert_eq!(kind("ns:queue:{q}", ""), Some("q".into()));
    }
}
