//! [`Sentinel`]: how a [`crate::Redis`] adapter opened with a
//! `redis+sentinel://` URL finds the master of its service.
//!
//! - Resolve: ask the sentinels in turn (`SENTINEL
//!   GET-MASTER-ADDR-BY-NAME service`), each connection bounded by a share
//!   of the time left; the first answer wins and that sentinel is asked
//!   first next time. The redis crate's sync sentinel client connects with
//!   no timeout, so this is done here, with the crate's `Connection`s.
//! - Verify: every new connection to the master asks `ROLE` before it is
//!   used; a node that is not (or no longer) a master is refused and the
//!   resolution forgotten (a sentinel can answer with a stale address
//!   during a failover).
//! - Re-resolve: the adapter calls [`Sentinel::forget`] after a connection
//!   error, a `READONLY` / `MASTERDOWN` reply or a `WAIT` that fell short;
//!   every forget bumps an epoch, and the adapter drops pooled connections
//!   of an earlier epoch; the next connection resolves afresh.
//! - Check: once a second at most (not after each write), an operation
//!   first asks a sentinel whether it still names the master
//!   ([`Sentinel::check_if_due`]); if not, it is forgotten.
//! - Follow (push listener, [`crate::contract::push`]): the flag listener subscribes
//!   on the master it resolves, and while it is silent asks a sentinel once
//!   a second whether it still names that master; if not it forgets it
//!   (the data connections follow too), subscribes on the new master and
//!   has the engines poll every watched flag.
//!
//! Every step is bounded by the caller's deadline: no call here blocks past
//! it. The resolved address lives in a [`ForkLocal`]: a forked child
//! resolves again.

use crate::backend::redis::url::UrlParts;
use crate::error::{Error, Result};
use crate::runtime::fork::ForkLocal;
use ::redis::{Client, Connection, ErrorKind, RedisError, RedisResult, Value};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const MIN_IO: Duration = Duration::from_millis(1);

#[derive(Clone)]
struct Resolved {
    client: Client,
    addr: String,
}

/// The sentinels of one service and the master they last named.
pub struct Sentinel {
    service: String,
    parts: UrlParts,
    db: Option<String>,
    sentinels: Vec<Client>,
    /// The sentinel that answered last: asked first next time.
    first: AtomicUsize,
    current: ForkLocal<Mutex<Option<Resolved>>>,
    /// A connection to the sentinel that answered last, for
    /// [`Sentinel::still_master`].
    watch: ForkLocal<Mutex<Option<Connection>>>,
    /// Bumped by every [`Sentinel::forget`]: connections opened in an
    /// earlier epoch may be to a former master.
    epoch: AtomicU64,
    /// When a sentinel was last asked whether it still names the master
    /// (ms since [`since`]), for [`Sentinel::check_if_due`].
    checked_ms: AtomicU64,
}

/// How often the data path asks a sentinel whether the master moved.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(1);
/// The longest that check may delay an operation.
const CHECK_BUDGET: Duration = Duration::from_millis(250);

/// Milliseconds since the first call (a process-wide monotonic base).
fn since() -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl std::fmt::Debug for Sentinel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sentinel")
            .field("service", &self.service)
            .field("sentinels", &self.parts.hosts)
            .finish_non_exhaustive()
    }
}

