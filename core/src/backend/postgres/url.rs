//! `postgres://` / `postgresql://` URLs, read as libpq reads them, plus
//! this backend's own parameters (`schema`, `listen`, `listen_host`,
//! `listen_port`). See `docs/PROTOCOL.md`, "Postgres".

use crate::backend::url::{decode, split};
use crate::error::{Error, Result};
use std::path::PathBuf;
use std::time::Duration;

/// Where a connection goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A TCP host and port.
    Tcp { host: String, port: u16 },
    /// A unix socket: `DIR/.s.PGSQL.PORT`.
    Unix { dir: PathBuf, port: u16 },
}

impl Target {
    /// `host:port` or the socket's path, for messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            Target::Tcp { host, port } if host.contains(':') => format!("[{host}]:{port}"),
            Target::Tcp { host, port } => format!("{host}:{port}"),
            Target::Unix { dir, port } => format!("{}/.s.PGSQL.{port}", dir.display()),
        }
    }
}

/// `sslmode`: the libpq modes this client implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Plain TCP.
    Disable,
    /// TLS if the server offers it, else plain (libpq's default).
    Prefer,
    /// TLS or nothing (the certificate is not verified, as libpq's
    /// `require` without a root certificate).
    Require,
}

/// Where the push listener's `LISTEN` connection goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Listen {
    /// Where the operations go (the URL's own host).
    Same,
    /// No listener: the heartbeat's tick is the floor (a transaction
    /// pooler, where `LISTEN` cannot work).
    Off,
    /// Another host/port with the same credentials (a direct connection
    /// beside a pooler).
    At(Target),
}

/// A parsed URL.
#[derive(Debug, Clone)]
pub(crate) struct PgConfig {
    pub(crate) user: String,
    pub(crate) password: Option<String>,
    pub(crate) dbname: String,
    pub(crate) target: Target,
    pub(crate) ssl: SslMode,
    pub(crate) application_name: Option<String>,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) schema: String,
    /// The URL named the schema (`schema=`), rather than leaving the default.
    pub(crate) schema_named: bool,
    pub(crate) listen: Listen,
}

/// The query options (and key/value DSN keywords) this backend knows:
/// libpq's that this client implements, and its own. Its row of the scheme
/// table in `backend/mod.rs`; any other is refused at open.
pub(crate) const OPTIONS: &[&str] = &[
    "host",
    "port",
    "user",
    "password",
    "dbname",
    "sslmode",
    "application_name",
    "connect_timeout",
    "schema",
    "listen",
    "listen_host",
    "listen_port",
];

/// The default schema of the tables.
pub const DEFAULT_SCHEMA: &str = "mistri_locks";

/// Checks that `name` is a plain lower-case SQL identifier (letters,
/// digits, `_`, starting with a letter or `_`, at most 63 bytes): it is
/// written into statements unquoted-safe (and quoted anyway).
pub(crate) fn check_schema(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit()
        && !name.starts_with("pg_");
    if ok {
        return Ok(());
    }
    Err(Error::Config(format!(
        "schema must be a lower-case SQL identifier (a-z, 0-9, _, not starting with a digit or pg_, at most 63 bytes): {name:?}"
    )))
}

fn bad(url: &str, what: &str) -> Error {
    crate::backend::url::refused("Postgres", url, what)
}

fn port_of(s: &str, url: &str, part: &str) -> Result<u16> {
    crate::backend::url::port(s, part).map_err(|what| bad(url, &what))
}

/// The directory libpq uses when no host is given: Debian's socket
/// directory if it exists, else `/tmp`.
fn default_socket_dir() -> PathBuf {
    let debian = PathBuf::from("/var/run/postgresql");
    if debian.is_dir() {
        debian
    } else {
        PathBuf::from("/tmp")
    }
}

fn target_of(host: &str, port: u16) -> Target {
    if host.is_empty() {
        Target::Unix {
            dir: default_socket_dir(),
            port,
        }
    } else if host.starts_with('/') {
        Target::Unix {
            dir: PathBuf::from(host),
            port,
        }
    } else {
        Target::Tcp {
            host: host.to_owned(),
            port,
        }
    }
}

