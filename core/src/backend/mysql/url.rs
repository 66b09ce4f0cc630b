//! `mysql://` / `mariadb://` URLs: user, password, host, port, database,
//! and this backend's options (`ssl-mode` as the MySQL clients spell it,
//! `prefix` for the table names). See `docs/MYSQL.md`.

use crate::backend::url::{decode, split};
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
    crate::backend::url::refused("MySQL", url, what)
}

/// Parses `url`.
///
/// # Errors
/// [`Error::Config`] naming the part that is wrong (the password masked).
pub(crate) fn parse(url: &str) -> Result<MyConfig> {
    let parts = split(url, &["mysql", "mariadb"]).map_err(|what| bad(url, &what))?;
    let (user, password) = (parts.user.unwrap_or_default(), parts.password);
    if user.is_empty() {
        return Err(bad(
            url,
            "a user name is needed (mysql://USER:PASSWORD@HOST/DATABASE)",
        ));
    }
    if parts.hosts.len() > 1 {
        return Err(bad(url, "several hosts are not supported (name one host)"));
    }
    let (host, port) = parts
        .hosts
        .into_iter()
        .next()
        .map_or((String::new(), None), |h| (h.name, h.port));
    let port = port.unwrap_or(3306);
    let host = if host.is_empty() {
        "127.0.0.1".to_owned()
    } else {
        host
    };
    let database = decode(parts.path.trim_end_matches('/'), "database name")
        .map_err(|what| bad(url, &what))?;
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
    for (k, v) in parts.query {
        match k.as_str() {
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
