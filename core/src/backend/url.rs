//! The one URL splitter and the one password mask of every backend.
//!
//! [`split`] cuts `scheme://[user[:password]@]host[:port][,host[:port]…][/path][?k=v&…][#fragment]`
//! into its parts, percent-decoded, and says which part is wrong without
//! ever showing the password; each backend then reads only its own parts
//! (its defaults and options, unix sockets for Postgres, a host list for
//! Redis Sentinel and Cluster, one host elsewhere). [`shown_url`] is how
//! every backend's messages show a URL.

/// One host of the authority: `name`, `name:port`, `[v6]` or `[v6]:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Host {
    /// The name, percent-decoded; an IPv6 address without its brackets;
    /// empty when the URL names none (`postgres://u@/db`, `…@:5433`).
    pub(crate) name: String,
    pub(crate) port: Option<u16>,
}

impl Host {
    /// `name:port` (`[v6]:port`), `default` standing in for no port.
    pub(crate) fn with_port(&self, default: u16) -> String {
        let port = self.port.unwrap_or(default);
        if self.name.contains(':') {
            format!("[{}]:{port}", self.name)
        } else {
            format!("{}:{port}", self.name)
        }
    }
}

/// As written: `name`, `name:port`, `[v6]`, `[v6]:port`.
impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.name.contains(':') {
            write!(f, "[{}]", self.name)?;
        } else {
            f.write_str(&self.name)?;
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// The parts of a URL ([`split`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parts {
    /// The scheme as the accepted list spells it (matched without case).
    pub(crate) scheme: &'static str,
    /// `user[:password]` as written (still percent-encoded), for a client
    /// that reads the URL again; `None` when absent or empty.
    pub(crate) userinfo: Option<String>,
    /// The user name, decoded; `None` when absent or empty.
    pub(crate) user: Option<String>,
    /// The password, decoded (`Some("")` for `user:@`).
    pub(crate) password: Option<String>,
    /// The hosts in order; empty when the authority names none.
    pub(crate) hosts: Vec<Host>,
    /// Everything after the first `/` of the path, as written.
    pub(crate) path: String,
    /// The query's `key=value` pairs in order, decoded (`+` stays `+`).
    pub(crate) query: Vec<(String, String)>,
    /// The same pairs as written.
    pub(crate) raw_query: Vec<String>,
    /// The fragment, if any.
    pub(crate) fragment: Option<String>,
}

/// Splits `url`, whose scheme must be one of `schemes` (without `://`).
///
/// # Errors
/// What is wrong, naming the part (`the port "x" is not a number from 1 to
/// 65535`, `bad percent-encoding in the password`) and never its value
/// when that part is the password; the caller adds its backend's words
/// and [`shown_url`].
pub(crate) fn split(url: &str, schemes: &[&'static str]) -> Result<Parts, String> {
    let scheme = url.split_once("://").and_then(|(s, _)| {
        schemes
            .iter()
            .copied()
            .find(|known| known.eq_ignore_ascii_case(s))
    });
    let Some(scheme) = scheme else {
        return Err(format!("the scheme must be {}", scheme_list(schemes)));
    };
    if password_unencoded(url) {
        return Err("is there a '/', '?' or '#' in the password? \
                    Percent-encode it (%2F, %3F, %23)"
            .to_owned());
    }
    let rest = &url[scheme.len() + 3..];
    let (rest, fragment) = match rest.split_once('#') {
        Some((r, f)) => (r, Some(f.to_owned())),
        None => (rest, None),
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (userinfo, hostlist) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (mut user, mut password) = (None, None);
    if let Some(info) = userinfo {
        let (u, p) = match info.split_once(':') {
            Some((u, p)) => (u, Some(p)),
            None => (info, None),
        };
        user = Some(decode(u, "user name")?).filter(|u| !u.is_empty());
        password = p.map(|p| decode(p, "password")).transpose()?;
    }
    let hosts = if hostlist.is_empty() {
        Vec::new()
    } else {
        hostlist.split(',').map(host).collect::<Result<_, _>>()?
    };
    let (mut pairs, mut raw_query) = (Vec::new(), Vec::new());
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("option {pair:?} has no value"))?;
        let key = decode(k, "option name")?;
        let value = decode(v, &format!("value of {key}"))?;
        pairs.push((key, value));
        raw_query.push(pair.to_owned());
    }
    Ok(Parts {
        scheme,
        userinfo: userinfo.filter(|u| !u.is_empty()).map(str::to_owned),
        user,
        password,
        hosts,
        path: path.to_owned(),
        query: pairs,
        raw_query,
        fragment,
    })
}

