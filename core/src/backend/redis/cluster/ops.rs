//! The [`Adapter`] of [`RedisCluster`]: each operation one script on the
//! node that owns its key's slot, a beat one pipeline per master.

use super::client::unexpected;
use super::client::Op;
use super::client::RedisCluster;
use super::client::RAISE_LUA;
use super::map::NO_NODE;
use crate::args::millis_ceil;
use crate::backend::redis::ops::{add_waiting_from, server_time, QUEUE_INFO_LUA};
use crate::backend::redis::replies::{flag_from, min_left_ms, renewed_from};
use crate::backend::redis::scripts::{
    break_keys, queue_ttl_ms, ACQUIRE_LUA, BREAK, BREAK_LUA, LEAVE_QUEUE, LEAVE_QUEUE_LUA,
    RELEASE_LUA,
};
use crate::backend::redis::slots::{self as slot, SCRIPTS as SLOT_SCRIPTS};
use crate::contract::adapter::acquire_dispatch;
use crate::contract::adapter::{Adapter, Beat, Lease, Renewal, Renewed};
use crate::contract::info::{FlagInfo, Identity, LeaseInfo, Listing};
use crate::contract::push::{FlagWatch, FlagWatcher};
use crate::error::{Error, Result};
use crate::runtime::token::mint_token;
use ::redis::Value;
use std::collections::HashMap;
use std::sync::Weak;
use std::time::{Duration, Instant};

impl RedisCluster {
    /// The exclusive acquire; `line`: a waiter's line ([`ACQUIRE_LUA`]'s
    /// queue).
    /// One slot of an N-holder lease; `line`: a waiter's line (the
    /// queue of [`slot::SLOT_ACQUIRE_LUA`]).
    pub(crate) fn acquire_slot(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        limit: u32,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        let token = mint_token()?;
        let op = self.slot_op(
            &SLOT_SCRIPTS.acquire,
            slot::SLOT_ACQUIRE_LUA,
            slot::acquire_call(&self.namespace, key, &token, ttl, who, limit, line),
            true,
        );
        let (value, acked) = self.one(op)?;
        let fence = slot::fence_from(&value, "Redis Cluster")?;
        if fence == 0 {
            return Ok(None);
        }
        let lease = Lease::slot(key, token, fence, limit);
        if !acked {
            let undone = match self.release(&lease) {
                Ok(true) => "released it",
                Ok(false) => "it is gone already",
                Err(_) => "could not release it (it expires with its ttl)",
            };
            return Err(Error::Backend(format!(
                "{}; {undone}",
                self.not_replicated(&format!("acquire of a slot of {key:?}"))
            )));
        }
        Ok(Some(lease))
    }

    pub(crate) fn acquire_exclusive(
        &self,
        key: &str,
        ttl: Duration,
        who: &Identity,
        line: Option<&str>,
    ) -> Result<Option<Lease>> {
        let token = mint_token()?;
        let mut args = vec![
            token.clone(),
            millis_ceil(ttl).to_string(),
            who.stored_label().into_owned(),
            min_left_ms(who.heartbeat).to_string(),
        ];
        if let Some(line) = line {
            args.push(line.to_owned());
            args.push(queue_ttl_ms().to_string());
        }
        let mut op = self.script_op(
            &self.acquire,
            ACQUIRE_LUA,
            &[
                self.key("lease", key),
                self.key("fence", key),
                self.key("slots", key),
                self.key("queue", key),
                self.key("queued", key),
            ],
            &args,
        );
        op.write = true;
        let (value, acked) = self.one(op)?;
        let fence = match value {
            Value::Int(n) => u64::try_from(n).unwrap_or(0),
            other => return Err(unexpected("acquire", &other)),
        };
        if fence == 0 {
            return Ok(None);
        }
        let lease = Lease::new(key, token, fence);
        if !acked {
            let undone = match self.release(&lease) {
                Ok(true) => "released it",
                Ok(false) => "it is gone already",
                Err(_) => "could not release it (it expires with its ttl)",
            };
            return Err(Error::Backend(format!(
                "{}; {undone}",
                self.not_replicated(&format!("acquire of {key:?}"))
            )));
        }
        Ok(Some(lease))
    }
}

impl RedisCluster {
    /// The release, ending by `by` if that comes before the timeout.
    fn release_until(&self, lease: &Lease, by: Option<Instant>) -> Result<bool> {
        if lease.slotted() {
            let (keys, args) = slot::release_call(&self.namespace, lease, "SPUBLISH");
            let op = self.slot_op(
                &SLOT_SCRIPTS.release,
                slot::SLOT_RELEASE_LUA,
                (keys, args),
                true,
            );
            return match self.query_by(op, by)? {
                Value::Int(n) => Ok(n == 1),
                other => Err(unexpected("release", &other)),
            };
        }
        let op = self.script_op(
            &self.release,
            RELEASE_LUA,
            &[
                self.key("lease", lease.key()),
                self.key("queue", lease.key()),
                self.key("queued", lease.key()),
            ],
            // Announced to the next waiting line only, by sharded pub/sub
            // on the key's slot owner (no message crosses the bus).
            &[
                lease.token().to_owned(),
                format!("{}:", self.key("next", lease.key())),
                lease.fence().to_string(),
                "SPUBLISH".to_owned(),
            ],
        );
        match self.query_by(op, by)? {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected("release", &other)),
        }
    }
}

