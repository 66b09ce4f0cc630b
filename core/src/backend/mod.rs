//! The backends: [`memory::Memory`] (one process), [`local::Local`] (the
//! processes of one host, an SQLite file), [`redis`] (one server, the
//! master Sentinel names, or a Cluster), [`postgres`] (tables in a
//! PostgreSQL database), [`mysql`] (tables in a MySQL or MariaDB
//! database), and [`open_with`], the one dispatcher
//! from a URL every face goes through, over the one scheme table
//! (`SCHEMES`): a new backend adds its rows there. Each implements
//! [`crate::Adapter`] and nothing above it.

pub(crate) mod local;
pub(crate) mod memory;
pub(crate) mod mysql;
pub(crate) mod postgres;
pub(crate) mod redis;
pub(crate) mod url;

use crate::contract::adapter::Adapter;
use crate::error::{Error, Result};
use crate::options::OptionValue;
use redis::cluster::RedisCluster;
use redis::sentinel::Sentinel;
use redis::url::{parse_host_list, take_own_params};
use redis::{Redis, DEFAULT_NAMESPACE, DEFAULT_TIMEOUT};
use std::sync::Arc;
use std::time::Duration;
use url::password_unencoded;
pub(crate) use url::shown_url;

/// Which backend a URL names: one row of [`SCHEMES`] each.
///
/// Non-exhaustive: a new backend adds a variant, and a face maps a family
/// to its class by [`Family::name`] through a table with a fallback, never
/// by an exhaustive match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Family {
    /// `memory://`: one process.
    Memory,
    /// A path or `file://PATH`: an SQLite file shared by a host's processes.
    Local,
    /// One Redis server, a Cluster or the master Sentinel names.
    Redis,
    /// A PostgreSQL database.
    Postgres,
    /// A MySQL or MariaDB database.
    MySql,
    /// A throwaway family for the core's own tests (`probe://`, opened as a
    /// Memory): it proves a new family needs no change in any face.
    #[cfg(test)]
    Probe,
}

impl Family {
    /// The stable lowercase name of this family (`"memory"`, `"local"`,
    /// `"redis"`, `"postgres"`): what a face looks its class up by.
    pub fn name(self) -> &'static str {
        match self {
            Family::Memory => "memory",
            Family::Local => "local",
            Family::Redis => "redis",
            Family::Postgres => "postgres",
            Family::MySql => "mysql",
            #[cfg(test)]
            Family::Probe => "probe",
        }
    }

    /// The name a face's constructor for this family goes by, for messages.
    fn title(self) -> &'static str {
        match self {
            Family::Memory => "Memory",
            Family::Local => "Local",
            Family::Redis => "Redis",
            Family::Postgres => "Postgres",
            Family::MySql => "MySql",
            #[cfg(test)]
            Family::Probe => "Probe",
        }
    }
}

/// How one scheme is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    Memory,
    Local,
    Server,
    Cluster,
    Sentinel,
    Postgres,
    MySql,
}

/// The one scheme table: every URL any face opens is looked up here, with
/// the query options its backend knows (the allowlist [`check_query`]
/// holds every URL to, before anything connects).
/// Two forms have no scheme: a libpq key/value DSN (`host=h dbname=d`,
/// Postgres) and a bare path (Local); [`classify`] tells them apart.
const SCHEMES: &[(&str, Family, Via, &[&str])] = &[
    ("memory", Family::Memory, Via::Memory, NO_OPTIONS),
    ("file", Family::Local, Via::Local, NO_OPTIONS),
    ("redis", Family::Redis, Via::Server, redis::url::OPTIONS),
    ("rediss", Family::Redis, Via::Server, redis::url::OPTIONS),
    ("unix", Family::Redis, Via::Server, redis::url::UNIX_OPTIONS),
    (
        "redis+unix",
        Family::Redis,
        Via::Server,
        redis::url::UNIX_OPTIONS,
    ),
    (
        "redis+cluster",
        Family::Redis,
        Via::Cluster,
        redis::url::OPTIONS,
    ),
    (
        "rediss+cluster",
        Family::Redis,
        Via::Cluster,
        redis::url::OPTIONS,
    ),
    (
        "redis+sentinel",
        Family::Redis,
        Via::Sentinel,
        redis::url::SENTINEL_OPTIONS,
    ),
    (
        "rediss+sentinel",
        Family::Redis,
        Via::Sentinel,
        redis::url::SENTINEL_OPTIONS,
    ),
    (
        "postgres",
        Family::Postgres,
        Via::Postgres,
        postgres::url::OPTIONS,
    ),
    (
        "postgresql",
        Family::Postgres,
        Via::Postgres,
        postgres::url::OPTIONS,
    ),
    ("mysql", Family::MySql, Via::MySql, mysql::url::OPTIONS),
    ("mariadb", Family::MySql, Via::MySql, mysql::url::OPTIONS),
    #[cfg(test)]
    ("probe", Family::Probe, Via::Memory, NO_OPTIONS),
];

