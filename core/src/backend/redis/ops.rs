//! The [`Adapter`] of a single server: each operation one script or one
//! pipeline on a pooled connection.

use super::keys::key_of;
use super::listener::ListenAt;
use super::listener::Listener;
use super::replies::flag_from;
use super::replies::is_noscript;
use super::replies::min_left_ms;
use super::replies::renewed_from;
use super::scripts::break_keys;
use super::scripts::queue_ttl_ms;
use super::scripts::ACQUIRE_LUA;
use super::scripts::BREAK;
use super::scripts::BREAK_LUA;
use super::scripts::LEAVE_QUEUE;
use super::scripts::LEAVE_QUEUE_LUA;
use super::scripts::RELEASE_LUA;
use super::scripts::RENEW_LUA;
use super::server::Redis;
use super::slots;
use super::slots::{
    acquire_call, expires_call, expires_from, fence_from, info_call, info_from, release_call,
    renew_call, unexpected, Call, EXPIRES_LUA, SCRIPTS, SLOT_ACQUIRE_LUA, SLOT_INFO_LUA,
    SLOT_RELEASE_LUA, SLOT_RENEW_LUA,
};
use crate::args::millis_ceil;
use crate::contract::adapter::acquire_dispatch;
use crate::contract::adapter::{Adapter, Beat, Lease, Renewal, Renewed};
use crate::contract::info::{Identity, LeaseInfo, Listing, WaitingInfo};
use crate::contract::push::{FlagWatch, FlagWatcher};
use crate::error::Result;
use crate::runtime::token::mint_token;
use ::redis::{Script, Value};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

impl Redis {
    /// The exclusive acquire; `line`: a waiter's line ([`ACQUIRE_LUA`]'s
    /// queue).
    fn acquire_exclusive(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        Ok(self
            .acquire_exclusive_reading(key, ttl, who, line, None)?
            .map(|(lease, _)| lease))
    }

    /// [`Redis::acquire_exclusive`], reading the flag `flag` (if given) in
    /// the same round trip, after the script ([`Adapter::acquire_reading_flag`]).
    fn acquire_exclusive_reading(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        line: Option<&str>,
        flag: Option<&str>,
    ) -> Result<Option<(Lease, Option<bool>)>> {
        let token = mint_token()?;
        let argc = if line.is_some() { 6 } else { 4 };
        let (fence, acked, up) = self.with_con(|con, deadline| {
            let (reply, up) = self.eval_reading(
                con,
                deadline,
                &self.acquire,
                ACQUIRE_LUA,
                (5, argc),
                |w| {
                    w.key(&self.namespace, "lease", key)
                        .key(&self.namespace, "fence", key)
                        .key(&self.namespace, "slots", key)
                        .key(&self.namespace, "queue", key)
                        .key(&self.namespace, "queued", key)
                        .bulk(token.as_bytes())
                        .int(millis_ceil(ttl))
                        .bulk(who.stored_label().as_bytes())
                        .int(min_left_ms(who.heartbeat));
                    if let Some(line) = line {
                        w.bulk(line.as_bytes()).int(queue_ttl_ms());
                    }
                },
                flag,
            )?;
            let fence: u64 = ::redis::from_redis_value(reply)?;
            let acked = self.wait_replicas(con, deadline, fence > 0)?;
            // A failed read is no answer: the engine reads the flag itself.
            let up = up.and_then(|v| flag_from(&v, &self.addr).ok());
            Ok((fence, acked, up))
        })?;
        let lease = (fence > 0).then(|| Lease::new(key, token, fence));
        match lease {
            Some(lease) if !acked => Err(self.unreplicated_acquire(&lease)),
            lease => Ok(lease.map(|lease| (lease, up))),
        }
    }
}

