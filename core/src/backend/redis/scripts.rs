//! The Lua scripts of the protocol (`docs/PROTOCOL.md`), as text and as
//! loaded [`Script`]s, shared by the single server and the Cluster.

use super::keys::key_of;
use crate::args::millis_ceil;
use ::redis::Script;

/// `KEYS[1]` lease, `KEYS[2]` fence counter, `KEYS[3]` (optional) N-holder
/// slots, `KEYS[4]` and `KEYS[5]` (optional) the queue of waiting lines
/// `{ns}:queue:{KEY}` and their deadlines `{ns}:queued:{KEY}`; `ARGV[1]`
/// token, `ARGV[2]` ttl in ms, `ARGV[3]` (optional) holder label, `ARGV[4]`
/// heartbeat in ms, `ARGV[5]` and `ARGV[6]` (optional, a waiter's) line id
/// and queue entry ttl in ms. Returns the new fencing number, or 0 when the
/// lease is taken (and then writes nothing but the waiter's queue entry).
///
/// The fence is `max(counter + 1, server TIME in µs)`, and the counter is
/// set to it ([`crate::contract::fence`]): a counter lost with the data (restart
/// without persistence, `FLUSHALL`, failover, eviction) restarts above every
/// fence issued before. `TIME` before a write needs effects replication, the
/// only mode since Redis 7 (default since 5). The clock is read as text:
/// `TIME`'s two parts joined (seconds, then the microseconds padded to 6
/// digits), parsed once for the comparison; when the clock wins (nearly
/// always) that text is the fence as written, and the acquired-at ms are
/// the seconds and the first 3 of those digits: no number formatting on
/// the server. A counter that wins is written with `%.0f` (exact: below
/// 2^53, a Lua double is).
///
/// With `ARGV[3]`, the lease's value is the token followed by the holder's
/// description (`TOKEN TTL_MS FENCE ACQUIRED_MS HEARTBEAT_MS LABEL`, see
/// [`holder_from`]): the description lives and dies with the lease, and an
/// acquire writes two keys, the lease and the counter. Callers that pass two
/// arguments store the bare token, as old clients did.
///
/// With `KEYS[3]`, the N-holder lease key `{ns}:slots:{KEY}`: refused (0)
/// while it exists, i.e. while a slot is live ([`slots`]).
///
/// With `KEYS[4]`, the queue (`docs/PROTOCOL.md`, "Waiting"): a sorted set,
/// member = line id, score = enqueue time (ms, server clock, to the µs;
/// above the last line's by at least 0.001, so the queue's order is the
/// order of arrival: two lines queued in one millisecond were ordered by
/// their ids, and a line could queue ahead of one refused before it),
/// beside a hash
/// line id -> liveness deadline (ms). Dead entries (deadline passed) are
/// pruned from the head; while a live entry other than the caller's line
/// heads the queue the acquire is refused, even of a free lease. A refused
/// waiter (`ARGV[5]`) is added (`ZADD NX`: it keeps its place while its
/// entry is live; a lapsed one, not pruned yet, is taken out first, so the
/// line queues again at the back, as on Local and PostgreSQL) and its
/// deadline refreshed; one that acquires leaves the queue. Both keys expire
/// `ARGV[6]` ms after the last refresh.
///
/// The common case, a plain acquire (no `ARGV[5]`) with neither slots nor a
/// queue, is told apart by ONE `EXISTS KEYS[3] KEYS[4]` returning 0 (a
/// caller without those keys counts the lease twice instead: any live lease
/// takes the full path, which refuses it); then the script runs `TIME`,
/// that `EXISTS`, `GET` of the counter, `SET … NX PX` and `SET` of the
/// counter: 5 calls. Anything else takes the full path: the slots check,
/// the queue's pruning, and a refused waiter's queue entry (written at the
/// end, so no closure or table is made per call).
pub const ACQUIRE_LUA: &str = "\
local now = redis.call('TIME')
local us = string.sub('00000' .. now[2], -6)
local clock = now[1] .. us
local floor = tonumber(clock)
local line = ARGV[5]
local free = true
if line or redis.call('EXISTS', KEYS[3] or KEYS[1], KEYS[4] or KEYS[1]) > 0 then
  if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then
    free = false
  elseif KEYS[4] and (line or redis.call('EXISTS', KEYS[4]) == 1) then
    local ms = math.floor(floor / 1000)
    while true do
      local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
      if not head or head == line then
        break
      end
      local d = tonumber(redis.call('HGET', KEYS[5], head))
      if d and d > ms then
        free = false
        break
      end
      redis.call('ZREM', KEYS[4], head)
      redis.call('HDEL', KEYS[5], head)
    end
  end
