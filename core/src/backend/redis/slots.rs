//! N-holder leases (semaphores) on Redis and Redis Cluster: the scripts,
//! their keys and arguments, and what their replies mean
//! (`docs/PROTOCOL.md`, "N-holder leases").
//!
//! - `{ns}:slots:{KEY}`: a sorted set, member = a holder's owner token,
//!   score = its expiry in milliseconds of the server's clock (`TIME`). A
//!   slot is live while its score is above the server's time.
//! - `{ns}:holders:{KEY}`: a hash, field = the owner token, value =
//!   `fence:acquired_ms:renewed_ms:ttl_ms:heartbeat_ms:limit:label` (the
//!   label last, so it may contain `:`).
//! - Every script reads `TIME` once, drops the expired members of both
//!   (pruning), does its work, and sets both keys to expire
//!   (`PEXPIREAT`) with the longest-lived slot, so a semaphore whose
//!   holders all crashed vanishes by itself, and `EXISTS {ns}:slots:{KEY}`
//!   means "a live slot is there".
//! - Exclusion both ways: a slot acquire refuses while `{ns}:lease:{KEY}`
//!   exists; the exclusive acquire script ([`crate::backend::redis::scripts::ACQUIRE_LUA`])
//!   refuses while the slots key exists (its optional `KEYS[3]`: one
//!   `EXISTS` inside the script, no extra round trip).
//! - Waiters queue as for exclusive leases (`{ns}:queue:{KEY}`,
//!   `{ns}:queued:{KEY}`, [`SLOT_ACQUIRE_LUA`]): free slots go to the
//!   first live lines of the queue.
//! - Fences come from the exclusive lease's counter `{ns}:fence:{KEY}` with
//!   the same clock floor, so they increase across slots and exclusive
//!   leases of one key.
//!
//! All keys of one user KEY share the hash tag `{KEY}`: every script runs
//! on one node of a cluster.
//!
//! The single server's slot operations are in `ops.rs`;
//! [`crate::backend::redis::cluster`] uses the scripts, key and argument
//! builders and reply readers here too.

use super::keys::key_of;
use super::replies::min_left_ms;
use crate::args::millis_ceil;
use crate::contract::adapter::{Lease, Renewal};
use crate::contract::info::{from_unix_millis, unpack_label, HolderInfo, Identity, LeaseInfo};
use crate::error::{Error, Result};
use ::redis::{Script, Value};
use std::sync::LazyLock;
use std::time::Duration;