impl Redis {
    /// The release, ending by `by` if that comes before the timeout (a
    /// timed-out connection is dropped).
    fn release_until(&self, lease: &Lease, by: Option<Instant>) -> Result<bool> {
        if lease.slotted() {
            let call = release_call(self.namespace(), lease, "PUBLISH");
            let reply = self.with_con_by(by, |con, deadline| {
                self.eval(
                    con,
                    deadline,
                    &SCRIPTS.release,
                    SLOT_RELEASE_LUA,
                    &call.0,
                    &call.1,
                )
            })?;
            return match reply {
                Value::Int(n) => Ok(n == 1),
                other => Err(unexpected("slot release", &other, &self.addr)),
            };
        }
        let reply = self.with_con_by(by, |con, deadline| {
            self.eval_with(con, deadline, &self.release, RELEASE_LUA, (3, 3), |w| {
                let (ns, key) = (&self.namespace, lease.key());
                w.key(ns, "lease", key)
                    .key(ns, "queue", key)
                    .key(ns, "queued", key)
                    .bulk(lease.token().as_bytes())
                    .key_then(ns, "next", key, ":")
                    .int(lease.fence());
            })
        })?;
        Ok(reply == Value::Int(1))
    }
}

impl Adapter for Redis {
    acquire_dispatch!();

    /// The exclusive acquire pipelines an `EXISTS` of the flag after its
    /// script: one round trip (a single server, or Sentinel's primary; the
    /// Cluster does not, its keys are in other slots).
    fn acquire_reading_flag(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        flag: &str,
    ) -> Result<Option<(Lease, Option<bool>)>> {
        if limit > 1 {
            return Ok(self
                .acquire_limited(key, ttl, who, limit)?
                .map(|lease| (lease, None)));
        }
        self.acquire_exclusive_reading(key, ttl, who, None, Some(flag))
    }