/// The options of a scheme that takes none (`memory://`, `file://`).
const NO_OPTIONS: &[&str] = &[];

/// What a family's constructor takes, for its error messages: the
/// schemes of its rows, plus the scheme-less forms.
pub fn schemes_of(family: Family) -> String {
    let mut out: Vec<String> = SCHEMES
        .iter()
        .filter(|(_, f, _, _)| *f == family)
        .map(|(s, _, _, _)| format!("{s}://"))
        .collect();
    match family {
        Family::Local => out.push("a path".to_owned()),
        Family::Postgres => out.push("a libpq key/value DSN (host=… dbname=…)".to_owned()),
        _ => {}
    }
    out.join(", ")
}

/// Every form [`open_with`] takes, for the unknown-scheme error.
fn all_schemes() -> String {
    [
        Family::Memory,
        Family::Local,
        Family::Redis,
        Family::Postgres,
        Family::MySql,
    ]
    .into_iter()
    .map(schemes_of)
    .collect::<Vec<_>>()
    .join(", ")
}

/// The family and row for `url`.
fn classify(url: &str) -> Result<(Family, Via)> {
    if url.is_empty() {
        return Err(Error::InvalidArgument("the URL must not be empty".into()));
    }
    if let Some((scheme, _)) = url.split_once("://") {
        return SCHEMES
            .iter()
            .find(|(s, _, _, _)| s.eq_ignore_ascii_case(scheme))
            .map(|(_, f, v, _)| (*f, *v))
            .ok_or_else(|| {
                Error::Config(format!(
                    "unknown URL scheme {scheme:?}; the schemes are: {}",
                    all_schemes()
                ))
            });
    }
    if is_dsn(url) {
        Ok((Family::Postgres, Via::Postgres))
    } else {
        Ok((Family::Local, Via::Local))
    }
}

/// A libpq key/value DSN starts with `keyword=`; a path starts with `/`,
/// `.` or `~`, or has no `=` before its first `/` or space.
pub(crate) fn is_dsn(url: &str) -> bool {
    let url = url.trim_start();
    if url.starts_with(['/', '.', '~']) {
        return false;
    }
    let word: &str = url.split(['=', ' ', '/']).next().unwrap_or("");
    !word.is_empty()
        && url[word.len()..].trim_start().starts_with('=')
        && word.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The family `url` belongs to (which backend it opens).
///
/// # Errors
/// [`Error::Config`] for an unknown scheme (the message lists them all);
/// [`Error::InvalidArgument`] for an empty URL.
pub fn family_of(url: &str) -> Result<Family> {
    classify(url).map(|(f, _)| f)
}

/// Checks that `url` belongs to `family`, for a backend's own
/// constructor: another backend's URL gets an error naming the schemes
/// the constructor takes and pointing to `open`, which takes them all.
/// Then its query options, as [`check_query`].
///
/// # Errors
/// [`Error::Config`] for another family's URL or an unknown scheme;
/// [`Error::InvalidArgument`] for an option the backend does not know.
pub fn check_family(url: &str, family: Family) -> Result<()> {
    let found = family_of(url)?;
    if found == family {
        return check_query(url);
    }
    let shown = match url.split_once("://") {
        Some((scheme, _)) => format!("a {scheme}:// URL"),
        None => describe_plain(found).to_owned(),
    };
    Err(Error::Config(format!(
        "the {} constructor takes {}; this is {shown}, a {} URL: use open(url), which opens every backend",
        family.title(),
        schemes_of(family),
        found.title()
    )))
}

fn describe_plain(found: Family) -> &'static str {
    match found {
        Family::Postgres => "a key/value DSN",
        _ => "a path",
    }
}