/// The Lua functions every slot script starts with.
macro_rules! prelude {
    () => {
        "\
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function prune(slots, holders, now)
  local gone = redis.call('ZRANGEBYSCORE', slots, '-inf', string.format('%.0f', now))
  for i = 1, #gone, 1000 do
    local last = math.min(i + 999, #gone)
    redis.call('ZREM', slots, unpack(gone, i, last))
    redis.call('HDEL', holders, unpack(gone, i, last))
  end
end
local function expire_with_last(slots, holders)
  local last = redis.call('ZRANGE', slots, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', slots, last[2])
    redis.call('PEXPIREAT', holders, last[2])
  else
    redis.call('DEL', holders)
  end
end
"
    };
}

/// `KEYS[1]` lease, `KEYS[2]` fence counter, `KEYS[3]` slots, `KEYS[4]`
/// holders, `KEYS[5]` and `KEYS[6]` (optional) the waiters' queue and its
/// deadlines (as in [`crate::backend::redis::scripts::ACQUIRE_LUA`]); `ARGV[1]` token,
/// `ARGV[2]` ttl in ms, `ARGV[3]` limit, `ARGV[4]` holder label, `ARGV[5]`
/// heartbeat in ms, `ARGV[6]` and `ARGV[7]` (optional, a waiter's) line id
/// and queue entry ttl in ms. The new slot's fencing number, or 0 when
/// refused (an exclusive lease is there, `limit` slots are live, or the
/// free slots belong to live lines queued before the caller's: the first
/// `free` live lines of the queue may take them, a line further back or a
/// plain acquire only if fewer wait). A refused waiter is queued (or keeps
/// its place); a granted one leaves the queue.
pub const SLOT_ACQUIRE_LUA: &str = concat!(
    prelude!(),
    "\
local t = redis.call('TIME')
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(us / 1000)
local line = ARGV[6]
local function refuse()
  if line then
    local was = tonumber(redis.call('HGET', KEYS[6], line))
    if was and was <= now then
      redis.call('ZREM', KEYS[5], line)
    end
    local at = us / 1000
    local last = tonumber(redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')[2])
    if last and last >= at then
      at = last + 0.001
    end
    redis.call('ZADD', KEYS[5], 'NX', string.format('%.3f', at), line)
    redis.call('HSET', KEYS[6], line, string.format('%.0f', now + tonumber(ARGV[7])))
    redis.call('PEXPIRE', KEYS[5], ARGV[7])
    redis.call('PEXPIRE', KEYS[6], ARGV[7])
  end
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return refuse()
end
prune(KEYS[3], KEYS[4], now)
local free = tonumber(ARGV[3]) - redis.call('ZCARD', KEYS[3])
if free <= 0 then
  return refuse()
end
if KEYS[5] and (line or redis.call('EXISTS', KEYS[5]) == 1) then
  local ahead, mine = {}, false
  repeat
    local dead = nil
    ahead = redis.call('ZRANGE', KEYS[5], 0, free - 1)
    mine = false
    for _, e in ipairs(ahead) do
      if e == line then
        mine = true
        break
      end
      local d = tonumber(redis.call('HGET', KEYS[6], e))
      if not d or d <= now then
        dead = e
        break
      end
    end
    if dead then
      redis.call('ZREM', KEYS[5], dead)
      redis.call('HDEL', KEYS[6], dead)
    end
  until not dead
  if not mine and #ahead >= free then
    return refuse()
  end
end
local fence = redis.call('INCR', KEYS[2])
if us > fence then
  fence = us
  redis.call('SET', KEYS[2], string.format('%.0f', us))
end
redis.call('PEXPIRE', KEYS[2], 604800000)
local ms = string.format('%.0f', now)
redis.call('ZADD', KEYS[3], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], table.concat({string.format('%.0f', fence), ms, ms,
  ARGV[2], ARGV[5], ARGV[3], ARGV[4]}, ':'))
expire_with_last(KEYS[3], KEYS[4])
if line then
  redis.call('ZREM', KEYS[5], line)
  redis.call('HDEL', KEYS[6], line)
end
return fence"
);

/// `KEYS[1]` slots, `KEYS[2]` holders; `ARGV[1]` token, `ARGV[2]` ttl in
/// ms, `ARGV[3]` the least life in ms the slot must have left (0: none).
/// 1 renewed, 0 not held (expired, released, broken), -1 held but less
/// than `ARGV[3]` ms left (not applied) — the exclusive renew's answers.
pub const SLOT_RENEW_LUA: &str = concat!(
    prelude!(),
    "\
local now = now_ms()
prune(KEYS[1], KEYS[2], now)
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp then
  return 0
end
local floor = tonumber(ARGV[3]) or 0
if floor > 0 and tonumber(exp) - now < floor then
  return -1
end
redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
local d = redis.call('HGET', KEYS[2], ARGV[1])
if d then
  local fence, acquired, rest = string.match(d, '^(%d+):(%d+):%d+:%d+:(.*)$')
  if fence then
    redis.call('HSET', KEYS[2], ARGV[1], table.concat({fence, acquired,
      string.format('%.0f', now), ARGV[2], rest}, ':'))
  end
end
expire_with_last(KEYS[1], KEYS[2])
return 1"
);

/// `KEYS[1]` slots, `KEYS[2]` holders, `KEYS[3]` and `KEYS[4]`
/// (optional) the queue and its deadlines; `ARGV[1]` token, `ARGV[2]`
/// (optional) the lines' channel prefix `{ns}:next:{KEY}:`, `ARGV[3]` the
/// message (the slot's fence), `ARGV[4]` (optional) the publish command,
/// `ARGV[5]` (optional) the limit the slot was taken with (else read from
/// its description). 1 if the live slot was deleted, and then announced
/// to the first `free` live lines of the queue (`free` = limit − live
/// slots after the release, at least 1): exactly the lines the slot
/// acquire lets take the free slots, so two releases in a row reach two
/// lines, not twice the head one; else 0.
pub const SLOT_RELEASE_LUA: &str = concat!(
    prelude!(),
    super::scripts::announce_lua!(),
    "\
prune(KEYS[1], KEYS[2], now_ms())
local n = redis.call('ZREM', KEYS[1], ARGV[1])
if n == 1 then
  local d = redis.call('HGET', KEYS[2], ARGV[1])
  local limit = tonumber(ARGV[5])
    or tonumber(d and string.match(d, '^%d+:%d+:%d+:%d+:%d+:(%d+):')) or 1
  redis.call('HDEL', KEYS[2], ARGV[1])
  expire_with_last(KEYS[1], KEYS[2])
  local free = limit - redis.call('ZCARD', KEYS[1])
  announce(KEYS[3], KEYS[4], ARGV[2], ARGV[3] or '0', ARGV[4], math.max(free, 1))
end
return n"
);

/// `KEYS[1]` slots, `KEYS[2]` holders (read only). For each live slot, by
/// expiry: its ms left and its description (`''` if none); never tokens.
pub const SLOT_INFO_LUA: &str = "\
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.0f', now), '+inf',
  'WITHSCORES')
local out = {}
for i = 1, #live, 2 do
  out[#out + 1] = string.format('%.0f', tonumber(live[i + 1]) - now)
  out[#out + 1] = redis.call('HGET', KEYS[2], live[i]) or ''
end
return out";

/// `KEYS[1]` lease, `KEYS[2]` slots (read only). Ms until the lease
/// lapses, or until the soonest slot does; -1 for a lease with no expiry;
/// -2 when neither is there.
pub const EXPIRES_LUA: &str = "\
local pttl = redis.call('PTTL', KEYS[1])
if pttl ~= -2 then
  return pttl
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local first = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. string.format('%.0f', now), '+inf',
  'WITHSCORES', 'LIMIT', 0, 1)
if first[2] then
  return tonumber(first[2]) - now
end
return -2";

/// The slot scripts (hashed once per process).
pub(crate) struct SlotScripts {
    pub(crate) acquire: Script,
    pub(crate) renew: Script,
    pub(crate) release: Script,
    pub(crate) info: Script,
    pub(crate) expires: Script,
}

pub(crate) static SCRIPTS: LazyLock<SlotScripts> = LazyLock::new(|| SlotScripts {
    acquire: Script::new(SLOT_ACQUIRE_LUA),
    renew: Script::new(SLOT_RENEW_LUA),
    release: Script::new(SLOT_RELEASE_LUA),
    info: Script::new(SLOT_INFO_LUA),
    expires: Script::new(EXPIRES_LUA),
});

/// One script call: keys and arguments.
pub(crate) type Call = (Vec<String>, Vec<String>);

pub(crate) fn acquire_call(
    ns: &str,
    key: &str,
    token: &str,
    ttl: Duration,
    who: &Identity,
    limit: u32,
    line: Option<&str>,
) -> Call {
    let mut args = vec![
        token.to_owned(),
        millis_ceil(ttl).to_string(),
        limit.to_string(),
        who.stored_label().into_owned(),
        min_left_ms(who.heartbeat).to_string(),
    ];
    if let Some(line) = line {
        args.push(line.to_owned());
        args.push(super::scripts::queue_ttl_ms().to_string());
    }
    (
        vec![
            key_of(ns, "lease", key),
            key_of(ns, "fence", key),
            key_of(ns, "slots", key),
            key_of(ns, "holders", key),
            key_of(ns, "queue", key),
            key_of(ns, "queued", key),
        ],
        args,
    )
}

pub(crate) fn renew_call(ns: &str, r: &Renewal<'_>) -> Call {
    let key = r.lease.key();
    (
        vec![key_of(ns, "slots", key), key_of(ns, "holders", key)],
        vec![
            r.lease.token().to_owned(),
            millis_ceil(r.ttl).to_string(),
            min_left_ms(r.min_left).to_string(),
        ],
    )
}

/// The slot release of `lease`, announced with `verb` (`PUBLISH`;
/// `SPUBLISH` on a cluster).
pub(crate) fn release_call(ns: &str, lease: &Lease, verb: &str) -> Call {
    let key = lease.key();
    (
        vec![
            key_of(ns, "slots", key),
            key_of(ns, "holders", key),
            key_of(ns, "queue", key),
            key_of(ns, "queued", key),
        ],
        vec![
            lease.token().to_owned(),
            format!("{}:", key_of(ns, "next", key)),
            lease.fence().to_string(),
            verb.to_owned(),
            lease.limit().to_string(),
        ],
    )
}

pub(crate) fn info_call(ns: &str, key: &str) -> Call {
    (
        vec![key_of(ns, "slots", key), key_of(ns, "holders", key)],
        Vec::new(),
    )
}

pub(crate) fn expires_call(ns: &str, key: &str) -> Call {
    (
        vec![key_of(ns, "lease", key), key_of(ns, "slots", key)],
        Vec::new(),
    )
}

/// A slot description (`fence:acquired_ms:renewed_ms:ttl_ms:heartbeat_ms:limit:label`)
/// and the limit in it.
pub(crate) fn holder_of(text: &str) -> Option<(HolderInfo, u32)> {
    let mut parts = text.splitn(7, ':');
    let mut num = || parts.next()?.parse::<u64>().ok();
    let (fence, acquired, renewed, ttl, heartbeat, limit) =
        (num()?, num()?, num()?, num()?, num()?, num()?);
    let (label, stop_key) = unpack_label(parts.next()?.to_owned());
    Some((
        HolderInfo {
            label,
            stop_key,
            fence,
            acquired_at: from_unix_millis(acquired),
            renewed_at: from_unix_millis(renewed),
            ttl: Duration::from_millis(ttl),
            heartbeat: Duration::from_millis(heartbeat),
        },
        u32::try_from(limit).unwrap_or(u32::MAX),
    ))
}

/// The reply of [`SLOT_INFO_LUA`] as the lease's description: `None` when
/// no slot is live.
pub(crate) fn info_from(key: &str, value: &Value, addr: &str) -> Result<Option<LeaseInfo>> {
    let Value::Array(items) = value else {
        return Err(unexpected("slot info", value, addr));
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let mut holders = Vec::with_capacity(items.len() / 2);
    for pair in items.chunks(2) {
        let [left, desc] = pair else {
            return Err(unexpected("slot info", value, addr));
        };
        let left = text(left)
            .and_then(|t| t.parse::<u64>().ok())
            .ok_or_else(|| unexpected("slot info", value, addr))?;
        // A slot without a description (written by hand) is live but
        // can't be shown.
        if let Some((holder, limit)) = text(desc).as_deref().and_then(holder_of) {
            holders.push((holder, limit, Duration::from_millis(left)));
        }
    }
    Ok(LeaseInfo::slotted(key.to_owned(), holders))
}

/// The reply of [`EXPIRES_LUA`].
pub(crate) fn expires_from(value: &Value, addr: &str) -> Result<Option<Duration>> {
    match value {
        Value::Int(ms) => Ok(u64::try_from(*ms).ok().map(Duration::from_millis)),
        other => Err(unexpected("expiry", other, addr)),
    }
}

/// The reply of [`SLOT_ACQUIRE_LUA`]: the fence, 0 when refused.
pub(crate) fn fence_from(value: &Value, addr: &str) -> Result<u64> {
    match value {
        Value::Int(n) => Ok(u64::try_from(*n).unwrap_or(0)),
        other => Err(unexpected("slot acquire", other, addr)),
    }
}

pub(crate) fn unexpected(what: &str, value: &Value, addr: &str) -> Error {
    match value {
        Value::ServerError(e) => Error::Backend(format!(
            "Redis at {addr} answered {what} with an error: {e:?}"
        )),
        other => Error::Backend(format!(
            "Redis at {addr} sent an unexpected {what} reply: {other:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_parse_with_colons_in_the_label() {
        let (h, limit) = holder_of("17:1000:2000:3000:500:3:host:12 ruby").unwrap();
        assert_eq!(h.fence, 17);
        assert_eq!(h.label, "host:12 ruby");
        assert_eq!(h.ttl, Duration::from_millis(3000));
        assert_eq!(h.heartbeat, Duration::from_millis(500));
        assert_eq!(limit, 3);
        assert!(holder_of("17:1000:2000").is_none());
        assert!(holder_of("x:1:2:3:4:5:l").is_none());
    }

    #[test]
    fn keys_share_the_hash_tag() {
        let (keys, args) = release_call("ns", &Lease::slot("job", "t", 1, 3), "PUBLISH");
        assert_eq!(
            keys,
            [
                "ns:slots:{job}",
                "ns:holders:{job}",
                "ns:queue:{job}",
                "ns:queued:{job}"
            ]
        );
        assert_eq!(args, ["t", "ns:next:{job}:", "1", "PUBLISH", "3"]);
    }
}