    fn name(&self) -> &'static str {
        "redis"
    }

    fn io_timeout(&self) -> Duration {
        self.timeout
    }

    fn settings_check_every(&self) -> Option<Duration> {
        self.settings_every()
    }

    fn check_settings(&self, deadline: Instant) -> Result<Option<String>> {
        self.memory_risk(deadline)
    }

    /// `Ok` also when no connection could be had (the server down, a
    /// restart): nothing was sent, so no forget is on its way that could
    /// take a later line's entry away, and the line's id may be taken
    /// again ([`crate::waiting`]). The entry, if the server kept it, is
    /// then the place of this process's next line of the key, which takes
    /// the same id, rather than a dead line's that stands ahead of it until
    /// it lapses: a wait that ended in an error during a restart and is
    /// started again is told of the release by push (issue 39, finding 16).
    fn leave_queue(&self, key: &str, line: &str) -> Result<()> {
        let _held = crate::runtime::eintr::HostSignalsHeld::new();
        let deadline = Instant::now() + self.timeout;
        let epoch = self.pool_epoch();
        let Ok(mut con) = self.checkout(deadline) else {
            return Ok(());
        };
        let reply = self.aim(&mut con, deadline).and_then(|()| {
            self.eval_with(
                &mut con,
                deadline,
                &LEAVE_QUEUE,
                LEAVE_QUEUE_LUA,
                (4, 2),
                |w| {
                    w.key(&self.namespace, "queue", key)
                        .key(&self.namespace, "queued", key)
                        .key(&self.namespace, "slots", key)
                        .key(&self.namespace, "holders", key)
                        .bulk(line.as_bytes())
                        .key_then(&self.namespace, "next", key, ":");
                },
            )
            .map_err(|e| self.map_err(e))
        })?;
        self.checkin(con, epoch);
        drop(reply);
        Ok(())
    }

    fn renew_within(&self, renewal: &Renewal<'_>) -> Result<Renewed> {
        if renewal.lease.slotted() {
            return self.renew_slot(renewal);
        }
        let (reply, acked): (Value, bool) = self.with_con(|con, deadline| {
            let reply = self.eval_with(con, deadline, &self.renew, RENEW_LUA, (1, 3), |w| {
                w.key(&self.namespace, "lease", renewal.lease.key())
                    .bulk(renewal.lease.token().as_bytes())
                    .int(millis_ceil(renewal.ttl))
                    .int(min_left_ms(renewal.min_left));
            })?;
            let acked = self.wait_replicas(con, deadline, reply == Value::Int(1))?;
            Ok((reply, acked))
        })?;
        if !acked {
            // With a sentinel the master may have moved: look again.
            self.forget_master();
        }
        self.acked(renewed_from(&reply, &self.addr), acked)
    }

    fn release(&self, lease: &Lease) -> Result<bool> {
        self.release_until(lease, None)
    }

    fn release_by(&self, lease: &Lease, deadline: Instant) -> Result<bool> {
        self.release_until(lease, Some(deadline))
    }

    fn held(&self, key: &str) -> Result<bool> {
        self.with_con(|con, _| {
            ::redis::cmd("EXISTS")
                .arg(self.lease_key(key))
                .arg(self.slots_key(key))
                .query::<i64>(&mut con.con)
        })
        .map(|n| n >= 1)
    }

    fn expires_in(&self, key: &str) -> Result<Option<Duration>> {
        self.slot_expires_in(key)
    }

    fn break_lease(&self, key: &str) -> Result<bool> {
        self.with_con(|con, deadline| {
            self.eval::<i64>(
                con,
                deadline,
                &BREAK,
                BREAK_LUA,
                &break_keys(&self.namespace, key),
                &[self.line_channel_prefix(key)],
            )
        })
        .map(|n| n >= 1)
    }

    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()> {
        // One round trip; the SET is applied before the message goes out,
        // so a listener that hears it finds the flag up.
        self.with_con(|con, _| {
            ::redis::pipe()
                .cmd("SET")
                .arg(self.flag_key(key))
                .arg("1")
                .arg("PX")
                .arg(millis_ceil(ttl))
                .ignore()
                .cmd("PUBLISH")
                .arg(self.raised_channel(key))
                .arg("1")
                .ignore()
                .query::<()>(&mut con.con)
        })
    }

    fn watch_flags(&self, watcher: Weak<dyn FlagWatcher>) -> Option<FlagWatch> {
        let at: Arc<dyn ListenAt> = match &self.sentinel {
            Some(sentinel) => sentinel.clone(),
            None => Arc::new(self.client.clone()),
        };
        let listener = Listener::new(at, &self.namespace, self.timeout, self.dropped.clone());
        self.push.get().watch(watcher, move |registry| {
            crate::contract::listen::spawn("mistri-flags", move || listener.run(&registry))
        })
    }

    fn flag(&self, key: &str) -> Result<bool> {
        self.with_con(|con, _| {
            ::redis::cmd("EXISTS")
                .arg(self.flag_key(key))
                .query::<i64>(&mut con.con)
        })
        .map(|n| n == 1)
    }

    fn clear_flag(&self, key: &str) -> Result<()> {
        self.with_con(|con, _| {
            ::redis::cmd("DEL")
                .arg(self.flag_key(key))
                .query::<()>(&mut con.con)
        })
    }

    fn info(&self, key: &str) -> Result<Option<LeaseInfo>> {
        match self.with_con(|con, _| self.info_on(con, key))? {
            Some(info) => Ok(Some(info)),
            None => self.slot_info(key),
        }
    }

    fn list(&self, prefix: &str) -> Result<Listing> {
        // One round trip per SCAN page (`listing.rs`).
        self.list_paged(prefix)
    }

    fn beat(&self, renewals: &[Renewal<'_>], flags: &[&str], deadline: Instant) -> Result<Beat> {
        if renewals.is_empty() && flags.is_empty() {
            return Ok(Beat::default());
        }
        let deadline = deadline.min(Instant::now() + self.timeout);
        let epoch = self.pool_epoch();
        let mut con = self.checkout(deadline)?;
        // Any error below drops `con`: a timed-out connection may still
        // deliver late replies, which must never be read as this tick's.
        let mut replies = self.beat_on(&mut con, renewals, flags, deadline)?;
        let server_clock = replies.pop().as_ref().and_then(server_time);
        // After a server restart or SCRIPT FLUSH the renewals answer
        // NOSCRIPT: load the script and send those renewals once more.
        let again: Vec<usize> = (0..renewals.len())
            .filter(|i| is_noscript(&replies[*i]))
            .collect();
        if !again.is_empty() {
            self.aim(&mut con, deadline)?;
            self.renew.load(&mut con.con).map_err(|e| self.map_err(e))?;
            if renewals.iter().any(|r| r.lease.slotted()) {
                slots::SCRIPTS
                    .renew
                    .load(&mut con.con)
                    .map_err(|e| self.map_err(e))?;
            }
            let retry: Vec<Renewal<'_>> = again.iter().map(|i| renewals[*i]).collect();
            let mut answers = self.beat_on(&mut con, &retry, &[], deadline)?;
            answers.pop(); // its TIME
            for (i, answer) in again.into_iter().zip(answers) {
                replies[i] = answer;
            }
        }
        let acked = self.after_beat(&mut con, deadline, &replies[..renewals.len()])?;
        self.checkin(con, epoch);
        let (renewed, up) = replies.split_at(renewals.len());
        Ok(Beat {
            renewals: renewed
                .iter()
                .map(|v| self.acked(renewed_from(v, &self.addr), acked))
                .collect(),
            flags: up.iter().map(|v| flag_from(v, &self.addr)).collect(),
            server_clock,
        })
    }
}