impl Adapter for RedisCluster {
    acquire_dispatch!();

    fn name(&self) -> &'static str {
        "redis-cluster"
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

    fn leave_queue(&self, key: &str, line: &str) -> Result<()> {
        let mut op = self.script_op(
            &LEAVE_QUEUE,
            LEAVE_QUEUE_LUA,
            &[
                self.key("queue", key),
                self.key("queued", key),
                self.key("slots", key),
                self.key("holders", key),
            ],
            // A leaving head tells the next line, as a release does.
            &[
                line.to_owned(),
                format!("{}:", self.key("next", key)),
                "SPUBLISH".to_owned(),
            ],
        );
        op.write = true;
        self.query(op).map(drop)
    }

    fn renew_within(&self, renewal: &Renewal<'_>) -> Result<Renewed> {
        let (value, acked) = self.one(self.renew_op(renewal))?;
        match renewed_from(&value, "Redis Cluster")? {
            Renewed::Yes if !acked => Err(self.not_replicated("renewal")),
            other => Ok(other),
        }
    }

    fn release(&self, lease: &Lease) -> Result<bool> {
        self.release_until(lease, None)
    }

    fn release_by(&self, lease: &Lease, deadline: Instant) -> Result<bool> {
        self.release_until(lease, Some(deadline))
    }

    fn held(&self, key: &str) -> Result<bool> {
        let k = self.key("lease", key);
        let mut cmd = ::redis::cmd("EXISTS");
        cmd.arg(&k).arg(self.key("slots", key));
        match self.query(Self::plain_op(&k, cmd))? {
            Value::Int(n) => Ok(n >= 1),
            other => Err(unexpected("EXISTS", &other)),
        }
    }

    fn expires_in(&self, key: &str) -> Result<Option<Duration>> {
        let op = self.slot_op(
            &SLOT_SCRIPTS.expires,
            slot::EXPIRES_LUA,
            slot::expires_call(&self.namespace, key),
            false,
        );
        slot::expires_from(&self.query(op)?, "Redis Cluster")
    }

    fn break_lease(&self, key: &str) -> Result<bool> {
        // Announced like a release (the single server's script).
        let keys = break_keys(&self.namespace, key);
        let args = [format!("{}:", self.key("next", key)), "SPUBLISH".to_owned()];
        match self.query(self.script_op(&BREAK, BREAK_LUA, &keys, &args))? {
            Value::Int(n) => Ok(n >= 1),
            other => Err(unexpected("break", &other)),
        }
    }

    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()> {
        let op = self.script_op(
            &self.raise,
            RAISE_LUA,
            &[self.key("flag", key)],
            &[millis_ceil(ttl).to_string(), self.key("raised", key)],
        );
        self.query(op).map(drop)
    }

    fn watch_flags(&self, watcher: Weak<dyn FlagWatcher>) -> Option<FlagWatch> {
        let listener = super::shards::ShardListener {
            parts: self.parts.clone(),
            known: self.known.get().clone(),
            namespace: self.namespace.clone(),
            timeout: self.timeout,
        };
        self.push.get().watch(watcher, move |registry| {
            crate::contract::listen::spawn("mistri-flags", move || listener.run(&registry))
        })
    }

    fn flag(&self, key: &str) -> Result<bool> {
        let k = self.key("flag", key);
        let mut cmd = ::redis::cmd("EXISTS");
        cmd.arg(&k);
        flag_from(&self.query(Self::plain_op(&k, cmd))?, "Redis Cluster")
    }

    fn clear_flag(&self, key: &str) -> Result<()> {
        let k = self.key("flag", key);
        let mut cmd = ::redis::cmd("DEL");
        cmd.arg(&k);
        self.query(Self::plain_op(&k, cmd)).map(drop)
    }

    fn info(&self, key: &str) -> Result<Option<LeaseInfo>> {
        let value = self.query(self.info_op(key))?;
        match self.info_from(key, value)? {
            Some(info) => Ok(Some(info)),
            None => slot::info_from(key, &self.query(self.slot_info_op(key))?, "Redis Cluster"),
        }
    }

