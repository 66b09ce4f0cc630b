//! The push listener of a [`super::Postgres`] adapter: one direct
//! connection per process and adapter, on its own thread, `LISTEN`ing to
//! exactly the channels the process's watchers want
//! ([`crate::contract::push`]): one per watched stop key, one per waiting
//! line ([`super::sql::channel`]). Never the engine's schedule.
//!
//! On any error it drops the connection, reconnects (backing off 50 ms to
//! 1 s), `LISTEN`s to the whole set again and then tells every watcher to
//! read its flags and every line to try once (anything announced in the
//! gap). A silent connection is checked with an empty query every
//! [`PING_EVERY`].

use super::conn::Conn;
use super::sql::channel;
use super::url::{PgConfig, Target};
use crate::contract::push::{Interest, Plan, Registry, Subscriptions, HOT_FOR, LISTENER_IDLE};
use crate::error::Result;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often a silent listener checks its connection.
pub(crate) const PING_EVERY: Duration = Duration::from_secs(5);

/// Channels per `LISTEN` / `UNLISTEN` batch (one simple query).
const CHUNK: usize = 256;

pub(crate) struct Listener {
    cfg: PgConfig,
    target: Target,
    namespace: String,
    timeout: Duration,
}

enum Listened {
    Retired,
    Lost,
}

impl Listener {
    pub(crate) fn new(cfg: PgConfig, target: Target, namespace: &str, timeout: Duration) -> Self {
        Listener {
            cfg,
            target,
            namespace: namespace.to_owned(),
            timeout,
        }
    }

    fn channel_of(&self, interest: &Interest) -> String {
        match interest {
            Interest::Flag(key) => channel('r', &self.namespace, key, None),
            Interest::Line { key, line } => channel('n', &self.namespace, key, Some(line)),
        }
    }

    /// Runs until nobody watches (the listener thread's body).
    pub(crate) fn run(&self, registry: &Registry) {
        const FIRST_BACKOFF: Duration = Duration::from_millis(50);
        let mut backoff = FIRST_BACKOFF;
        while !registry.retire_if_unwatched() {
            let listened = match self.listen(registry) {
                Ok(Listened::Retired) => return,
                Ok(Listened::Lost) => true,
                Err(_) => false,
            };
            if listened {
                backoff = FIRST_BACKOFF;
            } else {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(LISTENER_IDLE);
            }
        }
    }

    fn apply(
        &self,
        con: &mut Conn,
        plan: &Plan,
        channels: &mut HashMap<String, Interest>,
        registry: &Registry,
    ) -> Result<()> {
        let mut send = |verb: &str, items: &[Interest], add: bool| -> Result<()> {
            for chunk in items.chunks(CHUNK) {
                let mut sql = String::new();
                for i in chunk {
                    let name = self.channel_of(i);
                    sql.push_str(&format!("{verb} \"{name}\";"));
                    if add {
                        channels.insert(name, i.clone());
                    } else {
                        channels.remove(&name);
                    }
                }
                con.simple(&sql, Instant::now() + self.timeout)?
                    .map_err(|e| e.into_error(con.peer()))?;
                deliver(channels, registry, con.notifications(Instant::now())?);
            }
            Ok(())
        };
        send("LISTEN", &plan.subscribe, true)?;
        send("UNLISTEN", &plan.unsubscribe, false)
    }

    fn listen(&self, registry: &Registry) -> Result<Listened> {
        let mut con = Conn::connect(&self.cfg, &self.target, Instant::now() + self.timeout)?;
        let mut channels = HashMap::new();
        let mut subs = Subscriptions::default();
        let all = Plan {
            subscribe: registry.wanted(),
            unsubscribe: Vec::new(),
        };
        self.apply(&mut con, &all, &mut channels, registry)?;
        subs.done(&all);
        // Live from here: what was raised before is found by reading, and
        // every waiter tries once (a release may have gone unheard).
        registry.poll_now();
        registry.released_any();
        let mut checked = Instant::now();
        let mut pinged = checked;
        let mut hot_until = checked + HOT_FOR;
        loop {
            let now = Instant::now();
            let plan = subs.plan(registry, now);
            if !plan.is_empty() {
                if self
                    .apply(&mut con, &plan, &mut channels, registry)
                    .is_err()
                {
                    return Ok(Listened::Lost);
                }
                subs.done(&plan);
                registry.live(&plan.subscribe);
                hot_until = Instant::now() + HOT_FOR;
            }
            let slice = subs.slice(now, hot_until);
            match con.notifications(Instant::now() + slice) {
                Ok(heard) if !heard.is_empty() => {
                    deliver(&channels, registry, heard);
                    continue;
                }
                Ok(_) => {}
                Err(_) => return Ok(Listened::Lost),
            }
            if checked.elapsed() < LISTENER_IDLE {
                continue;
            }
            if registry.retire_if_unwatched() {
                return Ok(Listened::Retired);
            }
            registry.idle();
            if pinged.elapsed() >= PING_EVERY {
                match con.simple("", Instant::now() + self.timeout) {
                    Ok(Ok(_)) => {}
                    _ => return Ok(Listened::Lost),
                }
                deliver(&channels, registry, con.notifications(Instant::now())?);
                pinged = Instant::now();
            }
            checked = Instant::now();
        }
    }
}

fn deliver(
    channels: &HashMap<String, Interest>,
    registry: &Registry,
    heard: Vec<(String, String)>,
) {
    for (name, payload) in heard {
        match channels.get(&name) {
            Some(Interest::Flag(key)) => registry.raised(key),
            Some(Interest::Line { key, .. }) => {
                let fence = payload.parse::<u64>().ok().filter(|f| *f != 0);
                registry.released(key, fence);
            }
            None => {}
        }
    }
}