/// Typed options for [`open_with`]: no face writes them into the URL.
/// Non-exhaustive: build it with [`OpenOptions::new`] and the setters, or
/// by name with [`OpenOptions::set`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenOptions {
    /// Every key under this namespace (None: [`DEFAULT_NAMESPACE`]).
    /// Memory and Local have none: their file or process is the scope.
    pub namespace: Option<String>,
    /// The label leases and holds describe their holder with (None: `host:pid language`).
    pub label: Option<String>,
    /// Postgres: the schema the tables live in (None: the URL's
    /// `schema=`, else `mistri_locks`). Another backend refuses it.
    pub schema: Option<String>,
    /// One-server Redis and Postgres: the per-operation I/O timeout
    /// (None: the backend's default). Cluster and Sentinel keep their own.
    pub io_timeout: Option<Duration>,
}

impl OpenOptions {
    /// No options: every default.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the namespace.
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Sets the label.
    #[must_use]
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Sets the Postgres schema.
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// Sets the I/O timeout.
    #[must_use]
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.io_timeout = Some(timeout);
        self
    }

    /// The names [`OpenOptions::set`] takes.
    pub const NAMES: [&'static str; 4] = ["namespace", "label", "schema", "io_timeout"];

    /// Sets the option `name` (one of [`OpenOptions::NAMES`]) from a face's
    /// value: text for `namespace`, `label` and `schema`, seconds for
    /// `io_timeout`; [`OptionValue::None`] leaves the default.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown name (with the nearest
    /// known one) or an io_timeout out of range; [`Error::WrongType`] for a
    /// value of the wrong type.
    pub fn set(&mut self, name: &str, value: OptionValue) -> Result<&mut Self> {
        if !Self::NAMES.contains(&name) {
            let hint = crate::options::nearest(name, &Self::NAMES)
                .map(|n| format!("; did you mean {n:?}?"))
                .unwrap_or_default();
            return Err(Error::InvalidArgument(format!(
                "unknown open option {name:?}{hint} (known: {})",
                Self::NAMES.join(", ")
            )));
        }
        if value == OptionValue::None {
            return Ok(self);
        }
        if name == "io_timeout" {
            self.io_timeout = Some(crate::args::duration_from_secs(name, value.seconds(name)?)?);
            return Ok(self);
        }
        let OptionValue::Text(text) = value else {
            return Err(Error::WrongType(format!(
                "{name} must be text, got {value}"
            )));
        };
        match name {
            "namespace" => self.namespace = Some(text),
            "label" => self.label = Some(text),
            _ => self.schema = Some(text),
        }
        Ok(self)
    }

    fn namespace_or_default(&self) -> &str {
        self.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE)
    }
}

/// A database's typed connection parts (an ActiveRecord or Django config),
/// made into the one URL the core opens by [`ConnectionParts::postgres_url`]:
/// every part percent-encoded, an IPv6 host bracketed, a host starting with
/// `/` a unix socket folder. The faces' config readers call it, so no face
/// builds a URL by hand.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionParts {
    /// A host name, an IPv4 or IPv6 address (bare or `[bracketed]`), or a
    /// unix socket folder (starts with `/`); None: libpq's default socket.
    pub host: Option<String>,
    /// The port (None: 5432).
    pub port: Option<u16>,
    /// The database name.
    pub database: Option<String>,
    /// The user name.
    pub user: Option<String>,
    /// The password.
    pub password: Option<String>,
    /// libpq's `sslmode` (`disable`, `allow`, `prefer`, `require`).
    pub tls_mode: Option<String>,
    /// libpq's `application_name`.
    pub application_name: Option<String>,
}

impl ConnectionParts {
    /// The names [`ConnectionParts::set`] takes (`sslmode` is `tls_mode`'s
    /// libpq spelling, `username` ActiveRecord's of `user`, `name`
    /// Django's of `database`).
    pub const NAMES: [&'static str; 10] = [
        "host",
        "port",
        "database",
        "name",
        "user",
        "username",
        "password",
        "tls_mode",
        "sslmode",
        "application_name",
    ];

