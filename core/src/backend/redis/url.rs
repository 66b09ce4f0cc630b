//! One place that turns a Redis URL into an adapter, so every face (Rust
//! [`crate::Locks::redis`], C `mistri_locks_redis_new`, Python `Redis(url=)`,
//! Ruby `Redis.new(url:)`, the CLI's `--url`) accepts the same forms:
//!
//! | URL | adapter |
//! |---|---|
//! | `redis://[user:pass@]host[:port][/db]`, `rediss://…`, `unix://…`, `redis+unix://…` | [`Redis`], one server |
//! | `redis+sentinel://[user:pass@]s1:p1,s2:p2/service[/db]`, `rediss+sentinel://…` | [`Redis`], its master found through the sentinels |
//! | `redis+cluster://[user:pass@]h1:p1,h2:p2[/…]`, `rediss+cluster://…` | [`RedisCluster`] |
//!
//! Credentials and TLS (`rediss`, the `#insecure` fragment for tests) apply
//! to the data nodes as they do for `redis://`. Sentinels are asked without
//! credentials unless the query carries `sentinel_username=` /
//! `sentinel_password=`; with `rediss+sentinel` they are reached over TLS too.
//!
//! Two query parameters of our own, on every form, ask for replica
//! acknowledgement ([`ReplicaAck`]): `min_replicas=N` and
//! `replica_timeout=SECONDS` (default 0.5 s); two more say what the server
//! may do to the leases: `eviction=accept` (run on a server whose memory
//! policy may evict them) and `settings_check=SECONDS` (how often the
//! heartbeat reads that policy, default 60 s). The socket forms
//! (`unix://`, `redis+unix://`) also take the redis crate's `db`, `user`
//! and `pass`; Sentinel takes `sentinel_username` and `sentinel_password`.
//! Any other option is refused at open, naming the nearest known one
//! ([`OPTIONS`] and its kin are this backend's rows of the scheme table in
//! `backend/mod.rs`): a mistyped `min_replica=all` must not silently drop
//! the acknowledgement it asked for.

use crate::backend::shown_url;
use crate::backend::url::split;
use crate::error::{Error, Result};
use std::time::Duration;

/// The query options of `redis://`, `rediss://` and the Cluster forms.
pub(crate) const OPTIONS: &[&str] = &[
    "min_replicas",
    "replica_timeout",
    "eviction",
    "settings_check",
];

/// The options of `unix://` and `redis+unix://`: ours, and the redis
/// crate's own for a socket (the database, user and password).
pub(crate) const UNIX_OPTIONS: &[&str] = &[
    "min_replicas",
    "replica_timeout",
    "eviction",
    "settings_check",
    "db",
    "user",
    "pass",
];

/// The options of the Sentinel forms: ours, and the sentinels' credentials.
pub(crate) const SENTINEL_OPTIONS: &[&str] = &[
    "min_replicas",
    "replica_timeout",
    "eviction",
    "settings_check",
    "sentinel_username",
    "sentinel_password",
];

/// The default URL.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379/0";
/// Connect, read and write timeout of every connection.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a `WAIT` for replicas may take when the URL does not say.
pub const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_millis(500);

/// Opt-in replica acknowledgement: after an acquire and after each renewal
/// the adapter sends `WAIT min_replicas timeout` on the same connection,
/// and counts the write as done only if that many replicas acknowledged it.
///
/// - An acquire that is not acknowledged in time is undone (the lease is
///   deleted by its token) and reported as an **error**
///   ([`Error::Backend`], "not replicated"), never as a refusal: a refusal
///   means "someone else holds it", which is not what happened.
/// - A renewal that is not acknowledged in time is an error for that
///   renewal: the engine does not count it as confirmed, retries it on the
///   next tick, and trips the hold at its safe deadline if no renewal is
///   acknowledged by then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplicaAck {
    /// Replicas that must acknowledge; 0 turns the feature off.
    pub min_replicas: u32,
    /// The longest one `WAIT` may block (also capped by the operation's
    /// deadline).
    pub timeout: Duration,
    /// The URL's `eviction=accept` (what the server may do to the writes
    /// travels with the rest of the URL's durability settings): run on a
    /// server whose memory policy may evict leases, which is otherwise
    /// refused at every connect (`Redis::accepting_eviction`).
    pub accept_eviction: bool,
    /// The URL's `settings_check=SECONDS`: how often the heartbeat reads
    /// the memory policy while holds are alive (`None`: every
    /// [`crate::SETTINGS_CHECK_EVERY`]).
    pub settings_check: Option<Duration>,
}

