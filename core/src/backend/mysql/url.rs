//! `mysql://` / `mariadb://` URLs: user, password, host, port, database,
//! and this backend's options (`ssl-mode` as the MySQL clients spell it,
//! `prefix` for the table names). See `docs/MYSQL.md`.

use crate::error::{Error, Result};
use std::time::Duration;

/// `ssl-mode`, spelled as `mysql --ssl-mode` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Plain TCP.
    Disabled,
    /// TLS if the server offers it, else plain (the MySQL clients' default).
    Preferred,
    /// TLS or nothing; the certificate is not verified.
    Required,
    /// TLS, the certificate chain verified against the system CA store;
    /// the host name is not checked.
    VerifyCa,
    /// TLS, the chain and the host name verified.
    VerifyIdentity,
}

/// A parsed URL.
#[derive(Debug, Clone)]
pub(crate) struct MyConfig {
    pub(crate) user: String,
    pub(crate) password: Option<String>,
    pub(crate) database: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) ssl: SslMode,
    /// The table (and procedure) name prefix, default `mistri_`.
    pub(crate) prefix: String,
    pub(crate) connect_timeout: Option<Duration>,
}

impl MyConfig {
    /// `host:port`, for messages.
    pub(crate) fn describe(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The query options this backend knows: its row of the scheme table in
/// `backend/mod.rs`; any other is refused at open.
pub(crate) const OPTIONS: &[&str] = &["ssl-mode", "prefix", "connect_timeout"];

/// The default table name prefix.
pub const DEFAULT_PREFIX: &str = "mistri_";

/// Checks a table prefix: lower-case letters, digits and `_`, starting with
/// a letter, at most 40 bytes (a table name is at most 64).
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    let ok = !prefix.is_empty()
        && prefix.len() <= 40
        && prefix.as_bytes()[0].is_ascii_lowercase()
        && prefix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        return Ok(());
    }
    Err(Error::Config(format!(
        "prefix must be lower-case letters, digits and _, starting with a letter, at most 40 bytes: {prefix:?}"
    )))
}

fn bad(url: &str, what: &str) -> Error {
    Error::Config(format!(
        "cannot use MySQL URL {}: {what}",
        crate::backend::shown_url(url)
    ))
}

/// Percent-decodes `s`.
fn decode(s: &str, url: &str, part: &str) -> Result<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| bad(url, &format!("bad percent-encoding in the {part}")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad(url, &format!("the {part} is not UTF-8")))
}

fn port_of(s: &str, url: &str) -> Result<u16> {
    s.parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| bad(url, &format!("the port {s:?} is not a number in 1..=65535")))
}

/// Parses `url`.
///
/// # Errors
/// [`Error::Config`] naming the part that is wrong (the password masked).
pub(crate) fn parse(url: &str) -> Result<MyConfig> {
    let rest = ["mysql://", "mariadb://"]
        .iter()
        .find_map(|s| {
            url.get(..s.len())
                .filter(|p| p.eq_ignore_ascii_case(s))
                .map(|_| &url[s.len()..])
        })
        .ok_or_else(|| bad(url, "the scheme must be mysql:// or mariadb://"))?;
    let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
    let (before_query, query) = match rest.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.split_once('/') {
        Some((a, p)) => (a, p),
        None => (before_query, ""),
    };
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (mut user, mut password) = (String::new(), None);
    if let Some(info) = userinfo {
        let (u, p) = match info.split_once(':') {
            Some((u, p)) => (u, Some(p)),
            None => (info, None),
        };
        user = decode(u, url, "user name")?;
        password = p.map(|p| decode(p, url, "password")).transpose()?;
    }
    if user.is_empty() {
        return Err(bad(
            url,
            "a user name is needed (mysql://USER:PASSWORD@HOST/DATABASE)",
        ));
    }
    if hostport.contains(',') {
        return Err(bad(url, "several hosts are not supported (name one host)"));
    }
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| bad(url, "an IPv6 host must be written [addr]"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => port_of(p, url)?,
            None if after.is_empty() => 3306,
            None => return Err(bad(url, "junk after the IPv6 host")),
        };
        (h.to_owned(), port)
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (decode(h, url, "host")?, port_of(p, url)?),
            None => (decode(hostport, url, "host")?, 3306),
        }
    };
    let host = if host.is_empty() {
        "127.0.0.1".to_owned()
    } else {
        host
    };
    let database = decode(path.trim_end_matches('/'), url, "database name")?;
    if database.is_empty() {
        return Err(bad(
            url,
            "a database is needed (mysql://USER@HOST/DATABASE)",
        ));
    }
    if database.contains(['`', '\0']) {
        return Err(bad(url, "the database name must not hold ` or NUL"));
    }
    let mut ssl = SslMode::Preferred;
    let mut prefix = DEFAULT_PREFIX.to_owned();
    let mut connect_timeout = None;
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        if pair.is_empty() {
            continue;
        }
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| bad(url, &format!("option {pair:?} has no value")))?;
        let v = decode(v, url, &format!("value of {k}"))?;
        match k {
            "ssl-mode" => {
                ssl = match v.to_ascii_uppercase().as_str() {
                    "DISABLED" => SslMode::Disabled,
                    "PREFERRED" => SslMode::Preferred,
                    "REQUIRED" => SslMode::Required,
                    "VERIFY_CA" => SslMode::VerifyCa,
                    "VERIFY_IDENTITY" => SslMode::VerifyIdentity,
                    other => {
                        return Err(bad(
                            url,
                            &format!("ssl-mode {other:?} is not one of DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY"),
                        ))
                    }
                }
            }
            "prefix" => {
                check_prefix(&v)?;
                prefix = v;
            }
            "connect_timeout" => {
                let secs: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0 && *s < 1e6)
                    .ok_or_else(|| bad(url, &format!("connect_timeout {v:?} is not a number of seconds")))?;
                connect_timeout = Some(Duration::from_secs_f64(secs));
            }
            // check_query refused any other before this runs.
            other => return Err(bad(url, &format!("unknown option {other:?}"))),
        }
    }
    Ok(MyConfig {
        user,
        password,
        database,
        host,
        port,
        ssl,
        prefix,
        connect_timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_read() {
        let c =
            parse("mysql://me:p%40ss%3Aw@db.example:3307/app?ssl-mode=verify_identity&prefix=ml_")
                .unwrap();
        assert_eq!(
            (c.user.as_str(), c.password.as_deref()),
            ("me", Some("p@ss:w"))
        );
        assert_eq!((c.host.as_str(), c.port), ("db.example", 3307));
        assert_eq!(c.database, "app");
        assert_eq!(c.ssl, SslMode::VerifyIdentity);
        assert_eq!(c.prefix, "ml_");
        let c = parse("mariadb://u@[::1]/d").unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.describe()),
            ("::1", 3306, "[::1]:3306".to_owned())
        );
        assert_eq!(
            (c.ssl, c.prefix.as_str()),
            (SslMode::Preferred, DEFAULT_PREFIX)
        );
        for (url, says) in [
            ("mysql://h/d", "user name"),
            ("mysql://u@h", "database"),
            ("mysql://u@h/d?ssl-mode=sometimes", "ssl-mode"),
            ("mysql://u@h/d?prefix=Bad-", "prefix"),
            ("mysql://u@h:0/d", "port"),
            ("mysql://u:secret@h,h2/d", "several hosts"),
        ] {
            let e = parse(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }
}