end
if free then
  local counter = tonumber(redis.call('GET', KEYS[2]))
  local fence, text = floor, clock
  if counter and counter + 1 >= floor then
    fence = counter + 1
    text = string.format('%.0f', fence)
  end
  local value = ARGV[1]
  if ARGV[3] then
    value = ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. text .. ' ' .. now[1] .. string.sub(us, 1, 3)
      .. ' ' .. (ARGV[4] or '0') .. ' ' .. ARGV[3]
  end
  if redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
    redis.call('SET', KEYS[2], text, 'PX', 604800000)
    if line then
      redis.call('ZREM', KEYS[4], line)
      redis.call('HDEL', KEYS[5], line)
    end
    return fence
  end
end
if line then
  local ms = math.floor(floor / 1000)
  local was = tonumber(redis.call('HGET', KEYS[5], line))
  if was and was <= ms then
    redis.call('ZREM', KEYS[4], line)
  end
  local at = floor / 1000
  local last = tonumber(redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')[2])
  if last and last >= at then
    at = last + 0.001
  end
  redis.call('ZADD', KEYS[4], 'NX', string.format('%.3f', at), line)
  redis.call('HSET', KEYS[5], line, string.format('%.0f', ms + tonumber(ARGV[6])))
  redis.call('PEXPIRE', KEYS[4], ARGV[6])
  redis.call('PEXPIRE', KEYS[5], ARGV[6])
end
return 0";

/// [`LEAVE_QUEUE_LUA`] (a script: on Redis Cluster it runs as one
/// operation on the key's slot like the others).
pub(crate) static LEAVE_QUEUE: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new(LEAVE_QUEUE_LUA));

/// [`BREAK_LUA`], hashed once per process.
pub(crate) static BREAK: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new(BREAK_LUA));

/// The keys of [`BREAK_LUA`] for `key`.
pub(crate) fn break_keys(ns: &str, key: &str) -> Vec<String> {
    ["lease", "info", "slots", "holders", "queue", "queued"]
        .iter()
        .map(|kind| key_of(ns, kind, key))
        .collect()
}

/// The queue entry ttl in ms ([`crate::contract::QUEUE_ENTRY_TTL`]).
pub(crate) fn queue_ttl_ms() -> u64 {
    millis_ceil(crate::contract::QUEUE_ENTRY_TTL)
}