impl ReplicaAck {
    /// `min_replicas=all`: every replica connected to the master when the
    /// connection was made must acknowledge (the one Sentinel or the
    /// Cluster promotes may be any of them). A replica that drops later
    /// makes `WAIT` fall short, and the write is not confirmed.
    pub const ALL: u32 = u32::MAX;

    /// Is acknowledgement asked for?
    pub fn enabled(&self) -> bool {
        self.min_replicas > 0
    }

    /// How many replicas a `WAIT` asks for, given the replicas `connected`
    /// to the master when the connection was made.
    pub fn wanted(&self, connected: u32) -> u32 {
        if self.min_replicas == Self::ALL {
            connected
        } else {
            self.min_replicas
        }
    }

    /// `min_replicas` as the URL says it (`all`, or the number).
    pub fn describe(&self) -> String {
        if self.min_replicas == Self::ALL {
            "all".to_owned()
        } else {
            self.min_replicas.to_string()
        }
    }
}

/// The pieces of a Redis URL, for the forms with a host list.
#[derive(Debug, Clone)]
pub(crate) struct UrlParts {
    /// `redis` or `rediss`: the scheme each node is reached with.
    pub base: &'static str,
    /// `user:pass` (still percent-encoded), if given.
    pub userinfo: Option<String>,
    /// `host:port` of each seed, in order.
    pub hosts: Vec<String>,
    /// The path segments after the host list.
    pub path: Vec<String>,
    /// The query parameters not consumed by us, as `k=v` strings.
    pub query: Vec<String>,
    /// The fragment (`insecure`), if any.
    pub fragment: Option<String>,
}

impl UrlParts {
    /// `base://[userinfo@]host[/db][?query][#fragment]`: one node as the
    /// redis crate understands it.
    pub fn node_url(&self, host: &str, db: Option<&str>, userinfo: Option<&str>) -> String {
        let mut url = format!("{}://", self.base);
        if let Some(user) = userinfo {
            url.push_str(user);
            url.push('@');
        }
        url.push_str(host);
        if let Some(db) = db {
            url.push('/');
            url.push_str(db);
        }
        if !self.query.is_empty() {
            url.push('?');
            url.push_str(&self.query.join("&"));
        }
        if let Some(frag) = &self.fragment {
            url.push('#');
            url.push_str(frag);
        }
        url
    }
}

/// Splits `url` into its scheme, the rest with our own query parameters
/// taken out, and those parameters.
/// `name=value` query parameters.
pub(crate) type Params = Vec<(String, String)>;