    fn list(&self, prefix: &str) -> Result<Listing> {
        let mut listing = Listing::default();
        let leases = self.keys_of("lease", prefix)?;
        for chunk in leases.chunks(500) {
            let ops: Vec<Op> = chunk.iter().map(|k| self.info_op(k)).collect();
            let answers = self.run(&ops, Instant::now() + self.timeout);
            for (key, answer) in chunk.iter().zip(answers) {
                let (value, _) = answer?;
                // Gone between the scan and now: not live, not listed.
                if let Some(info) = self.info_from(key, value)? {
                    listing.leases.push(info);
                }
            }
        }
        let slotted = self.keys_of("slots", prefix)?;
        for chunk in slotted.chunks(500) {
            let ops: Vec<Op> = chunk.iter().map(|k| self.slot_info_op(k)).collect();
            let answers = self.run(&ops, Instant::now() + self.timeout);
            for (key, answer) in chunk.iter().zip(answers) {
                let (value, _) = answer?;
                if let Some(info) = slot::info_from(key, &value, "Redis Cluster")? {
                    listing.leases.push(info);
                }
            }
        }
        let queued = self.keys_of("queue", prefix)?;
        for chunk in queued.chunks(500) {
            let ops: Vec<Op> = chunk
                .iter()
                .map(|k| {
                    let queue = self.key("queue", k);
                    let mut cmd = ::redis::cmd("EVAL");
                    cmd.arg(QUEUE_INFO_LUA)
                        .arg(2)
                        .arg(&queue)
                        .arg(self.key("queued", k));
                    Self::plain_op(&queue, cmd)
                })
                .collect();
            let answers = self.run(&ops, Instant::now() + self.timeout);
            for (key, answer) in chunk.iter().zip(answers) {
                add_waiting_from(&mut listing, key, &answer?.0, "Redis Cluster")?;
            }
        }
        let flags = self.keys_of("flag", prefix)?;
        for chunk in flags.chunks(500) {
            let ops: Vec<Op> = chunk
                .iter()
                .map(|k| {
                    let fk = self.key("flag", k);
                    let mut cmd = ::redis::cmd("PTTL");
                    cmd.arg(&fk);
                    Self::plain_op(&fk, cmd)
                })
                .collect();
            let answers = self.run(&ops, Instant::now() + self.timeout);
            for (key, answer) in chunk.iter().zip(answers) {
                match answer?.0 {
                    Value::Int(-2) => {}
                    Value::Int(pttl) => listing.flags.push(FlagInfo {
                        key: key.clone(),
                        time_left: u64::try_from(pttl).ok().map(Duration::from_millis),
                    }),
                    other => return Err(unexpected("PTTL", &other)),
                }
            }
        }
        listing.sort();
        Ok(listing)
    }

    fn beat(&self, renewals: &[Renewal<'_>], flags: &[&str], deadline: Instant) -> Result<Beat> {
        if renewals.is_empty() && flags.is_empty() {
            return Ok(Beat::default());
        }
        let deadline = deadline.min(Instant::now() + self.timeout);
        let mut ops: Vec<Op> = renewals.iter().map(|r| self.renew_op(r)).collect();
        for key in flags {
            let k = self.key("flag", key);
            let mut cmd = ::redis::cmd("EXISTS");
            cmd.arg(&k);
            ops.push(Self::plain_op(&k, cmd));
        }
        // One TIME per master that owns one of the renewals (routed by one
        // of its slots): the masters' clocks ([`super::clock`]).
        let masters: Vec<(String, u16)> = {
            let state = self.state.get().lock();
            let mut seen: HashMap<u16, u16> = HashMap::new();
            for op in &ops[..renewals.len()] {
                let node = state.map.owner[usize::from(op.slot)];
                if node != NO_NODE {
                    seen.entry(node).or_insert(op.slot);
                }
            }
            (seen.into_iter())
                .filter_map(|(node, slot)| {
                    Some((state.map.nodes.get(usize::from(node))?.clone(), slot))
                })
                .collect()
        };
        for (_, slot) in &masters {
            ops.push(Op {
                slot: *slot,
                cmd: ::redis::cmd("TIME"),
                eval: None,
                write: false,
            });
        }
        let mut answers = self.run(&ops, deadline);
        let received = Instant::now();
        let time_answers = answers.split_off(renewals.len() + flags.len());
        let readings: Vec<(String, Duration)> = (masters.into_iter().zip(time_answers))
            .filter_map(|((master, _), a)| Some((master, server_time(&a.ok()?.0)?)))
            .collect();
        let server_clock = self.clock.get().lock().read(&readings, received);
        let flag_answers = answers.split_off(renewals.len());
        Ok(Beat {
            renewals: answers
                .into_iter()
                .map(|a| {
                    let (value, acked) = a?;
                    match renewed_from(&value, "Redis Cluster")? {
                        Renewed::Yes if !acked => Err(self.not_replicated("renewal")),
                        other => Ok(other),
                    }
                })
                .collect(),
            flags: flag_answers
                .into_iter()
                .map(|a| flag_from(&a?.0, "Redis Cluster"))
                .collect(),
            server_clock,
        })
    }
}