    /// No parts: libpq's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the part `name` (one of [`ConnectionParts::NAMES`]) from a
    /// face's value: text, or for `port` an integer or digits. Empty text
    /// and [`OptionValue::None`] leave the part unset (Django writes `""`
    /// for a part not given).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown name (with the nearest
    /// known one) or a port outside 1..=65535 (or text that is not one);
    /// [`Error::WrongType`] for a value of the wrong type (a bool, a float).
    pub fn set(&mut self, name: &str, value: OptionValue) -> Result<&mut Self> {
        if !Self::NAMES.contains(&name) {
            let hint = crate::options::nearest(name, &Self::NAMES)
                .map(|n| format!("; did you mean {n:?}?"))
                .unwrap_or_default();
            return Err(Error::InvalidArgument(format!(
                "unknown connection part {name:?}{hint} (known: {})",
                Self::NAMES.join(", ")
            )));
        }
        let value = match value {
            OptionValue::None => return Ok(self),
            OptionValue::Text(t) if t.is_empty() => return Ok(self),
            other => other,
        };
        if name == "port" {
            let port = match &value {
                OptionValue::Int(n) => u16::try_from(*n).ok(),
                OptionValue::Text(t) => t.trim().parse::<u16>().ok(),
                other => {
                    return Err(Error::WrongType(format!(
                        "port must be a number in 1..=65535, got {other}"
                    )))
                }
            }
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("port must be a number in 1..=65535, got {value}"))
            })?;
            self.port = Some(port);
            return Ok(self);
        }
        let text = match value {
            OptionValue::Text(t) => t,
            OptionValue::Int(n) => n.to_string(),
            other => {
                return Err(Error::WrongType(format!(
                    "{name} must be text, got {other}"
                )))
            }
        };
        let slot = match name {
            "host" => &mut self.host,
            "database" | "name" => &mut self.database,
            "user" | "username" => &mut self.user,
            "password" => &mut self.password,
            "tls_mode" | "sslmode" => &mut self.tls_mode,
            _ => &mut self.application_name,
        };
        *slot = Some(text);
        Ok(self)
    }

    /// The `postgres://` URL of these parts.
    pub fn postgres_url(&self) -> String {
        let part = |p: &Option<String>| p.as_deref().map(percent_encode).unwrap_or_default();
        let mut out = String::from("postgres://");
        let (user, password) = (part(&self.user), part(&self.password));
        if !password.is_empty() {
            out.push_str(&format!("{user}:{password}@"));
        } else if !user.is_empty() {
            out.push_str(&format!("{user}@"));
        }
        let mut query: Vec<(&str, String)> = Vec::new();
        match self.host.as_deref().unwrap_or("") {
            "" => {}
            dir if dir.starts_with('/') => query.push(("host", percent_encode(dir))),
            bracketed if bracketed.starts_with('[') => out.push_str(bracketed),
            // IPv6: the brackets keep its colons apart from the port's.
            v6 if v6.contains(':') => out.push_str(&format!("[{v6}]")),
            name => out.push_str(&percent_encode(name)),
        }
        if let Some(port) = self.port {
            out.push_str(&format!(":{port}"));
        }
        out.push('/');
        out.push_str(&part(&self.database));
        for (key, value) in [
            ("sslmode", &self.tls_mode),
            ("application_name", &self.application_name),
        ] {
            if let Some(value) = value {
                query.push((key, percent_encode(value)));
            }
        }
        for (i, (key, value)) in query.iter().enumerate() {
            out.push(if i == 0 { '?' } else { '&' });
            out.push_str(&format!("{key}={value}"));
        }
        out
    }
}