pub(crate) fn take_own_params(url: &str) -> Result<(String, ReplicaAck, Params)> {
    let parts = split(url, REDIS_SCHEMES).map_err(|what| {
        Error::Config(format!("cannot use Redis URL: {}", url_problem(url, &what)))
    })?;
    let mut ack = ReplicaAck {
        min_replicas: 0,
        timeout: DEFAULT_REPLICA_TIMEOUT,
        accept_eviction: false,
        settings_check: None,
    };
    let mut kept = Vec::new();
    let mut sentinel_params = Vec::new();
    let shown = crate::backend::shown_url(url);
    let unix = url.starts_with("unix://") || url.starts_with("redis+unix://");
    for ((k, v), pair) in parts.query.iter().zip(&parts.raw_query) {
        let (k, v) = (k.as_str(), v.as_str());
        match k {
            "min_replicas" if v == "all" => ack.min_replicas = ReplicaAck::ALL,
            "min_replicas" => {
                ack.min_replicas = v.parse().map_err(|_| {
                    Error::InvalidArgument(format!(
                        "min_replicas must be a whole number of replicas or all, got {v:?} in {shown}"
                    ))
                })?;
            }
            "replica_timeout" => {
                let secs: f64 = v.parse().map_err(|_| {
                    Error::InvalidArgument(format!(
                        "replica_timeout must be a number of seconds, got {v:?} in {shown}"
                    ))
                })?;
                ack.timeout = crate::args::duration_from_secs("replica_timeout", secs)?;
            }
            "eviction" => {
                ack.accept_eviction = match v {
                    "accept" => true,
                    "refuse" => false,
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "eviction must be accept or refuse, got {v:?} in {shown}"
                        )))
                    }
                };
            }
            "settings_check" => {
                let secs: f64 = v.parse().map_err(|_| {
                    Error::InvalidArgument(format!(
                        "settings_check must be a number of seconds, got {v:?} in {shown}"
                    ))
                })?;
                ack.settings_check = Some(crate::args::duration_from_secs("settings_check", secs)?);
            }
            "sentinel_username" | "sentinel_password" => {
                sentinel_params.push((k.to_owned(), v.to_owned()));
            }
            "db" | "user" | "pass" if unix => kept.push(pair.as_str()),
            // `backend::check_query` refused it already; this is the
            // same answer for a caller that came another way.
            _ => {
                let known = if unix { UNIX_OPTIONS } else { OPTIONS };
                let known = if url.contains("+sentinel://") {
                    SENTINEL_OPTIONS
                } else {
                    known
                };
                return Err(crate::backend::unknown_option(url, k, known));
            }
        }
    }
    if ack.enabled() && ack.timeout >= DEFAULT_TIMEOUT {
        return Err(Error::InvalidArgument(format!(
            "replica_timeout must be shorter than the operation timeout ({:?}), got {:?}",
            DEFAULT_TIMEOUT, ack.timeout
        )));
    }
    // The URL again for the redis crate, without our options.
    let mut rest = format!("{}://", parts.scheme);
    if let Some(info) = &parts.userinfo {
        rest.push_str(info);
        rest.push('@');
    }
    let hosts: Vec<String> = parts.hosts.iter().map(ToString::to_string).collect();
    rest.push_str(&hosts.join(","));
    if !parts.path.is_empty() {
        rest.push('/');
        rest.push_str(&parts.path);
    }
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    if let Some(f) = &parts.fragment {
        rest.push('#');
        rest.push_str(f);
    }
    Ok((rest, ack, sentinel_params))
}

/// For [`super::Redis::open`] and [`super::Redis::with_timeout`], which
/// take one server's URL and read none of this backend's own options: an
/// unknown option is refused as everywhere ([`crate::backend::check_query`]),
/// and so is one of ours, which only [`crate::open`] and
/// [`crate::Locks::redis`] read (silently dropping `min_replicas=all`
/// would drop the safety it asks for).
///
/// # Errors
/// [`Error::InvalidArgument`] naming the option.
pub(crate) fn check_plain(url: &str) -> Result<()> {
    crate::backend::check_query(url)?;
    // A URL that does not split is the client's to report (`url_problem`).
    let query = split(url, REDIS_SCHEMES).map_or_else(|_| Vec::new(), |p| p.query);
    for (key, _) in &query {
        if SENTINEL_OPTIONS.contains(&key.as_str()) {
            return Err(Error::InvalidArgument(format!(
                "{key} in {} is read by mistri_locks::open and Locks::redis, not by Redis::open \
                 (one server's URL, no options of ours): open it with one of those",
                crate::backend::shown_url(url)
            )));
        }
    }
    Ok(())
}

/// Parses the host-list forms (`scheme://[userinfo@]h1:p1,h2:p2[/path][?q][#f]`).
pub(crate) fn parse_host_list(url: &str, base: &'static str) -> Result<UrlParts> {
    let bad = |why: &str| Error::Config(format!("cannot use Redis URL: {why}"));
    let parts = split(url, REDIS_SCHEMES).map_err(|what| bad(&what))?;
    let hosts: Vec<String> = parts
        .hosts
        .iter()
        .filter(|h| !h.name.is_empty() || h.port.is_some())
        .map(|h| h.with_port(6379))
        .collect();
    if hosts.is_empty() {
        return Err(bad("no host:port listed"));
    }
    Ok(UrlParts {
        base,
        userinfo: parts.userinfo,
        hosts,
        path: parts
            .path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        query: parts.raw_query,
        fragment: parts.fragment,
    })
}

/// The schemes of [`SCHEMES`], for [`split`].
const REDIS_SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "unix",
    "redis+unix",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
];

/// The schemes a Redis URL may have ([`crate::open`]).
pub(crate) const SCHEMES: &str = "redis://, rediss://, unix://, redis+unix://, \
redis+sentinel://, rediss+sentinel://, redis+cluster://, rediss+cluster://";