/// `cannot use BACKEND URL SHOWN: WHAT` ([`shown_url`]): how a backend
/// refuses its URL.
pub(crate) fn refused(backend: &str, url: &str, what: &str) -> crate::error::Error {
    crate::error::Error::Config(format!(
        "cannot use {backend} URL {}: {what}",
        shown_url(url)
    ))
}

/// `a://`, `a:// or b://`, `a://, b:// or c://`.
fn scheme_list(schemes: &[&str]) -> String {
    let all: Vec<String> = schemes.iter().map(|s| format!("{s}://")).collect();
    match all.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// One entry of the host list.
fn host(one: &str) -> Result<Host, String> {
    if let Some(v6) = one.strip_prefix('[') {
        let (name, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("the IPv6 host {one:?} has no closing ']'"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(port(p, "the port")?),
            None if after.is_empty() => None,
            None => return Err(format!("junk after the IPv6 host [{name}]")),
        };
        return Ok(Host {
            name: name.to_owned(),
            port,
        });
    }
    let (name, port_text) = match one.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (one, None),
    };
    Ok(Host {
        name: decode(name, "host")?,
        port: port_text.map(|p| port(p, "the port")).transpose()?,
    })
}

/// `text` as a port (1-65535); `part` names it in the error.
pub(crate) fn port(text: &str, part: &str) -> Result<u16, String> {
    text.parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("{part} {text:?} is not a number from 1 to 65535"))
}

/// Percent-decodes `s` (`+` stays `+`, as libpq does); `part` names it in
/// the error, which never shows `s`.
pub(crate) fn decode(s: &str, part: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent-encoding in the {part}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("the {part} is not UTF-8"))
}

/// Does `url` look like a password with a `/`, `?` or `#` that was not
/// percent-encoded (`redis://:pa?ss@h/0`)? Then the authority as a URL
/// parser reads it has a `:` but no `@`, and an `@` follows later.
pub(crate) fn password_unencoded(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    !authority.contains('@') && authority.contains(':') && tail.contains('@')
}