/// `KEYS[1]` lease; `ARGV[1]` token, `ARGV[2]` ttl in ms, `ARGV[3]`
/// (optional) the least life in ms the lease must have left. 1 if renewed,
/// 0 if the token does not own the key, -1 if it does but less than
/// `ARGV[3]` ms of its life is left (a renewal that arrived too late: not
/// applied).
///
/// The token owns the key when the value is the token or starts with the
/// token and a space (a described lease). A renewal writes nothing but the
/// expiry; only one with another ttl than the description's rewrites the
/// value, to record it (the time of the last renewal is derived from the
/// ttl and the time left when the description is read).
pub const RENEW_LUA: &str = "\
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local head = ARGV[1] .. ' ' .. ARGV[2] .. ' '
local same = v == ARGV[1] or string.sub(v, 1, #head) == head
if not same and string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return 0
end
local floor = tonumber(ARGV[3]) or 0
if floor > 0 and redis.call('PTTL', KEYS[1]) < floor then
  return -1
end
if same then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
redis.call('SET', KEYS[1], head .. (string.match(v, '^%S+ %S+ (.*)$') or ''), 'PX', ARGV[2])
return 1";

/// The Lua functions that announce a release to the waiting lines that
/// may act on it, and to no others (`docs/PROTOCOL.md`, "Waiting"):
/// `announce(queue, deadlines, prefix, message, verb, count)` looks at the
/// first few lines of the key's queue (`{ns}:queue:{KEY}`, deadlines in
/// `{ns}:queued:{KEY}`) and publishes `message` on `prefix .. line`
/// (`{ns}:next:{KEY}:LINE`) for each of the first `count` live ones (1
/// when `nil`: an exclusive lease; `free`, the free slots, for an N-holder
/// lease), with `verb` (`PUBLISH`; `SPUBLISH` on a cluster), by `pcall`: a
/// server without `SPUBLISH` (Redis < 7) still releases, and the line
/// retries on its timers. No queue: one `EXISTS`, nothing published.
/// Used by every release script.
///
/// `free_slots(slots, holders)`: the slots of an N-holder lease on the key
/// that are free now (its limit, read from a live slot's description,
/// minus the live slots), and that limit; `0, 1` when no slot is live (an
/// exclusive key, or one whose slots all lapsed: its limit is not known).
macro_rules! announce_lua {
    () => {
        "\
local function announce(queue, deadlines, prefix, message, verb, count)
  if not queue or not prefix or redis.call('EXISTS', queue) == 0 then
    return
  end
  count = count or 1
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for _, line in ipairs(redis.call('ZRANGE', queue, 0, count + 7)) do
    local d = tonumber(redis.call('HGET', deadlines, line))
    if d and d > now then
      redis.pcall(verb or 'PUBLISH', prefix .. line, message)
      count = count - 1
      if count <= 0 then
        return
      end
    end
  end
end
local function free_slots(slots, holders)
  if not slots then
    return 0, 1
  end
  local t = redis.call('TIME')
  local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  local one = redis.call('ZRANGEBYSCORE', slots, '(' .. now, '+inf', 'LIMIT', 0, 1)[1]
  if not one then
    return 0, 1
  end
  local d = redis.call('HGET', holders, one)
  local limit = tonumber(d and string.match(d, '^%d+:%d+:%d+:%d+:%d+:(%d+):')) or 1
  local live = redis.call('ZCOUNT', slots, '(' .. now, '+inf')
  return math.max(limit - live, 0), limit
end
"
    };
}
pub(crate) use announce_lua;

/// `KEYS[1]` queue, `KEYS[2]` queue deadlines (see [`ACQUIRE_LUA`]),
/// `KEYS[3]` and `KEYS[4]` (optional) the key's N-holder slots and their
/// descriptions; `ARGV[1]` line id, `ARGV[2]` (optional) the prefix of the
/// lines' channels (`{ns}:next:{KEY}:`), `ARGV[3]` (optional) the publish
/// command: takes the line out of the queue. When it was one of the lines
/// a release tells (the first `w` live lines: `w` = the free slots of an
/// N-holder lease, at least 1; 1 for an exclusive key), the live line that
/// now moves up into those `w` is told (message `0`, as a break
/// announces): a release may have announced itself to the line that is
/// now leaving without trying, and the next line must not sleep on its
/// timers while the key is free. (A ring while the key is still held costs
/// that line one refused try.) Returns 0.
pub const LEAVE_QUEUE_LUA: &str = concat!(
    announce_lua!(),
    "\
local w = math.max((free_slots(KEYS[3], KEYS[4])), 1)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live, told, next = 0, false, nil
for _, e in ipairs(redis.call('ZRANGE', KEYS[1], 0, w + 8)) do
  local d = tonumber(redis.call('HGET', KEYS[2], e))
  if d and d > now then
    live = live + 1
    if live <= w then
      told = told or e == ARGV[1]
    else
      next = e
      break
    end
  end
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if told and next and ARGV[2] then
  redis.pcall(ARGV[3] or 'PUBLISH', ARGV[2] .. next, '0')
end
return 0"
);

/// `KEYS[1]` lease, `KEYS[2]` and `KEYS[3]` (optional) the key's queue of
/// waiting lines and their deadlines; `ARGV[1]` token, `ARGV[2]`
/// (optional) the prefix of the lines' channels (`{ns}:next:{KEY}:`),
/// `ARGV[3]` the message (the lease's fence), `ARGV[4]` (optional) the
/// publish command (`SPUBLISH` on a cluster). 1 if deleted (and then
/// announced to the next live line of the queue, if any: see
/// [`announce_lua`]), 0 if the token does not own the key. Ownership as in
/// [`RENEW_LUA`] (the value is the token, or starts with it and a space),
/// tested with a plain `string.find` at position 1 and the next byte: no
/// string is built.
pub const RELEASE_LUA: &str = concat!(
    announce_lua!(),
    "\
local v = redis.call('GET', KEYS[1])
local t = ARGV[1]
if v and (v == t or (string.find(v, t, 1, true) == 1 and string.byte(v, #t + 1) == 32)) then
  local n = redis.call('DEL', KEYS[1])
  announce(KEYS[2], KEYS[3], ARGV[2], ARGV[3] or '0', ARGV[4])
  return n
end
return 0"
);

/// `KEYS[1]` lease, `KEYS[2]` description, `KEYS[3]` slots, `KEYS[4]`
/// their descriptions, `KEYS[5]` and `KEYS[6]` the queue and its
/// deadlines; `ARGV[1]` the lines' channel prefix, `ARGV[2]` (optional)
/// the publish command. Deletes the lease and the slots, answers how many
/// of them were there, and announces the release (message `0`) like a
/// release does: to the next line, or for an N-holder lease to as many
/// lines as its limit (every slot is free now).
pub const BREAK_LUA: &str = concat!(
    announce_lua!(),
    "\
local _, limit = free_slots(KEYS[3], KEYS[4])
local n = redis.call('DEL', KEYS[1], KEYS[3])
redis.call('DEL', KEYS[2], KEYS[4])
if n > 0 then
  announce(KEYS[5], KEYS[6], ARGV[1], '0', ARGV[2], limit)
end
return n"
);