/// What is wrong with `url`, said for a person: the scheme, the host, the
/// port, the database; `why` (the client's own words) when none of those.
pub(crate) fn url_problem(url: &str, why: &str) -> String {
    let Some((scheme, _)) = url.split_once("://") else {
        return format!("{url:?} is not a URL: expected one of {SCHEMES}");
    };
    let shown = shown_url(url);
    if !REDIS_SCHEMES.contains(&scheme) {
        return format!("unknown scheme {scheme:?} in {shown:?}: expected one of {SCHEMES}");
    }
    if scheme.ends_with("unix") {
        return format!("{why} (in {shown:?}: expected {scheme}:///path/to/redis.sock)");
    }
    let parts = match split(url, REDIS_SCHEMES) {
        Ok(parts) => parts,
        Err(what) => return format!("{what} in {shown:?}"),
    };
    if parts.hosts.is_empty() || parts.hosts.iter().any(|h| h.name.is_empty()) {
        return format!("no host in {shown:?}");
    }
    let db = parts.path.trim_start_matches('/');
    if !scheme.contains('+') && !db.is_empty() && db.parse::<u32>().is_err() {
        return format!("the database {db:?} is not a number in {shown:?}");
    }
    format!("{why} (in {shown:?})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_parameters_are_taken_out_and_the_rest_kept() {
        let (rest, ack, _) =
            take_own_params("redis://h:1/0?min_replicas=1&replica_timeout=0.25#insecure").unwrap();
        assert_eq!(rest, "redis://h:1/0#insecure");
        let (rest, _, _) = take_own_params("unix:///s.sock?db=2&min_replicas=1").unwrap();
        assert_eq!(rest, "unix:///s.sock?db=2");
        let (rest, _, _) =
            take_own_params("rediss+sentinel://u:p%40w@[::1]:5,b/m/2?eviction=accept#insecure")
                .unwrap();
        assert_eq!(rest, "rediss+sentinel://u:p%40w@[::1]:5,b/m/2#insecure");
        assert!(take_own_params("redis://h:1/0?protocol=resp3").is_err());
        assert!(take_own_params("redis://h:1/0?db=2").is_err());
        assert_eq!(ack.min_replicas, 1);
        assert_eq!(ack.timeout, Duration::from_millis(250));
        assert!(take_own_params("redis://h/?min_replicas=x").is_err());
        assert!(take_own_params("redis://h/?min_replicas=1&replica_timeout=9").is_err());
        assert!(take_own_params("redis://h/?min_replicas=1&replica_timeout=-1").is_err());
    }

    #[test]
    fn host_lists_parse() {
        let p = parse_host_list(
            "rediss+sentinel://u:p%40w@a:1,b/mymaster/2#insecure",
            "rediss",
        )
        .unwrap();
        assert_eq!(p.hosts, ["a:1", "b:6379"]);
        assert_eq!(p.userinfo.as_deref(), Some("u:p%40w"));
        assert_eq!(p.path, ["mymaster", "2"]);
        assert_eq!(
            p.node_url("c:3", Some("2"), p.userinfo.as_deref()),
            "rediss://u:p%40w@c:3/2#insecure"
        );
        assert!(parse_host_list("redis+cluster:///", "redis").is_err());
        // An IPv6 seed gets the default port too; an empty entry is skipped.
        let v6 = parse_host_list("redis+cluster://[::1],,[::2]:7", "redis").unwrap();
        assert_eq!(v6.hosts, ["[::1]:6379", "[::2]:7"]);
        let e = parse_host_list("redis+cluster://:secret@a:x", "redis").unwrap_err();
        assert!(e.to_string().contains("the port \"x\""), "{e}");
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn a_bad_url_says_what_is_wrong() {
        let says = |u: &str| url_problem(u, "did not parse");
        assert!(says("http://x").contains("unknown scheme \"http\""));
        assert!(says("http://x").contains("redis+cluster://"));
        assert!(says("localhost:6379").contains("is not a URL"));
        assert!(says("redis://[::1").contains("no closing ']'"));
        assert!(says("redis://h:port").contains("the port \"port\""));
        assert!(says("redis://u:secret@h:0").contains("***@h:0"));
        assert!(!says("redis://u:secret@h:0").contains("secret"));
        assert!(says("redis://h/abc").contains("the database \"abc\""));
        assert!(says("redis://:pw@").contains("no host"));
        assert!(!says("redis://:pw@").contains("pw"));
        // A password in the query is not shown either.
        let q = says("redis+sentinel://h:x/m?sentinel_password=secret");
        assert!(q.contains("the port \"x\"") && !q.contains("secret"), "{q}");
    }
}
