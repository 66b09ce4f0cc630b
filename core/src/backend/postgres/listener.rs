//! The push listener of a [`super::Postgres`] adapter: what Postgres
//! supplies to the one listener lifecycle ([`crate::contract::listen`]).
//! One direct connection per process and adapter, on its own thread,
//! `LISTEN`ing to exactly the channels the process's watchers want
//! ([`crate::contract::push`]): one per watched stop key, one per waiting
//! line ([`super::sql::channel`]). Never the engine's schedule. A silent
//! connection is checked with an empty query.

use super::conn::Conn;
use super::sql::channel;
use super::url::{PgConfig, Target};
use crate::contract::listen::{self, Heard, PushSource};
use crate::contract::push::{Interest, Registry};
use crate::error::Result;
use std::time::{Duration, Instant};

/// A listener (see the module header).
pub(crate) struct Listener(listen::Listener<Channels>);

impl Listener {
    pub(crate) fn new(cfg: PgConfig, target: Target, namespace: &str, timeout: Duration) -> Self {
        let namespace = namespace.to_owned();
        let source = Channels {
            cfg,
            target,
            namespace,
        };
        Listener(listen::Listener::new(source, timeout))
    }

    /// Runs until nobody watches (the listener thread's body).
    pub(crate) fn run(&self, registry: &Registry) {
        self.0.run(registry);
    }
}

/// Postgres's part of the lifecycle.
pub(crate) struct Channels {
    cfg: PgConfig,
    target: Target,
    namespace: String,
}

fn heard_in(con: &mut Conn, until: Instant, heard: &mut Heard) -> Result<()> {
    let got = con.notifications(until)?;
    heard.extend(got.into_iter().map(|(c, p)| (c, p.into_bytes())));
    Ok(())
}

impl PushSource for Channels {
    type Con = Conn;
    /// Channels per `LISTEN` / `UNLISTEN` batch (one simple query).
    const CHUNK: usize = 256;

    fn connect(&self, deadline: Instant) -> Result<Conn> {
        Conn::connect(&self.cfg, &self.target, deadline)
    }

    fn channel_of(&self, interest: &Interest) -> String {
        match interest {
            Interest::Flag(key) => channel('r', &self.namespace, key, None),
            Interest::Line { key, line } => channel('n', &self.namespace, key, Some(line)),
        }
    }

    /// One simple query of `LISTEN "name";` statements (the names are
    /// quoted identifiers, [`channel`] keeps them short and quote-free).
    fn subscribe(
        &self,
        con: &mut Conn,
        names: &[String],
        on: bool,
        deadline: Instant,
        heard: &mut Heard,
    ) -> Result<()> {
        let verb = if on { "LISTEN" } else { "UNLISTEN" };
        let sql: String = names.iter().map(|n| format!("{verb} \"{n}\";")).collect();
        con.simple(&sql, deadline)?
            .map_err(|e| e.into_error(con.peer()))?;
        heard_in(con, Instant::now(), heard)
    }

    fn read(&self, con: &mut Conn, until: Instant, heard: &mut Heard) -> Result<()> {
        heard_in(con, until, heard)
    }

    fn ping(&self, con: &mut Conn, deadline: Instant, heard: &mut Heard) -> Result<()> {
        con.simple("", deadline)?
            .map_err(|e| e.into_error(con.peer()))?;
        heard_in(con, Instant::now(), heard)
    }
}