impl ConnectionParts {
    /// The `mysql://` URL of these parts (an ActiveRecord `mysql2` /
    /// `trilogy` or a Django MySQL config): host (default 127.0.0.1), port
    /// (default 3306), database, user, password, and `tls_mode` as
    /// `ssl-mode`, in MySQL's spelling (`disabled`, `preferred`,
    /// `required`, `verify_ca`, `verify_identity`, any case) or libpq's
    /// (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a unix socket folder as the host, an
    /// `application_name` (Postgres parts this URL cannot carry) or a
    /// `tls_mode` of neither spelling.
    pub fn mysql_url(&self) -> Result<String> {
        let part = |p: &Option<String>| p.as_deref().map(percent_encode).unwrap_or_default();
        if self.application_name.is_some() {
            return Err(Error::InvalidArgument(
                "application_name is a Postgres part; mysql:// has none".into(),
            ));
        }
        let mut out = String::from("mysql://");
        let (user, password) = (part(&self.user), part(&self.password));
        if !password.is_empty() {
            out.push_str(&format!("{user}:{password}@"));
        } else if !user.is_empty() {
            out.push_str(&format!("{user}@"));
        }
        match self.host.as_deref().unwrap_or("") {
            "" => out.push_str("127.0.0.1"),
            dir if dir.starts_with('/') => {
                return Err(Error::InvalidArgument(format!(
                    "host {dir:?} is a unix socket, which mysql:// does not reach; give a host and port"
                )))
            }
            bracketed if bracketed.starts_with('[') => out.push_str(bracketed),
            v6 if v6.contains(':') => out.push_str(&format!("[{v6}]")),
            name => out.push_str(&percent_encode(name)),
        }
        if let Some(port) = self.port {
            out.push_str(&format!(":{port}"));
        }
        out.push('/');
        out.push_str(&part(&self.database));
        if let Some(mode) = &self.tls_mode {
            let mysql = match mode.to_ascii_lowercase().replace('-', "_").as_str() {
                "disabled" | "disable" => "DISABLED",
                "preferred" | "prefer" | "allow" => "PREFERRED",
                "required" | "require" => "REQUIRED",
                "verify_ca" => "VERIFY_CA",
                "verify_identity" | "verify_full" => "VERIFY_IDENTITY",
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "tls_mode {mode:?} is not one of disabled, preferred, required, verify_ca, verify_identity"
                    )))
                }
            };
            out.push_str(&format!("?ssl-mode={mysql}"));
        }
        Ok(out)
    }
}

/// `s` with every byte outside RFC 3986's unreserved set percent-encoded.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The adapter for `url` with keys under `namespace`: [`open_with`] with
/// only a namespace.
///
/// # Errors
/// As [`open_with`].
pub fn open(url: &str, namespace: &str) -> Result<Arc<dyn Adapter>> {
    open_with(url, &OpenOptions::new().namespace(namespace))
}

/// The adapter for `url`, any scheme of the one table: the dispatcher
/// every face goes through (`open` and each backend's constructor).
/// `options.label` is for [`crate::Locks::open_with`]; an adapter has none.
///
/// # Errors
/// [`Error::Config`] for an unparsable URL or an unknown scheme (the
/// message lists them all), or a `schema` for a backend other than
/// Postgres; [`Error::InvalidArgument`] for a bad namespace, timeout or
/// `min_replicas` / `replica_timeout`.
pub fn open_with(url: &str, options: &OpenOptions) -> Result<Arc<dyn Adapter>> {
    Ok(match dispatch(url, options)?.1 {
        Adapted::Memory(memory) => Arc::new(memory),
        Adapted::Shared(adapter) => adapter,
    })
}

/// What [`dispatch`] opened: a Memory stays typed (a [`crate::Locks`]
/// keeps its owner ids beside it), every other backend is shared.
pub(crate) enum Adapted {
    Memory(memory::Memory),
    Shared(Arc<dyn Adapter>),
}

/// The one dispatcher: classifies `url` once (the scheme table), checks
/// `options` once, and opens its backend, whichever family it is.
pub(crate) fn dispatch(url: &str, options: &OpenOptions) -> Result<(Family, Adapted)> {
    let (family, via) = classify(url)?;
    check_options(url, family, options)?;
    Ok((family, open_via(url, via, options)?))
}

