//! The Host check: which names a server answers to
//! ([`super::OperatorOptions::allowed_hosts`]), so that a page on another
//! site that rebinds its own name to this server's address (DNS
//! rebinding) is refused before anything is read from the backend.
//!
//! A pattern is `name` (that host on any port), `name:port` (that port
//! only), `.example.com` (the domain and its subdomains) or `*` (any
//! host). Names compare without regard to case and without a trailing dot;
//! an IPv6 address is written in brackets (`[::1]`, `[::1]:9187`). No
//! pattern: the loopback names only ([`LOOPBACK`]).

/// The names an empty [`super::OperatorOptions::allowed_hosts`] stands for.
pub const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// `host[:port]` as a `Host` header carries it, split and checked: the
/// name lower-cased (brackets kept for IPv6), the port when given. `None`
/// when it is not a host name, an IPv4 address or a bracketed IPv6
/// address with an optional numeric port.
pub(crate) fn split(authority: &str) -> Option<(String, Option<u16>)> {
    let authority = authority.trim();
    let (name, port) = if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (name, rest) = authority.split_at(end + 1);
        let inner = &name[1..name.len() - 1];
        if inner.is_empty()
            || !inner
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return None;
        }
        match rest {
            "" => (name, None),
            _ => (name, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match authority.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            Some(p.parse::<u16>().ok()?)
        }
        Some(_) => return None,
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    let plain = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_';
    if name.is_empty() || (!name.starts_with('[') && !name.bytes().all(plain)) {
        return None;
    }
    Some((name.to_ascii_lowercase(), port))
}

/// Does one pattern allow `name` (lower case) on `port`?
fn matches(pattern: &str, name: &str, port: Option<u16>) -> bool {
    let pattern = pattern.trim();
    if pattern == "*" {
        return true;
    }
    if let Some(domain) = pattern.strip_prefix('.') {
        let domain = domain.trim_end_matches('.').to_ascii_lowercase();
        return !domain.is_empty()
            && (name == domain
                || name
                    .strip_suffix(domain.as_str())
                    .is_some_and(|head| head.ends_with('.')));
    }
    match split(pattern) {
        Some((want, None)) => want == name,
        Some((want, Some(p))) => want == name && port == Some(p),
        None => false,
    }
}

/// Is `authority` (a `Host` or `X-Forwarded-Host` value) allowed by
/// `allowed` (empty: [`LOOPBACK`])?
pub(crate) fn allowed(allowed: &[String], authority: &str) -> bool {
    let Some((name, port)) = split(authority) else {
        return false;
    };
    if allowed.is_empty() {
        LOOPBACK.iter().any(|p| matches(p, &name, port))
    } else {
        allowed.iter().any(|p| matches(p, &name, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(patterns: &[&str], host: &str) -> bool {
        let v: Vec<String> = patterns.iter().map(|s| (*s).to_owned()).collect();
        allowed(&v, host)
    }

    #[test]
    fn patterns() {
        for h in [
            "localhost",
            "LOCALHOST:80",
            "127.0.0.1:9187",
            "[::1]",
            "[::1]:1",
            "localhost.",
        ] {
            assert!(ok(&[], h), "{h}");
        }
        for h in [
            "evil.example",
            "127.0.0.2",
            "",
            "localhost:x",
            "local host",
            "[::1",
            "[zz]",
            "a/b",
            "localhost:99999",
        ] {
            assert!(!ok(&[], h), "{h:?}");
        }
        assert!(ok(&["locks.example.com"], "Locks.Example.com:8443"));
        assert!(ok(&["locks.example.com:443"], "locks.example.com:443"));
        assert!(!ok(&["locks.example.com:443"], "locks.example.com:80"));
        assert!(!ok(&["locks.example.com:443"], "locks.example.com"));
        assert!(ok(&[".example.com"], "example.com"));
        assert!(ok(&[".example.com"], "a.b.example.com:1"));
        assert!(!ok(&[".example.com"], "badexample.com"));
        assert!(ok(&["*"], "anything.at.all:1"));
        assert!(!ok(&["*"], "not a host"));
        assert!(ok(&["[::1]:9187"], "[::1]:9187") && !ok(&["[::1]:9187"], "[::1]:9188"));
        // An explicit list replaces the loopback default.
        assert!(!ok(&["locks.example.com"], "localhost"));
    }
}