/// `url` as an error may show it: the password `***`, no query or
/// fragment (a query may carry a password too); a DSN by name only; all
/// but the scheme when a password seems to hold a `/`, `?` or `#`.
pub(crate) fn shown_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return if super::is_dsn(url) {
            "a key/value DSN".to_owned()
        } else {
            format!("{url:?}")
        };
    };
    if password_unencoded(url) {
        return format!("{scheme}://***");
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let path = tail.split(['?', '#']).next().unwrap_or("");
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_owned(),
    };
    format!("{scheme}://{authority}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PG: &[&str] = &["postgres", "postgresql"];

    fn hosts(parts: &Parts) -> Vec<(&str, Option<u16>)> {
        parts
            .hosts
            .iter()
            .map(|h| (h.name.as_str(), h.port))
            .collect()
    }

    #[test]
    fn every_part_is_split_and_decoded() {
        let p = split(
            "PostgreSQL://al%40x:p%3Aa%40s%2Fs@db.example:6543/app%2F1?a=1&b=x%20y&a=2#frag",
            PG,
        )
        .unwrap();
        assert_eq!(p.scheme, "postgresql");
        assert_eq!(p.userinfo.as_deref(), Some("al%40x:p%3Aa%40s%2Fs"));
        assert_eq!(p.user.as_deref(), Some("al@x"));
        assert_eq!(p.password.as_deref(), Some("p:a@s/s"));
        assert_eq!(hosts(&p), [("db.example", Some(6543))]);
        assert_eq!(p.path, "app%2F1");
        assert_eq!(
            p.query,
            [
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "x y".to_owned()),
                ("a".to_owned(), "2".to_owned())
            ]
        );
        assert_eq!(p.raw_query, ["a=1", "b=x%20y", "a=2"]);
        assert_eq!(p.fragment.as_deref(), Some("frag"));
    }

    #[test]
    fn ipv6_hosts_with_and_without_a_port() {
        let p = split("postgres://u@[::1]:7/d", PG).unwrap();
        assert_eq!(hosts(&p), [("::1", Some(7))]);
        assert_eq!(p.hosts[0].with_port(5432), "[::1]:7");
        let p = split("postgres://u@[fe80::2]/d", PG).unwrap();
        assert_eq!(hosts(&p), [("fe80::2", None)]);
        assert_eq!(p.hosts[0].with_port(5432), "[fe80::2]:5432");
    }

    #[test]
    fn empty_hosts_and_host_lists() {
        let p = split("postgres://u@/d", PG).unwrap();
        assert!(p.hosts.is_empty());
        assert_eq!(p.user.as_deref(), Some("u"));
        let p = split("postgres://:pw@:5433", PG).unwrap();
        assert_eq!(hosts(&p), [("", Some(5433))]);
        assert_eq!((p.user, p.password.as_deref()), (None, Some("pw")));
        let p = split("postgres://a:1,[::2]:3,b", PG).unwrap();
        assert_eq!(hosts(&p), [("a", Some(1)), ("::2", Some(3)), ("b", None)]);
        assert_eq!(split("postgres://", PG).unwrap().hosts, []);
    }

    #[test]
    fn errors_name_the_part_and_never_the_password() {
        for (url, says) in [
            (
                "postgres://u:secret@h:99999/d",
                "the port \"99999\" is not a number",
            ),
            ("postgres://u:secret@h:0/d", "the port \"0\""),
            ("postgres://u:secret@h:x/d", "the port \"x\""),
            ("postgres://u:secret@[::1]:x/d", "the port \"x\""),
            ("postgres://u:secret@[::1/d", "no closing ']'"),
            ("postgres://u:secret@[::1]x/d", "junk after the IPv6 host"),
            (
                "postgres://u:se%zzcret@h/d",
                "bad percent-encoding in the password",
            ),
            ("postgres://u:se%ffcret@h/d", "the password is not UTF-8"),
            (
                "postgres://u%zz:secret@h/d",
                "percent-encoding in the user name",
            ),
            ("postgres://u:secret@h%zz/d", "percent-encoding in the host"),
            (
                "postgres://u:secret@h/d?a=%zz",
                "percent-encoding in the value of a",
            ),
            ("postgres://u:secret@h/d?a", "option \"a\" has no value"),
            ("postgres://u:sec/ret@h/d", "Percent-encode it"),
            (
                "mysql://u:secret@h/d",
                "the scheme must be postgres:// or postgresql://",
            ),
            ("u:secret@h/d", "the scheme must be"),
        ] {
            let e = split(url, PG).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("cret") && !e.contains("sec/"), "{url}: {e}");
        }
        assert_eq!(
            split("x://h", &["a", "b", "c"]).unwrap_err(),
            "the scheme must be a://, b:// or c://"
        );
    }

    #[test]
    fn the_mask_hides_the_password_and_the_query() {
        assert_eq!(
            shown_url("postgres://u:secret@h/d?password=x&a=b#f"),
            "postgres://u:***@h/d"
        );
        assert_eq!(shown_url("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(shown_url("redis://:pa?ss@h/0"), "redis://***");
        assert_eq!(shown_url("host=h password=x"), "a key/value DSN");
    }
}