fn open_via(url: &str, via: Via, options: &OpenOptions) -> Result<Adapted> {
    let namespace = options.namespace_or_default();
    let timeout = options.io_timeout.unwrap_or(DEFAULT_TIMEOUT);
    let shared = |adapter: Arc<dyn Adapter>| Ok(Adapted::Shared(adapter));
    match via {
        Via::Memory => Ok(Adapted::Memory(memory::Memory::new())),
        Via::Local => shared(Arc::new(local::Local::open(local_path(url).as_deref())?)),
        Via::Postgres => shared(Arc::new(postgres::Postgres::with_schema(
            url,
            namespace,
            options.io_timeout.unwrap_or(postgres::DEFAULT_TIMEOUT),
            options.schema.as_deref(),
        )?)),
        Via::MySql => shared(Arc::new(mysql::MySql::with_timeout(
            url,
            namespace,
            options.io_timeout.unwrap_or(mysql::DEFAULT_TIMEOUT),
        )?)),
        Via::Server | Via::Cluster | Via::Sentinel => {
            let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or("");
            let (rest, ack, sentinel_params) = take_own_params(url)?;
            let base = if scheme.starts_with("rediss") {
                "rediss"
            } else {
                "redis"
            };
            match via {
                Via::Cluster => {
                    let parts = parse_host_list(&rest, base)?;
                    shared(Arc::new(RedisCluster::open(parts, namespace, ack)?))
                }
                Via::Sentinel => {
                    let parts = parse_host_list(&rest, base)?;
                    let sentinel = Sentinel::new(parts, &sentinel_params)?;
                    shared(Arc::new(Redis::open_sentinel(sentinel, namespace, ack)?))
                }
                _ => shared(Arc::new(
                    Redis::with_timeout(&rest, namespace, timeout)?
                        .replicated(ack)
                        .accepting_eviction(ack.accept_eviction),
                )),
            }
        }
    }
}

/// Refuses an option `url`'s backend has no use for: a typed one
/// (`schema` off Postgres) or one in the URL ([`check_query`]).
pub(crate) fn check_options(url: &str, family: Family, options: &OpenOptions) -> Result<()> {
    check_query(url)?;
    if options.schema.is_some() && family != Family::Postgres {
        let shown = match url.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://"),
            None => "a path".to_owned(),
        };
        return Err(Error::Config(format!(
            "schema is a Postgres option; {shown} opens {}",
            family.title()
        )));
    }
    Ok(())
}

/// Holds the query options of `url` to its scheme's allowlist in
/// [`SCHEMES`] (a key/value DSN's keys to Postgres's), before anything
/// connects: an option the backend does not know, a mistyped one above all
/// (`min_replica=all`), would otherwise be dropped and with it the safety
/// it asked for. The values are each backend's to check.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the unknown (or repeated) option and
/// the nearest known one, the URL shown without its password or query.
pub(crate) fn check_query(url: &str) -> Result<()> {
    let (scheme, query) = match url.split_once("://") {
        Some((scheme, rest)) => {
            let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
            (scheme, rest.split_once('?').map(|(_, q)| q.to_owned()))
        }
        None if is_dsn(url) => match postgres::url::dsn_to_url(url) {
            Ok(as_url) => ("", as_url.split_once('?').map(|(_, q)| q.to_owned())),
            // A DSN that does not parse is the parser's to report.
            Err(_) => return Ok(()),
        },
        // A bare path is a file name, `?` and all.
        None => return Ok(()),
    };
    let Some(query) = query else {
        return Ok(());
    };
    let known = if scheme.is_empty() {
        postgres::url::OPTIONS
    } else {
        match SCHEMES
            .iter()
            .find(|(s, ..)| s.eq_ignore_ascii_case(scheme))
        {
            Some((_, _, _, known)) => known,
            // An unknown scheme is classify's to report.
            None => return Ok(()),
        }
    };
    let mut seen: Vec<&str> = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let key = pair.split_once('=').map_or(pair, |(k, _)| k);
        if !known.contains(&key) {
            return Err(unknown_option(url, key, known));
        }
        if seen.contains(&key) {
            return Err(Error::InvalidArgument(format!(
                "option {key:?} given twice in {}; give it once",
                shown_url(url)
            )));
        }
        seen.push(key);
    }
    Ok(())
}