/// A `TIME` reply (seconds and microseconds, as bulk strings) as the time
/// since the Unix epoch.
pub(crate) fn server_time(reply: &Value) -> Option<Duration> {
    let (secs, micros) = ::redis::from_redis_value_ref::<(u64, u64)>(reply).ok()?;
    Some(Duration::from_secs(secs) + Duration::from_micros(micros))
}

/// `KEYS[1]` a key's queue of waiting lines, `KEYS[2]` their liveness
/// deadlines ([`ACQUIRE_LUA`]): `{lines, ms the oldest has waited}` over
/// the live lines (deadline ahead of the server's clock), `{0, 0}` with
/// none. Read-only; for the listing ([`crate::WaitingInfo`]) of the
/// server, its Sentinel mode and the Cluster (sent as `EVAL`: listing is
/// rare and the text short).
pub(crate) const QUEUE_INFO_LUA: &str = "\
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local lines, oldest = 0, nil
for i = 1, #entries, 2 do
  local d = tonumber(redis.call('HGET', KEYS[2], entries[i]))
  if d and d > ms then
    lines = lines + 1
    local since = tonumber(entries[i + 1])
    if not oldest or since < oldest then
      oldest = since
    end
  end
end
if lines == 0 then
  return {0, 0}
end
return {lines, math.max(0, ms - oldest)}";

/// Adds `key`'s waiting lines from a [`QUEUE_INFO_LUA`] reply.
pub(crate) fn add_waiting_from(
    listing: &mut Listing,
    key: &str,
    reply: &Value,
    addr: &str,
) -> Result<()> {
    let (lines, waited): (i64, i64) =
        ::redis::from_redis_value_ref(reply).map_err(|_| unexpected("queue info", reply, addr))?;
    if lines > 0 {
        listing.waiting.push(WaitingInfo {
            key: key.to_owned(),
            lines: u32::try_from(lines).unwrap_or(u32::MAX),
            oldest_wait: Duration::from_millis(u64::try_from(waited).unwrap_or(0)),
        });
    }
    Ok(())
}

/// The slot operations of one server ([`Redis`]).
impl Redis {
    /// The Redis key of the N-holder lease (slots) on `key`.
    pub fn slots_key(&self, key: &str) -> String {
        key_of(self.namespace(), "slots", key)
    }

    /// The Redis key of the slots' holder descriptions on `key`.
    pub fn holders_key(&self, key: &str) -> String {
        key_of(self.namespace(), "holders", key)
    }

    fn run_slot(&self, script: &Script, source: &str, call: &Call) -> Result<Value> {
        self.with_con(|con, deadline| self.eval(con, deadline, script, source, &call.0, &call.1))
    }