impl Sentinel {
    /// The sentinels of `redis+sentinel://[userinfo@]s1,s2/service[/db]`.
    ///
    /// # Errors
    /// [`Error::Config`] when the service name is missing or a sentinel
    /// address does not parse.
    pub(crate) fn new(parts: UrlParts, params: &[(String, String)]) -> Result<Self> {
        let service = parts.path.first().cloned().ok_or_else(|| {
            Error::Config(
                "cannot use Redis URL: redis+sentinel:// needs the service name after the \
                 sentinel list (redis+sentinel://h1:p1,h2:p2/mymaster/0)"
                    .into(),
            )
        })?;
        let db = parts.path.get(1).cloned();
        let param = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let sentinel_user = match (param("sentinel_username"), param("sentinel_password")) {
            (None, None) => None,
            (u, p) => Some(format!(
                "{}:{}",
                u.unwrap_or_default(),
                p.unwrap_or_default()
            )),
        };
        // Sentinels speak only the connection's own parameters, not ours.
        let plain = UrlParts {
            query: Vec::new(),
            ..parts.clone()
        };
        let sentinels = parts
            .hosts
            .iter()
            .map(|h| {
                Client::open(plain.node_url(h, None, sentinel_user.as_deref()))
                    .map_err(|e| Error::Config(format!("cannot use sentinel address {h}: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        if parts.base == "rediss" {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        Ok(Sentinel {
            service,
            db,
            parts,
            sentinels,
            first: AtomicUsize::new(0),
            current: ForkLocal::new(Mutex::new(None), |_| Mutex::new(None)),
            watch: ForkLocal::new(Mutex::new(None), |_| Mutex::new(None)),
            epoch: AtomicU64::new(0),
            checked_ms: AtomicU64::new(since()),
        })
    }

    /// `service 'S' via sentinels a,b,c`, for messages (never a password).
    pub fn describe(&self) -> String {
        format!(
            "service '{}' via sentinels {}",
            self.service,
            self.parts.hosts.join(",")
        )
    }

    /// Forgets the resolved master: the next connection asks the sentinels.
    pub fn forget(&self) {
        *self.current.get().lock() = None;
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// Once per [`CHECK_EVERY`] (one caller at a time; the others go on):
    /// does a sentinel still name the resolved master? If not it is
    /// forgotten, so this and every later operation resolves the new one.
    /// A forced failover (`SENTINEL FAILOVER`) leaves the old master up
    /// and taking writes until the sentinels re-point it, 8 s or more
    /// later; this bounds how long an adapter keeps writing there to about
    /// a second plus the time the sentinels take to agree, without a round
    /// trip per write. Bounded by `deadline`.
    pub(crate) fn check_if_due(&self, deadline: Instant) {
        let now = since();
        let last = self.checked_ms.load(Ordering::Relaxed);
        let every = u64::try_from(CHECK_EVERY.as_millis()).unwrap_or(1000);
        if now.saturating_sub(last) < every
            || self
                .checked_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        if let Some(master) = self.master_addr() {
            // A quarter of a second, and half the time left, at most: the
            // operation itself comes next, and a silent sentinel is no news.
            let left = deadline.saturating_duration_since(Instant::now());
            let budget = (left / 2).min(CHECK_BUDGET);
            self.still_master(&master, Instant::now() + budget);
        }
    }

    /// How many times the master was forgotten: a connection opened in an
    /// earlier epoch may be to a former master.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// The master's address as last resolved, if any.
    pub fn master_addr(&self) -> Option<String> {
        self.current.get().lock().as_ref().map(|r| r.addr.clone())
    }

    /// Does a sentinel still name `master`? `false` (and the master is
    /// forgotten) only when a sentinel answered with another address (a
    /// failover promoted a replica while the old master still takes
    /// writes and messages nobody else sees). No answer by `deadline` is
    /// no news: `true`. One round trip on a kept connection; asked once a
    /// second at most by the data path ([`Sentinel::check_if_due`]) and by
    /// the flag listener while it is silent, never after each write.
    pub(crate) fn still_master(&self, master: &str, deadline: Instant) -> bool {
        let asked = (|| -> RedisResult<Option<String>> {
            let kept = self.watch.get().lock().take();
            let mut con = match kept {
                Some(con) => con,
                None => {
                    let idx = self.first.load(Ordering::Relaxed) % self.sentinels.len();
                    self.sentinels[idx]
                        .get_connection_with_timeout((left(deadline)? / 2).max(MIN_IO))?
                }
            };
            aim(&con, deadline)?;
            let reply: Option<(String, u16)> = ::redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.service)
                .query(&mut con)?;
            *self.watch.get().lock() = Some(con);
            Ok(reply.map(|(host, port)| node_addr(&host, port)))
        })();
        match asked {
            Ok(Some(named)) if named != master => {
                self.forget();
                false
            }
            Err(_) => {
                // That sentinel is down or slow: ask the next one next time.
                self.first.fetch_add(1, Ordering::Relaxed);
                true
            }
            _ => true,
        }
    }

    /// A connection to the current master, verified with `ROLE`, opened by
    /// `deadline`.
    pub(crate) fn connect(&self, deadline: Instant) -> RedisResult<(Connection, String)> {
        let known = self.current.get().lock().clone();
        let master = match known {
            Some(m) => m,
            None => {
                let m = self.resolve(deadline)?;
                *self.current.get().lock() = Some(m.clone());
                m
            }
        };
        match Self::connect_master(&master, deadline) {
            Ok(con) => Ok((con, master.addr)),
            Err(e) => {
                self.forget();
                Err(e)
            }
        }
    }

    fn connect_master(master: &Resolved, deadline: Instant) -> RedisResult<Connection> {
        // Connecting runs a setup round trip or two; ROLE one more.
        let con = master
            .client
            .get_connection_with_timeout((left(deadline)? / 3).max(MIN_IO))?;
        aim(&con, deadline)?;
        let mut con = con;
        let role: Value = ::redis::cmd("ROLE").query(&mut con)?;
        let is_master = matches!(&role, Value::Array(items)
            if matches!(items.first(), Some(Value::BulkString(b)) if b == b"master"));
        if !is_master {
            return Err(RedisError::from((
                ErrorKind::Io,
                "sentinel named a node that is not a master",
                master.addr.clone(),
            )));
        }
        Ok(con)
    }

    /// Asks the sentinels, in turn, for the master's address.
    fn resolve(&self, deadline: Instant) -> RedisResult<Resolved> {
        let n = self.sentinels.len();
        let start = self.first.load(Ordering::Relaxed) % n;
        let mut why = Vec::new();
        for i in 0..n {
            let idx = (start + i) % n;
            // Each sentinel left to ask gets an equal share of the time left
            // (a refused port answers at once; a silent one costs its share).
            let share = left(deadline)? / u32::try_from(n - i).unwrap_or(1);
            match self.ask(idx, share.max(MIN_IO)) {
                Ok(Some(addr)) => {
                    self.first.store(idx, Ordering::Relaxed);
                    let url = self.parts.node_url(
                        &addr,
                        self.db.as_deref(),
                        self.parts.userinfo.as_deref(),
                    );
                    let client = Client::open(url)?;
                    return Ok(Resolved { client, addr });
                }
                Ok(None) => why.push(format!(
                    "{} does not know the service",
                    self.parts.hosts[idx]
                )),
                Err(e) => why.push(format!("{}: {e}", self.parts.hosts[idx])),
            }
        }
        Err(RedisError::from((
            ErrorKind::Io,
            "no sentinel named a master",
            format!("{} ({})", self.describe(), why.join("; ")),
        )))
    }

    fn ask(&self, idx: usize, budget: Duration) -> RedisResult<Option<String>> {
        let deadline = Instant::now() + budget;
        let mut con = self.sentinels[idx].get_connection_with_timeout((budget / 2).max(MIN_IO))?;
        aim(&con, deadline)?;
        let reply: Option<(String, u16)> = ::redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.service)
            .query(&mut con)?;
        Ok(reply.map(|(host, port)| node_addr(&host, port)))
    }
}

/// The flag listener of a `redis+sentinel://` adapter subscribes on the
/// master the sentinels name and follows it.
impl crate::backend::redis::listener::ListenAt for Sentinel {
    fn connect(&self, deadline: Instant) -> RedisResult<(Connection, String)> {
        Sentinel::connect(self, deadline)
    }

    fn moved(&self, addr: &str, deadline: Instant) -> bool {
        match self.master_addr() {
            // The data connections resolved another master already.
            Some(current) if current != addr => true,
            _ => !self.still_master(addr, deadline),
        }
    }
}

fn node_addr(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn left(deadline: Instant) -> RedisResult<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| *d >= MIN_IO)
        .ok_or_else(|| {
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "deadline passed while finding the master",
            ))
        })
}

fn aim(con: &Connection, deadline: Instant) -> RedisResult<()> {
    let l = left(deadline)?;
    con.set_read_timeout(Some(l))?;
    con.set_write_timeout(Some(l))
}