/// The error for `key`, not among `known` (the options of `url`'s scheme):
/// names the nearest known option, or lists them. The value is not shown:
/// a mistyped `sentinel_password=` would show a password.
pub(crate) fn unknown_option(url: &str, key: &str, known: &[&str]) -> Error {
    if password_unencoded(url) {
        // The "option" may be a piece of the password: name neither.
        return Error::InvalidArgument(format!(
            "an unknown option in {}: is there a '/', '?' or '#' in the password? \
             Percent-encode it (%2F, %3F, %23)",
            shown_url(url)
        ));
    }
    let shown = shown_url(url);
    let scheme = url
        .split_once("://")
        .map_or_else(|| "a key/value DSN".to_owned(), |(s, _)| format!("{s}://"));
    let hint = match crate::options::nearest(key, known) {
        Some(near) => format!("did you mean {near:?}?"),
        None if known.is_empty() && scheme == "file://" => {
            "file:// takes no options (a path with '?' in its name is given without file://)"
                .to_owned()
        }
        None if known.is_empty() => format!("{scheme} takes no options"),
        None => format!("{scheme} takes: {}", known.join(", ")),
    };
    Error::InvalidArgument(format!("unknown option {key:?} in {shown}; {hint}"))
}

/// The Local file a Local URL names: `file://PATH` or a bare path;
/// `file://` alone is the per-user default.
pub(crate) fn local_path(url: &str) -> Option<std::path::PathBuf> {
    let path = match url.split_once("://") {
        Some((_, rest)) => rest,
        None => url,
    };
    (!path.is_empty()).then(|| std::path::PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// Parts → URL → the Postgres parser gives the parts back: an IPv6
    /// host bracketed, a password with `@`, `:`, `/` and more intact.
    #[test]
    fn connection_parts_round_trip() {
        use postgres::url::{parse, Target};
        let mut parts = ConnectionParts::new();
        for (name, value) in [
            ("host", OptionValue::Text("::1".into())),
            ("port", OptionValue::Text("6543".into())),
            ("name", OptionValue::Text("app db/1".into())),
            ("username", OptionValue::Text("me@corp".into())),
            ("password", OptionValue::Text("p@ss:w/rd?#%&= +".into())),
            ("sslmode", OptionValue::Text("require".into())),
            ("application_name", OptionValue::Text("web & worker".into())),
        ] {
            parts.set(name, value).unwrap();
        }
        let url = parts.postgres_url();
        assert!(url.contains("@[::1]:6543/"), "{url}");
        let config = parse(&url).unwrap();
        assert_eq!(
            config.target,
            Target::Tcp {
                host: "::1".into(),
                port: 6543
            }
        );
        assert_eq!(config.user, "me@corp");
        assert_eq!(config.password.as_deref(), Some("p@ss:w/rd?#%&= +"));
        assert_eq!(config.dbname, "app db/1");
        assert_eq!(config.ssl, postgres::url::SslMode::Require);
        assert_eq!(config.application_name.as_deref(), Some("web & worker"));
        // The URL opens as Postgres, its options allowed by the table.
        assert_eq!(family_of(&url).unwrap(), Family::Postgres);
        check_query(&url).unwrap();

        let socket = ConnectionParts {
            host: Some("/var/run/postgresql".into()),
            database: Some("d".into()),
            ..ConnectionParts::new()
        };
        let config = parse(&socket.postgres_url()).unwrap();
        assert!(
            matches!(config.target, Target::Unix { ref dir, port: 5432 } if dir.as_os_str() == "/var/run/postgresql")
        );
        assert_eq!(
            ConnectionParts::new()
                .set("host", OptionValue::Text("[::1]".into()))
                .unwrap()
                .set("port", OptionValue::Text(String::new()))
                .unwrap()
                .postgres_url(),
            "postgres://[::1]/"
        );
        let mut bad = ConnectionParts::new();
        assert!(bad.set("port", OptionValue::Int(70000)).is_err());
        assert!(bad.set("port", OptionValue::Text("x".into())).is_err());
        let err = bad
            .set("pasword", OptionValue::Text("h".into()))
            .unwrap_err();
        assert!(
            err.to_string().contains("did you mean \"password\""),
            "{err}"
        );
    }

    /// Parts → `mysql://` URL → the MySQL parser gives the parts back.
    #[test]
    fn connection_parts_make_mysql_urls() {
        let mut parts = ConnectionParts::new();
        for (name, value) in [
            ("host", OptionValue::Text("::1".into())),
            ("port", OptionValue::Int(3307)),
            ("name", OptionValue::Text("app db".into())),
            ("username", OptionValue::Text("me@corp".into())),
            ("password", OptionValue::Text("p@ss:w/rd?#%&= +".into())),
            ("sslmode", OptionValue::Text("verify-full".into())),
        ] {
            parts.set(name, value).unwrap();
        }
        let url = parts.mysql_url().unwrap();
        let config = mysql::url::parse(&url).unwrap();
        assert_eq!((config.host.as_str(), config.port), ("::1", 3307));
        assert_eq!(config.user, "me@corp");
        assert_eq!(config.password.as_deref(), Some("p@ss:w/rd?#%&= +"));
        assert_eq!(config.database, "app db");
        assert_eq!(config.ssl, mysql::url::SslMode::VerifyIdentity);
        assert_eq!(family_of(&url).unwrap(), Family::MySql);
        check_query(&url).unwrap();
        let bare = ConnectionParts {
            database: Some("d".into()),
            user: Some("u".into()),
            ..ConnectionParts::new()
        };
        assert_eq!(bare.mysql_url().unwrap(), "mysql://u@127.0.0.1/d");
        for bad in [
            ConnectionParts {
                host: Some("/run/mysqld".into()),
                ..bare.clone()
            },
            ConnectionParts {
                tls_mode: Some("sometimes".into()),
                ..bare.clone()
            },
            ConnectionParts {
                application_name: Some("web".into()),
                ..bare.clone()
            },
        ] {
            assert!(bad.mysql_url().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn families_have_stable_lowercase_names() {
        let names: Vec<_> = [
            "memory://",
            "/tmp/x",
            "redis://h",
            "postgres://h/d",
            "host=h",
            "mysql://u@h/d",
            "MariaDB://u@h/d",
        ]
        .iter()
        .map(|u| family_of(u).unwrap().name())
        .collect();
        assert_eq!(
            names,
            ["memory", "local", "redis", "postgres", "postgres", "mysql", "mysql"]
        );
    }

    #[test]
    fn open_options_are_set_by_name() {
        let mut options = OpenOptions::new();
        options
            .set("namespace", OptionValue::Text("ns".into()))
            .unwrap()
            .set("label", OptionValue::Text("me".into()))
            .unwrap()
            .set("io_timeout", OptionValue::Float(1.5))
            .unwrap()
            .set("schema", OptionValue::None)
            .unwrap();
        assert_eq!(
            options,
            OpenOptions::new()
                .namespace("ns")
                .label("me")
                .io_timeout(Duration::from_millis(1500))
        );
        let err = options
            .set("namespce", OptionValue::Text("x".into()))
            .unwrap_err();
        assert!(
            err.to_string().contains("did you mean \"namespace\""),
            "{err}"
        );
        let err = options.set("label", OptionValue::Int(3)).unwrap_err();
        assert!(err.to_string().contains("label must be text"), "{err}");
        assert!(options.set("io_timeout", OptionValue::Float(-1.0)).is_err());
    }

    #[test]
    fn near_options_are_named() {
        let known = redis::url::OPTIONS;
        let nearest = crate::options::nearest;
        assert_eq!(nearest("min_replica", known), Some("min_replicas"));
        assert_eq!(nearest("minreplicas", known), Some("min_replicas"));
        assert_eq!(nearest("MIN_REPLICAS", known), Some("min_replicas"));
        assert_eq!(nearest("replica_timout", known), Some("replica_timeout"));
        assert_eq!(nearest("bogus", known), None);
        assert_eq!(nearest("timeout", known), None);
        assert_eq!(
            shown_url("redis://u:secret@h:1/0?sentinel_password=s#insecure"),
            "redis://u:***@h:1/0"
        );
        // A password with an unencoded '?', '/' or '#': nothing of it shown.
        for url in [
            "redis://:se?cret=1@h:1/0",
            "redis://u:se/cret@h:1/0?x=1",
            "postgres://u:se?cret@h/db",
        ] {
            let e = check_query(url).unwrap_err().to_string();
            assert!(!e.contains("cret") && !e.contains("se"), "{url}: {e}");
            assert!(e.contains("Percent-encode"), "{url}: {e}");
        }
    }

    #[test]
    fn unknown_schemes_are_config_errors() {
        assert!(matches!(open("http://x", "ns"), Err(Error::Config(_))));
        assert!(matches!(
            open("redis+sentinel://127.0.0.1:1", "ns"),
            Err(Error::Config(_))
        ));
    }
}