    pub(super) fn acquire_slot(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        let token = mint_token()?;
        let call = acquire_call(self.namespace(), key, &token, ttl, who, limit, line);
        let (value, acked): (Value, bool) = self.with_con(|con, deadline| {
            let value: Value = self.eval(
                con,
                deadline,
                &SCRIPTS.acquire,
                SLOT_ACQUIRE_LUA,
                &call.0,
                &call.1,
            )?;
            let wrote = matches!(value, Value::Int(n) if n > 0);
            let acked = self.wait_replicas(con, deadline, wrote)?;
            Ok((value, acked))
        })?;
        let fence = fence_from(&value, &self.addr)?;
        let lease = (fence > 0).then(|| Lease::slot(key, token, fence, limit));
        match lease {
            Some(lease) if !acked => Err(self.unreplicated_acquire(&lease)),
            lease => Ok(lease),
        }
    }

    pub(super) fn renew_slot(&self, renewal: &Renewal<'_>) -> Result<Renewed> {
        let call = renew_call(self.namespace(), renewal);
        let (reply, acked): (Value, bool) = self.with_con(|con, deadline| {
            let reply: Value = self.eval(
                con,
                deadline,
                &SCRIPTS.renew,
                SLOT_RENEW_LUA,
                &call.0,
                &call.1,
            )?;
            let wrote = reply == Value::Int(1);
            let acked = self.wait_replicas(con, deadline, wrote)?;
            Ok((reply, acked))
        })?;
        if !acked {
            // With a sentinel the master may have moved: look again.
            self.forget_master();
        }
        self.acked(renewed_from(&reply, &self.addr), acked)
    }

    pub(super) fn slot_info(&self, key: &str) -> Result<Option<LeaseInfo>> {
        let call = info_call(self.namespace(), key);
        info_from(
            key,
            &self.run_slot(&SCRIPTS.info, SLOT_INFO_LUA, &call)?,
            &self.addr,
        )
    }