/// A libpq key/value connection string (`host=h port=5432 dbname=app
/// password='a b'`: values plain or in single quotes, `\'` and `\\`
/// escaped) as the equivalent URL (every pair a query parameter).
pub(crate) fn dsn_to_url(dsn: &str) -> Result<String> {
    let bad = |what: &str| {
        let masked = match dsn.find("password") {
            Some(at) => format!("{}password=***", &dsn[..at]),
            None => dsn.to_owned(),
        };
        Error::Config(format!(
            "cannot use Postgres connection string {masked:?}: {what}"
        ))
    };
    let mut chars = dsn.chars().peekable();
    let mut pairs = Vec::new();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.peek().copied() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(bad(&format!("{key:?} has no value")));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => return Err(bad(&format!("the value of {key} has no closing quote"))),
                }
            }
        } else {
            while let Some(c) = chars.peek().copied() {
                if c.is_whitespace() {
                    break;
                }
                chars.next();
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
    let encode = |v: &str| {
        let mut out = String::new();
        for b in v.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    };
    let query: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect();
    Ok(format!("postgres://?{}", query.join("&")))
}

/// Parses `url` (or a libpq key/value connection string).
///
/// # Errors
/// [`Error::Config`] naming the part that is wrong (the password masked).
pub(crate) fn parse(url: &str) -> Result<PgConfig> {
    if !url.contains("://") && url.contains('=') {
        return parse(&dsn_to_url(url)?);
    }
    let parts = split(url, &["postgres", "postgresql"]).map_err(|what| bad(url, &what))?;
    let (mut user, mut password) = (parts.user, parts.password);
    if parts.hosts.len() > 1 {
        return Err(bad(
            url,
            "several hosts are not supported (name one host; put a failover address behind one name)",
        ));
    }
    let (mut host, mut port) = parts
        .hosts
        .into_iter()
        .next()
        .map_or((String::new(), None), |h| (h.name, h.port));
    let path = parts.path.as_str();
    let mut dbname = (!path.is_empty())
        .then(|| decode(path, "database name"))
        .transpose()
        .map_err(|what| bad(url, &what))?;
    let mut ssl = SslMode::Prefer;
    let mut application_name = None;
    let mut connect_timeout = None;
    let mut schema = DEFAULT_SCHEMA.to_owned();
    let mut schema_named = false;
    let mut listen_off = false;
    let (mut listen_host, mut listen_port) = (None, None);
    for (k, v) in parts.query {
        match k.as_str() {
            "host" => host = v,
            "port" => port = Some(port_of(&v, url, "port")?),
            "user" => user = Some(v),
            "password" => password = Some(v),
            "dbname" => dbname = Some(v),
            "sslmode" => {
                ssl = match v.as_str() {
                    "disable" => SslMode::Disable,
                    "allow" | "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" | "verify-full" => {
                        return Err(bad(
                            url,
                            &format!(
                                "sslmode={v} (certificate verification) is not built in this client; use sslmode=require (encrypted, certificate not verified) or a local TLS-verifying proxy"
                            ),
                        ))
                    }
                    other => {
                        return Err(bad(
                            url,
                            &format!("sslmode {other:?} is not one of disable, allow, prefer, require"),
                        ))
                    }
                }
            }
            "application_name" => application_name = Some(v),
            "connect_timeout" => {
                let secs: u64 = v.parse().map_err(|_| {
                    bad(url, &format!("connect_timeout {v:?} is not a whole number of seconds"))
                })?;
                // libpq: 0 means none; below 2 counts as 2.
                connect_timeout = (secs > 0).then(|| Duration::from_secs(secs.max(2)));
            }
            "schema" => {
                check_schema(&v)
                    .map_err(|e| bad(url, e.message()))?;
                schema = v;
                schema_named = true;
            }
            "listen" => match v.as_str() {
                "off" | "false" | "0" => listen_off = true,
                "on" | "true" | "1" => listen_off = false,
                other => {
                    return Err(bad(url, &format!("listen {other:?} is not on or off")));
                }
            },
            "listen_host" => listen_host = Some(v),
            "listen_port" => listen_port = Some(port_of(&v, url, "listen_port")?),
            other => {
                // `backend::check_query` refused it already (the same words).
                return Err(crate::backend::unknown_option(url, other, OPTIONS));
            }
        }
    }
    let port = port.unwrap_or(5432);
    let user = user
        .or_else(|| std::env::var("PGUSER").ok())
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "postgres".to_owned());
    if user.is_empty() {
        return Err(bad(url, "the user name is empty"));
    }
    let dbname = dbname.unwrap_or_else(|| user.clone());
    let target = target_of(&host, port);
    if matches!(target, Target::Unix { .. }) && ssl == SslMode::Require {
        return Err(bad(
            url,
            "sslmode=require over a unix socket (TLS is for TCP)",
        ));
    }
    let listen = if listen_off {
        Listen::Off
    } else if listen_host.is_some() || listen_port.is_some() {
        Listen::At(target_of(
            listen_host.as_deref().unwrap_or(&host),
            listen_port.unwrap_or(port),
        ))
    } else {
        Listen::Same
    };
    Ok(PgConfig {
        user,
        password,
        dbname,
        target,
        ssl,
        application_name,
        connect_timeout,
        schema,
        schema_named,
        listen,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_urls_parse() {
        let c = parse("postgres://al%40x:p%3Ass@db.example:6543/app?sslmode=require&application_name=w1&connect_timeout=1&schema=locks_2").unwrap();
        assert_eq!(c.user, "al@x");
        assert_eq!(c.password.as_deref(), Some("p:ss"));
        assert_eq!(
            c.target,
            Target::Tcp {
                host: "db.example".into(),
                port: 6543
            }
        );
        assert_eq!(c.dbname, "app");
        assert_eq!(c.ssl, SslMode::Require);
        assert_eq!(c.application_name.as_deref(), Some("w1"));
        assert_eq!(c.connect_timeout, Some(Duration::from_secs(2)));
        assert_eq!(c.schema, "locks_2");
        assert_eq!(c.listen, Listen::Same);
    }

    #[test]
    fn defaults_follow_libpq() {
        let c = parse("postgresql://bob@127.0.0.1").unwrap();
        assert_eq!(c.dbname, "bob");
        assert_eq!(c.ssl, SslMode::Prefer);
        assert_eq!(c.schema, DEFAULT_SCHEMA);
        assert_eq!(c.target.describe(), "127.0.0.1:5432");
        let v6 = parse("postgres://u@[::1]:7/d").unwrap();
        assert_eq!(v6.target.describe(), "[::1]:7");
    }

    #[test]
    fn unix_sockets() {
        let c = parse("postgres://u@%2Ftmp%2Fpg:5433/d").unwrap();
        assert_eq!(c.target.describe(), "/tmp/pg/.s.PGSQL.5433");
        let q = parse("postgres://u@/d?host=/run/pg&port=6000").unwrap();
        assert_eq!(q.target.describe(), "/run/pg/.s.PGSQL.6000");
    }

    #[test]
    fn listen_options() {
        assert_eq!(
            parse("postgres://u@h/d?listen=off").unwrap().listen,
            Listen::Off
        );
        assert_eq!(
            parse("postgres://u@h:6432/d?listen_port=5432")
                .unwrap()
                .listen,
            Listen::At(Target::Tcp {
                host: "h".into(),
                port: 5432
            })
        );
    }

    #[test]
    fn bad_urls_name_the_part_and_mask_the_password() {
        let cases = [
            ("postgres://u:secret@h:99999/d", "port"),
            ("postgres://u:secret@h/d?sslmode=verify-full", "verify-full"),
            ("postgres://u:secret@h/d?sslmode=maybe", "sslmode"),
            ("postgres://u:secret@h/d?schema=Bad-Name", "schema"),
            ("postgres://u:secret@h/d?listen=sometimes", "listen"),
            ("postgres://u:secret@h1,h2/d", "several hosts"),
            ("postgres://u:secret@h/d%zz", "percent"),
            (
                "postgres://u:secret@h/d?connect_timeout=soon",
                "connect_timeout",
            ),
            ("mysql://u:secret@h/d", "scheme"),
        ];
        for (url, part) in cases {
            let err = parse(url).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, Error::Config(_)), "{url}: {text}");
            assert!(text.contains(part), "{url}: {text}");
            assert!(!text.contains("secret"), "{url}: {text}");
        }
        let err = parse("postgres://u:secret@h/d?sslmod=require").unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert_eq!(
            err.message(),
            "unknown option \"sslmod\" in postgres://u:***@h/d; did you mean \"sslmode\"?"
        );
    }

    #[test]
    fn key_value_connection_strings() {
        let c = parse("host=db.example port=6543 dbname=app user=al password='a \\'b c' sslmode=disable schema=s1").unwrap();
        assert_eq!(c.target.describe(), "db.example:6543");
        assert_eq!((c.user.as_str(), c.dbname.as_str()), ("al", "app"));
        assert_eq!(c.password.as_deref(), Some("a 'b c"));
        assert_eq!(c.ssl, SslMode::Disable);
        assert_eq!(c.schema, "s1");
        let unix = parse("host=/run/pg dbname=d user=u").unwrap();
        assert_eq!(unix.target.describe(), "/run/pg/.s.PGSQL.5432");
        for bad in ["host=h password='secret", "host"] {
            let err = parse(bad).unwrap_err();
            assert!(matches!(err, Error::Config(_)), "{bad}: {err}");
            assert!(!err.to_string().contains("secret"), "{bad}: {err}");
        }
        let err = parse("host=h bogus=1 password=secret").unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert!(err.message().contains("\"bogus\""), "{err}");
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn schema_names_are_checked() {
        assert!(check_schema("mistri_locks").is_ok());
        for bad in ["", "A", "1x", "a-b", "pg_x", "a b", &"x".repeat(64)] {
            assert!(check_schema(bad).is_err(), "{bad}");
        }
    }
}