    pub(super) fn slot_expires_in(&self, key: &str) -> Result<Option<Duration>> {
        let call = expires_call(self.namespace(), key);
        expires_from(
            &self.run_slot(&SCRIPTS.expires, EXPIRES_LUA, &call)?,
            &self.addr,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::redis::replies::{glob_escape, holder_from, redact};
    use crate::contract::info::from_unix_millis;
    use crate::error::Error;
    use ::redis::{Client, Connection};

    #[test]
    fn keys_carry_one_hash_tag() {
        let r = Redis::open("redis://127.0.0.1:1/0", "ns").unwrap();
        assert_eq!(r.lease_key("a}b"), "ns:lease:{a}b}");
        assert_eq!(r.fence_key("job"), "ns:fence:{job}");
        assert_eq!(r.flag_key("stop"), "ns:flag:{stop}");
        assert_eq!(r.info_key("job"), "ns:info:{job}");
        assert_eq!(r.raised_channel("stop"), "ns:raised:{stop}");
        assert_eq!(r.released_channel("job"), "ns:released:{job}");
    }

    #[test]
    fn bad_namespaces_and_urls_are_refused() {
        assert!(matches!(
            Redis::open("redis://127.0.0.1/", ""),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            Redis::open("redis://127.0.0.1/", "a{b"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            Redis::open("http://nope", "ns"),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn scan_patterns_are_escaped() {
        assert_eq!(
            glob_escape("ns:lease:{a*b?[c]\\"),
            "ns:lease:{a\\*b\\?\\[c\\]\\\\"
        );
    }

    #[test]
    fn descriptions_are_read_from_the_lease_value() {
        let value = b"0123456789abcdef0123456789abcdef 3000 7 1000000 500 h:1 ruby";
        // 2,500 ms left of 3,000 at 1,002,000: renewed at 1,001,500.
        let info = holder_from(value, Some(Duration::from_millis(2500)), 1_002_000).unwrap();
        assert_eq!(info.label, "h:1 ruby");
        assert_eq!(info.fence, 7);
        assert_eq!(info.ttl, Duration::from_millis(3000));
        assert_eq!(info.heartbeat, Duration::from_millis(500));
        assert_eq!(info.acquired_at, from_unix_millis(1_000_000));
        assert_eq!(info.renewed_at, from_unix_millis(1_001_500));
        // Never after the read, nor before the acquire.
        let long = holder_from(value, Some(Duration::from_millis(9000)), 1_002_000).unwrap();
        assert_eq!(long.renewed_at, from_unix_millis(1_002_000));
        let early = holder_from(value, Some(Duration::ZERO), 1_002_000).unwrap();
        assert_eq!(early.renewed_at, from_unix_millis(1_000_000));
        assert_eq!(
            holder_from(value, None, 1_002_000).unwrap().renewed_at,
            info.acquired_at
        );
        // A bare token, or anything else, describes nobody.
        assert!(holder_from(b"sometoken", Some(Duration::ZERO), 0).is_none());
        assert!(holder_from(b"tok 1 2 x 4 label", None, 0).is_none());
        assert!(holder_from(b"tok 1 2 3 4", None, 0).is_none());
        assert!(holder_from(b"tok 1 2 3 4 ", None, 0).is_some());
    }

    /// Lines refused one after the other queue in that order, also within
    /// one millisecond, on exclusive and N-holder keys: the entry's score
    /// is the time to the µs, above the last entry's. (With the whole
    /// millisecond as score, lines of one millisecond sorted by id: here
    /// "zz", "aa", "mm" came back as "aa", "mm", "zz".)
    #[test]
    fn lines_queue_in_the_order_they_came() {
        let server = mistri_locks_testkit::RedisServer::start();
        let mut con = Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let order = ["zz", "aa", "mm"];
        for round in 0..5 {
            for limit in [1u32, 2] {
                let key = format!("o{round}-{limit}");
                let k = |kind: &str| format!("t:{kind}:{{{key}}}");
                // Take what there is to take: the waiters are refused.
                let mut pipe = ::redis::pipe();
                if limit == 1 {
                    pipe.cmd("EVAL")
                        .arg(ACQUIRE_LUA)
                        .arg(2)
                        .arg(k("lease"))
                        .arg(k("fence"))
                        .arg("holder")
                        .arg(60_000);
                } else {
                    for token in ["h1", "h2"] {
                        pipe.cmd("EVAL")
                            .arg(crate::backend::redis::slots::SLOT_ACQUIRE_LUA)
                            .arg(4)
                            .arg(k("lease"))
                            .arg(k("fence"))
                            .arg(k("slots"))
                            .arg(k("holders"))
                            .arg(token)
                            .arg(60_000)
                            .arg(limit)
                            .arg("label")
                            .arg(0);
                    }
                }
                let fences: Vec<u64> = pipe.query(&mut con).unwrap();
                assert!(fences.iter().all(|f| *f > 0), "{fences:?}");
                // Three waiters back to back: one pipeline, within a
                // millisecond or two.
                let mut pipe = ::redis::pipe();
                for line in order {
                    if limit == 1 {
                        pipe.cmd("EVAL")
                            .arg(ACQUIRE_LUA)
                            .arg(5)
                            .arg(k("lease"))
                            .arg(k("fence"))
                            .arg(k("slots"))
                            .arg(k("queue"))
                            .arg(k("queued"))
                            .arg(format!("w-{line}"))
                            .arg(60_000)
                            .arg("label")
                            .arg(0)
                            .arg(line)
                            .arg(1500);
                    } else {
                        pipe.cmd("EVAL")
                            .arg(crate::backend::redis::slots::SLOT_ACQUIRE_LUA)
                            .arg(6)
                            .arg(k("lease"))
                            .arg(k("fence"))
                            .arg(k("slots"))
                            .arg(k("holders"))
                            .arg(k("queue"))
                            .arg(k("queued"))
                            .arg(format!("w-{line}"))
                            .arg(60_000)
                            .arg(limit)
                            .arg("label")
                            .arg(0)
                            .arg(line)
                            .arg(1500);
                    }
                }
                let refused: Vec<u64> = pipe.query(&mut con).unwrap();
                assert_eq!(refused, [0, 0, 0]);
                let queue: Vec<String> = ::redis::cmd("ZRANGE")
                    .arg(k("queue"))
                    .arg(0)
                    .arg(-1)
                    .query(&mut con)
                    .unwrap();
                assert_eq!(queue, order, "limit {limit}, round {round}");
            }
        }
    }

    /// The short path writes the clock's fence as TIME's two parts joined
    /// (microseconds padded to 6 digits): the same number the clock gave,
    /// in the reply, the counter and the description, whatever the digits.
    #[test]
    fn clock_fences_are_written_as_the_server_clock_said() {
        let server = mistri_locks_testkit::RedisServer::start();
        let mut con = Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let script = Script::new(ACQUIRE_LUA);
        let keys = ["t:lease:{k}", "t:fence:{k}", "t:slots:{k}", "t:queue:{k}"];
        let time_us = |con: &mut Connection| -> u64 {
            let (s, us): (u64, u64) = ::redis::cmd("TIME").query(con).unwrap();
            s * 1_000_000 + us
        };
        // Until a reading in the first tenth of a second (fewer than 6
        // microsecond digits) and one after it were seen: within ~1 s.
        let (mut short, mut long) = (0, 0);
        let start = std::time::Instant::now();
        while short == 0 || long < 50 {
            assert!(start.elapsed() < Duration::from_secs(20), "{short} {long}");
            let before = time_us(&mut con);
            let fence: u64 = script
                .key(&keys[..])
                .key("t:queued:{k}")
                .arg("tok")
                .arg(5000)
                .arg("a label")
                .arg(250)
                .invoke(&mut con)
                .unwrap();
            let after = time_us(&mut con);
            assert!(
                before <= fence && fence <= after,
                "{before} {fence} {after}"
            );
            if fence % 1_000_000 < 100_000 {
                short += 1;
            } else {
                long += 1;
            }
            let value: String = ::redis::cmd("GET").arg(keys[0]).query(&mut con).unwrap();
            let ms = fence / 1000;
            assert_eq!(value, format!("tok 5000 {fence} {ms} 250 a label"));
            let counter: String = ::redis::cmd("GET").arg(keys[1]).query(&mut con).unwrap();
            assert_eq!(counter, fence.to_string());
            let info = holder_from(value.as_bytes(), None, ms).unwrap();
            assert_eq!((info.fence, info.label.as_str()), (fence, "a label"));
            let _: i64 = ::redis::cmd("DEL").arg(keys[0]).query(&mut con).unwrap();
        }
        // A caller of two keys (an old client) is refused while the lease is
        // held, and the counter does not move.
        let held: u64 = script
            .key(&keys[..4])
            .arg("a")
            .arg(5000)
            .invoke(&mut con)
            .unwrap();
        assert!(held > 0);
        let old: u64 = script
            .key(&keys[..2])
            .arg("b")
            .arg(5000)
            .invoke(&mut con)
            .unwrap();
        assert_eq!(old, 0);
        let counter: String = ::redis::cmd("GET").arg(keys[1]).query(&mut con).unwrap();
        assert_eq!(counter, held.to_string());
        // ...and gets the lease once it is free.
        let _: i64 = ::redis::cmd("DEL").arg(keys[0]).query(&mut con).unwrap();
        let old: u64 = script
            .key(&keys[..2])
            .arg("b")
            .arg(5000)
            .invoke(&mut con)
            .unwrap();
        assert!(old > held);
        let value: String = ::redis::cmd("GET").arg(keys[0]).query(&mut con).unwrap();
        assert_eq!(value, "b");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("bad url redis://u:secret@h/0", "redis://u:secret@h/0"),
            "bad url redis://***@h/0"
        );
    }

    #[test]
    fn unreachable_server_is_a_connection_error() {
        // Port 1 on loopback: nothing listens there.
        let r = Redis::open("redis://127.0.0.1:1/0", "ns").unwrap();
        let err = r.held("k").unwrap_err();
        assert!(matches!(err, Error::Connection(_)), "{err}");
        assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    }
}
