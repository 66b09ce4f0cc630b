//! The operator's HTTP interface, written once: every server
//! (`mistri-locks serve`, the Rack app, the WSGI app) turns its request
//! into an [`OperatorRequest`], calls [`handle`] and writes the
//! [`OperatorResponse`] back, so the routes, the JSON, the actions and the
//! refusals are the same byte for byte wherever the page is served.
//!
//! Routes (relative to where the app is mounted):
//! - `GET /`: the page ([`PAGE`]), with a fresh CSRF token in it and in a
//!   cookie (double submit: the two must match on an action, and only a
//!   page of this origin can read the one it was given);
//! - `GET /api/state?prefix=P`: [`super::state_json`] of the listing under
//!   the served prefix + `P` (or `P` itself when it already starts with
//!   the served prefix);
//! - `GET /metrics`: this handle's counters ([`super::stats_prometheus`])
//!   and the fleet gauges of the listing ([`super::fleet_prometheus`]);
//! - `POST /api/stop`, `/api/clear`, `/api/break` with `{"key": "…"}`:
//!   raise the stop keys of the lease's holders, lower a flag, delete a
//!   lease.
//!
//! Before any route, the Host check: a request whose `Host` (or, with
//! [`OperatorOptions::trust_forwarded`], `X-Forwarded-Host`) is not one of
//! [`OperatorOptions::allowed_hosts`] gets 421 (400 without a `Host`) and
//! nothing is read from the backend (DNS rebinding).
//!
//! Safe by default. An action is refused with 403 unless all of these hold:
//! actions are enabled ([`OperatorOptions::allow_actions`]); the caller is
//! authorised, by `Authorization: Bearer <token>` equal to
//! [`OperatorOptions::token`] or by the host application's own check
//! ([`OperatorRequest::host_authorized`]); the request is same-origin
//! (an `Origin` header, when present, must be this server's
//! `scheme://host`; a request without one must carry the bearer token,
//! which a browser never attaches by itself; the scheme and host are the
//! forwarded ones when trusted); and, unless the bearer token authorised
//! it, the `X-CSRF-Token` header equals the page's CSRF cookie. Keys
//! outside the served prefix are refused too, and a Stop whose holder
//! watches a stop key outside it is 409.
//!
//! `GET /api/state` and `/metrics` read the backend through
//! `super::shared`: one listing per prefix and backend shared among the
//! requests of a second.

use super::{fleet_prometheus, json, state_json, stats_prometheus, PROMETHEUS_CONTENT_TYPE};
use crate::hold::FLAG_TTL;
use crate::locks::stop::StopOutcome;
use crate::locks::Locks;
use crate::options::OptionValue;
use std::fmt::Write as _;
use std::time::SystemTime;

/// The operator's page: one self-contained HTML file (no build step, no
/// CDN), served by [`handle`] with its placeholders filled.
pub const PAGE: &str = include_str!("page.html");

/// The largest action body accepted (a key is at most a few hundred bytes).
pub const MAX_BODY: usize = 64 * 1024;

/// The name of the CSRF cookie the page is given.
pub const CSRF_COOKIE: &str = "mistri_locks_csrf";

/// How a server serves the interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorOptions {
    /// Only keys under this prefix are shown and acted on (`""`: all).
    pub prefix: String,
    /// Enable Stop, Clear and Break (still behind authorisation).
    pub allow_actions: bool,
    /// The bearer token that authorises an action (`serve --token-file`).
    pub token: Option<String>,
    /// The names this server answers to, matched against the `Host` header
    /// (or `X-Forwarded-Host` when [`OperatorOptions::trust_forwarded`]):
    /// `name` matches that host on any port, `name:port` that port only,
    /// `.example.com` the domain and its subdomains, `*` any host (for an
    /// application whose framework checks `Host` itself). Empty: the loopback
    /// names only (`localhost`, `127.0.0.1`, `[::1]`). Any other host is
    /// refused before the backend is read.
    pub allowed_hosts: Vec<String>,
    /// Behind a TLS-terminating proxy: take the scheme and host from
    /// `X-Forwarded-Proto` and `X-Forwarded-Host` (`serve --trust-forwarded`).
    pub trust_forwarded: bool,
}

/// The shortest bearer token accepted: a shorter one is guessable.
pub const MIN_TOKEN_CHARS: usize = 16;

impl OperatorOptions {
    /// The option names [`OperatorOptionsBuilder::set`] knows.
    pub const NAMES: [&'static str; 6] = [
        "prefix",
        "allow_actions",
        "token",
        "authorize",
        "allowed_hosts",
        "trust_forwarded",
    ];

    /// Options set by name, checked by [`OperatorOptionsBuilder::build`].
    #[must_use]
    pub fn builder() -> OperatorOptionsBuilder {
        OperatorOptionsBuilder::default()
    }
}

/// [`OperatorOptions`] given by name (a Python keyword dict, a Ruby keyword
/// Hash, the CLI's flags), with the rules every face serves by:
/// - `token` is text of at least [`MIN_TOKEN_CHARS`] characters;
/// - `allow_actions` defaults to "a `token` or an `authorize` was given",
///   and enabling it without either is refused;
/// - `authorize` (a bool): the host application checks each action itself
///   (its answer is [`OperatorRequest::host_authorized`]);
/// - `allowed_hosts`: each call with a text adds one name (a face passes
///   its list entry by entry); an empty name is refused.
#[derive(Debug, Clone, Default)]
pub struct OperatorOptionsBuilder {
    prefix: String,
    allow_actions: Option<bool>,
    token: Option<String>,
    authorize: bool,
    allowed_hosts: Vec<String>,
    trust_forwarded: bool,
}

impl OperatorOptionsBuilder {
    /// Sets option `name` ([`OperatorOptions::NAMES`]); `OptionValue::None`
    /// leaves the default.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for an unknown name (with the
    /// nearest known one) or an empty host; [`crate::Error::WrongType`]
    /// for a value of the wrong kind.
    pub fn set(&mut self, name: &str, value: OptionValue) -> crate::Result<&mut Self> {
        if !OperatorOptions::NAMES.contains(&name) {
            return Err(unknown_option(name));
        }
        if value == OptionValue::None {
            return Ok(self);
        }
        let wrong = |what: &str, v: &OptionValue| {
            crate::Error::WrongType(format!("{name} must be {what}, got {v}"))
        };
        match (name, value) {
            ("prefix", OptionValue::Text(t)) => self.prefix = t,
            ("token", OptionValue::Text(t)) => self.token = Some(t),
            ("allowed_hosts", OptionValue::Text(t)) => {
                if t.is_empty() {
                    return Err(crate::Error::InvalidArgument(
                        "allowed_hosts: each entry must be a non-empty host name".to_owned(),
                    ));
                }
                self.allowed_hosts.push(t);
            }
            ("allow_actions", OptionValue::Bool(b)) => self.allow_actions = Some(b),
            ("authorize", OptionValue::Bool(b)) => self.authorize = b,
            ("trust_forwarded", OptionValue::Bool(b)) => self.trust_forwarded = b,
            ("prefix" | "token" | "allowed_hosts", v) => return Err(wrong("text", &v)),
            (_, v) => return Err(wrong("true or false", &v)),
        }
        Ok(self)
    }

    /// The options, with the rules checked.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`]: a token shorter than
    /// [`MIN_TOKEN_CHARS`], or actions enabled with neither a token nor an
    /// `authorize`.
    pub fn build(&self) -> crate::Result<OperatorOptions> {
        if let Some(token) = &self.token {
            if token.chars().count() < MIN_TOKEN_CHARS {
                return Err(crate::Error::InvalidArgument(format!(
                    "token must be a string of at least {MIN_TOKEN_CHARS} characters"
                )));
            }
        }
        let can_authorize = self.authorize || self.token.is_some();
        let allow_actions = self.allow_actions.unwrap_or(can_authorize);
        if allow_actions && !can_authorize {
            return Err(crate::Error::InvalidArgument(
                "allow_actions needs authorize or token".to_owned(),
            ));
        }
        Ok(OperatorOptions {
            prefix: self.prefix.clone(),
            allow_actions,
            token: self.token.clone(),
            allowed_hosts: self.allowed_hosts.clone(),
            trust_forwarded: self.trust_forwarded,
        })
    }
}

fn unknown_option(name: &str) -> crate::Error {
    let hint = crate::options::nearest(name, &OperatorOptions::NAMES)
        .map(|n| format!("; did you mean {n:?}?"))
        .unwrap_or_default();
    crate::Error::InvalidArgument(format!(
        "unknown option field {name:?}{hint} (known: {})",
        OperatorOptions::NAMES.join(", ")
    ))
}

/// One request, as a server read it.
#[derive(Debug, Clone, Default)]
pub struct OperatorRequest<'a> {
    /// `GET`, `POST`, …
    pub method: &'a str,
    /// The path below the mount point: `/`, `/api/state`, …
    pub path: &'a str,
    /// The query string without `?`.
    pub query: &'a str,
    /// Where the app is mounted (`""` or `/locks`): the cookie's path.
    pub mount: &'a str,
    /// `http` or `https`, for the same-origin check.
    pub scheme: &'a str,
    /// The `Host` header.
    pub host: Option<&'a str>,
    /// The `X-Forwarded-Proto` header (read only when
    /// [`OperatorOptions::trust_forwarded`]).
    pub forwarded_proto: Option<&'a str>,
    /// The `X-Forwarded-Host` header (read only when
    /// [`OperatorOptions::trust_forwarded`]).
    pub forwarded_host: Option<&'a str>,
    /// The `Origin` header.
    pub origin: Option<&'a str>,
    /// The `Authorization` header.
    pub authorization: Option<&'a str>,
    /// The `X-CSRF-Token` header.
    pub csrf: Option<&'a str>,
    /// The `Cookie` header.
    pub cookie: Option<&'a str>,
    /// The body (at most [`MAX_BODY`] bytes; a server refuses more with 413).
    pub body: &'a [u8],
    /// The host application's answer to "may this request act?" (its
    /// `authorize`), `None` where there is no host application.
    pub host_authorized: Option<bool>,
}

/// A request's fields given by name, owned (a Python dict, a Ruby Hash),
/// with the defaults every face reads alike (`GET`, path `/`, scheme
/// `http`, the rest empty or absent); [`OperatorRequestFields::request`]
/// lends them as an [`OperatorRequest`].
#[derive(Debug, Clone, Default)]
pub struct OperatorRequestFields {
    text: [Option<String>; 12],
    body: Vec<u8>,
    host_authorized: Option<bool>,
}

impl OperatorRequestFields {
    /// The field names [`OperatorRequestFields::set`] knows; the first 12
    /// are text.
    pub const NAMES: [&'static str; 14] = [
        "method",
        "path",
        "query",
        "mount",
        "scheme",
        "host",
        "forwarded_proto",
        "forwarded_host",
        "origin",
        "authorization",
        "csrf",
        "cookie",
        "body",
        "host_authorized",
    ];

    /// Sets field `name` ([`OperatorRequestFields::NAMES`]): text for the
    /// headers and the request line, text for `body` (bytes:
    /// [`OperatorRequestFields::set_body`]), a bool for `host_authorized`;
    /// `OptionValue::None` leaves the default.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for an unknown name (with the
    /// nearest known one) or a value of the wrong kind.
    pub fn set(&mut self, name: &str, value: OptionValue) -> crate::Result<&mut Self> {
        let Some(at) = Self::NAMES.iter().position(|n| *n == name) else {
            let hint = crate::options::nearest(name, &Self::NAMES)
                .map(|n| format!("; did you mean {n:?}?"))
                .unwrap_or_default();
            return Err(crate::Error::InvalidArgument(format!(
                "unknown request field {name:?}{hint} (known: {})",
                Self::NAMES.join(", ")
            )));
        };
        match (at, value) {
            (_, OptionValue::None) => {}
            (12, OptionValue::Text(t)) => self.body = t.into_bytes(),
            (13, OptionValue::Bool(b)) => self.host_authorized = Some(b),
            (13, v) => {
                return Err(crate::Error::WrongType(format!(
                    "{name} must be true or false, got {v}"
                )))
            }
            (i, OptionValue::Text(t)) => self.text[i] = Some(t),
            (_, v) => {
                return Err(crate::Error::WrongType(format!(
                    "{name} must be text, got {v}"
                )))
            }
        }
        Ok(self)
    }

    /// Sets the body's bytes.
    pub fn set_body(&mut self, body: Vec<u8>) -> &mut Self {
        self.body = body;
        self
    }

    /// The request, with the defaults for what was not set.
    #[must_use]
    pub fn request(&self) -> OperatorRequest<'_> {
        let t = |i: usize| self.text[i].as_deref();
        OperatorRequest {
            method: t(0).unwrap_or("GET"),
            path: t(1).unwrap_or("/"),
            query: t(2).unwrap_or(""),
            mount: t(3).unwrap_or(""),
            scheme: t(4).unwrap_or("http"),
            host: t(5),
            forwarded_proto: t(6),
            forwarded_host: t(7),
            origin: t(8),
            authorization: t(9),
            csrf: t(10),
            cookie: t(11),
            body: &self.body,
            host_authorized: self.host_authorized,
        }
    }
}

/// What to send back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorResponse {
    /// The HTTP status.
    pub status: u16,
    /// Headers, `Content-Type` first.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl OperatorResponse {
    fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        OperatorResponse {
            status,
            headers: vec![
                ("Content-Type".into(), content_type.into()),
                ("Cache-Control".into(), "no-store".into()),
                ("X-Content-Type-Options".into(), "nosniff".into()),
            ],
            body: body.into(),
        }
    }

    fn json(status: u16, body: String) -> Self {
        Self::new(status, "application/json", body)
    }

    fn reply(status: u16, ok: bool, message: &str) -> Self {
        let mut body = format!(
            "{{\"ok\":{ok},\"{}\":",
            if ok { "message" } else { "error" }
        );
        json::string(&mut body, message);
        body.push('}');
        Self::json(status, body)
    }

    /// The reason phrase of [`OperatorResponse::status`].
    pub fn reason(&self) -> &'static str {
        match self.status {
            200 => "OK",
            400 => "Bad Request",
            403 => "Forbidden",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            409 => "Conflict",
            413 => "Content Too Large",
            421 => "Misdirected Request",
            431 => "Request Header Fields Too Large",
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            _ => "Error",
        }
    }
}

/// The response for a body larger than [`MAX_BODY`] (servers send it
/// without reading the body).
pub fn too_large() -> OperatorResponse {
    OperatorResponse::reply(413, false, "the body is larger than 64 KiB")
}

/// Answers one request (see the module header).
pub fn handle(
    locks: &Locks,
    opts: &OperatorOptions,
    req: &OperatorRequest<'_>,
) -> OperatorResponse {
    // The Host check comes first: nothing is read for a page of another
    // site that rebound its name to this address.
    if let Err(refusal) = check_host(opts, req) {
        return refusal;
    }
    if let Some(action) = Action::route(req.path) {
        return action_request(locks, opts, req, action);
    }
    let read = matches!(req.method, "GET" | "HEAD");
    match req.path {
        "" | "/" | "/index.html" if read => page(opts, req),
        "/api/state" if read => {
            let asked = query_param(req.query, "prefix").unwrap_or_default();
            let prefix = if asked.starts_with(&opts.prefix) {
                asked
            } else {
                format!("{}{asked}", opts.prefix)
            };
            match super::shared::list(locks, &prefix) {
                Ok(listing) => {
                    OperatorResponse::json(200, state_json(&listing, &prefix, SystemTime::now()))
                }
                Err(e) => OperatorResponse::reply(502, false, &e),
            }
        }
        "/metrics" if read => {
            let mut text = stats_prometheus(&locks.stats());
            match super::shared::list(locks, &opts.prefix) {
                Ok(listing) => text.push_str(&fleet_prometheus(&listing, SystemTime::now())),
                Err(e) => return OperatorResponse::reply(502, false, &e),
            }
            OperatorResponse::new(200, PROMETHEUS_CONTENT_TYPE, text)
        }
        "" | "/" | "/index.html" | "/api/state" | "/metrics" => {
            let mut r = OperatorResponse::reply(405, false, "use GET");
            r.headers.push(("Allow".into(), "GET, HEAD".into()));
            r
        }
        _ => OperatorResponse::reply(404, false, "no such page"),
    }
}

/// What an action route asks: `POST /api/stop`, `/api/clear`,
/// `/api/break`. Parsed from the whole path, so no other path is an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// Raise the stop key of every holder of the key.
    Stop,
    /// Lower the flag.
    Clear,
    /// Break the lease.
    Break,
}

impl Action {
    /// The action `path` routes to, if it is an action route.
    fn route(path: &str) -> Option<Action> {
        match path {
            "/api/stop" => Some(Action::Stop),
            "/api/clear" => Some(Action::Clear),
            "/api/break" => Some(Action::Break),
            _ => None,
        }
    }
}

/// An action route's request: POST only, allowed ([`may_act`]), a body
/// `{"key": …}` naming a key under the served prefix.
fn action_request(
    locks: &Locks,
    opts: &OperatorOptions,
    req: &OperatorRequest<'_>,
    action: Action,
) -> OperatorResponse {
    if req.method != "POST" {
        let mut r = OperatorResponse::reply(405, false, "actions are POST only");
        r.headers.push(("Allow".into(), "POST".into()));
        return r;
    }
    if let Err(why) = may_act(opts, req) {
        return OperatorResponse::reply(403, false, why);
    }
    let key = match std::str::from_utf8(req.body)
        .map_err(|_| "the body is not UTF-8".to_string())
        .and_then(|b| json::field(b, "key"))
    {
        Ok(Some(k)) if !k.is_empty() => k,
        Ok(_) => {
            return OperatorResponse::reply(
                400,
                false,
                "the body needs {\"key\": \"…\"} with a non-empty key",
            )
        }
        Err(e) => return OperatorResponse::reply(400, false, &e),
    };
    if !key.starts_with(&opts.prefix) {
        return OperatorResponse::reply(403, false, "the key is outside the served prefix");
    }
    act(locks, action, &key, &opts.prefix)
}

fn act(locks: &Locks, action: Action, key: &str, prefix: &str) -> OperatorResponse {
    let result = match action {
        Action::Stop => stop_holders(locks, key, prefix),
        Action::Clear => locks
            .clear_flag(key)
            .map(|()| Ok(format!("lowered flag {key}"))),
        Action::Break => locks.break_lease(key).map(|broke| {
            if broke {
                Ok(format!("broke the lease on {key}"))
            } else {
                Err((404, format!("no live lease on {key}")))
            }
        }),
    };
    // The next refresh lists anew and shows what this did (a listing read
    // meanwhile is dropped too, and one in flight is not kept).
    super::shared::forget(locks);
    match result {
        Ok(Ok(message)) => OperatorResponse::reply(200, true, &message),
        Ok(Err((status, message))) => OperatorResponse::reply(status, false, &message),
        Err(crate::Error::InvalidArgument(m) | crate::Error::WrongType(m)) => {
            OperatorResponse::reply(400, false, &m)
        }
        Err(e) => OperatorResponse::reply(502, false, &e.to_string()),
    }
}

type Outcome = std::result::Result<String, (u16, String)>;

/// The page's Stop: the core's [`Locks::stop_holders_within`] (every
/// holder's stop key raised once, nothing when one lies outside the served
/// `prefix`), its outcome mapped to a status: 404 not held, 409 no stop
/// key or one outside the prefix (named).
pub(crate) fn stop_holders(locks: &Locks, key: &str, prefix: &str) -> crate::Result<Outcome> {
    Ok(match locks.stop_holders_within(key, prefix, FLAG_TTL)? {
        StopOutcome::Raised(stops) => Ok(format!("raised {}", stops.join(", "))),
        StopOutcome::NotHeld => Err((404, format!("no live lease on {key}"))),
        StopOutcome::Outside { stop_key } => Err((
            409,
            format!(
                "the holder of {key} watches the stop key {stop_key}, outside the served prefix {prefix}; nothing was raised (raise it where that prefix is served, or Break)"
            ),
        )),
        // NoStopKey, and any outcome added later: nothing was raised.
        _ => Err((
            409,
            format!("the holder of {key} watches no stop key (Break deletes the lease instead)"),
        )),
    })
}

/// The last value of a comma-separated forwarded header (the one the
/// nearest proxy, the trusted one, added).
fn last_value(header: Option<&str>) -> Option<&str> {
    header
        .and_then(|h| h.rsplit(',').next())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The host the client asked for: `X-Forwarded-Host` when trusted and
/// present, else `Host`.
fn effective_host<'a>(opts: &OperatorOptions, req: &OperatorRequest<'a>) -> Option<&'a str> {
    let forwarded = if opts.trust_forwarded {
        last_value(req.forwarded_host)
    } else {
        None
    };
    forwarded.or(req.host.map(str::trim).filter(|h| !h.is_empty()))
}

/// The scheme the client used: `X-Forwarded-Proto` when trusted and
/// present (`http` or `https`), else the server's own.
fn effective_scheme<'a>(opts: &OperatorOptions, req: &OperatorRequest<'a>) -> &'a str {
    let forwarded = if opts.trust_forwarded {
        last_value(req.forwarded_proto)
    } else {
        None
    };
    match forwarded {
        Some(p) if p.eq_ignore_ascii_case("https") => "https",
        Some(p) if p.eq_ignore_ascii_case("http") => "http",
        _ if req.scheme.is_empty() => "http",
        _ => req.scheme,
    }
}

fn plain_text(status: u16, message: &str) -> OperatorResponse {
    OperatorResponse::new(status, "text/plain; charset=utf-8", format!("{message}\n"))
}

fn check_host(opts: &OperatorOptions, req: &OperatorRequest<'_>) -> Result<(), OperatorResponse> {
    let header = if opts.trust_forwarded && last_value(req.forwarded_host).is_some() {
        "X-Forwarded-Host"
    } else {
        "Host"
    };
    let Some(host) = effective_host(opts, req) else {
        return Err(plain_text(
            400,
            "a request without a Host header is refused (this server answers only to the hosts it is told)",
        ));
    };
    if super::hosts::allowed(&opts.allowed_hosts, host) {
        return Ok(());
    }
    // Echo the host only when it is a plain host name (it is the client's
    // own text, shown back as text/plain).
    let shown: String = if super::hosts::split(host).is_some() && host.len() <= 255 {
        host.to_owned()
    } else {
        "(not a host name)".to_owned()
    };
    let name = super::hosts::split(host).map_or_else(|| shown.clone(), |(n, _)| n);
    Err(plain_text(
        421,
        &format!(
            "this server does not answer to the {header} {shown:?}: allow it with `serve --allow-host {name}` \
             (or allowed_hosts in the Rack or WSGI app); the default is the loopback names and the listen address"
        ),
    ))
}

fn may_act(opts: &OperatorOptions, req: &OperatorRequest<'_>) -> Result<(), &'static str> {
    if !opts.allow_actions {
        return Err("this server is read-only (actions are not enabled)");
    }
    let bearer = match (&opts.token, req.authorization.and_then(bearer_token)) {
        (Some(token), Some(given)) => same_secret(token.as_bytes(), given.as_bytes()),
        _ => false,
    };
    if !bearer && req.host_authorized != Some(true) {
        return Err("not authorised (send Authorization: Bearer <token>)");
    }
    match req.origin {
        Some(origin) => {
            let host = effective_host(opts, req).unwrap_or_default();
            let scheme = effective_scheme(opts, req);
            if host.is_empty() || !origin.eq_ignore_ascii_case(&format!("{scheme}://{host}")) {
                return Err("cross-origin request refused (behind a TLS proxy: trust_forwarded, serve --trust-forwarded)");
            }
        }
        None if !bearer => return Err("a request without an Origin header needs the bearer token"),
        None => {}
    }
    if !bearer {
        let cookie = req.cookie.and_then(|c| cookie_value(c, CSRF_COOKIE));
        match (cookie, req.csrf) {
            (Some(c), Some(h)) if !c.is_empty() && same_secret(c.as_bytes(), h.as_bytes()) => {}
            _ => return Err("missing or wrong CSRF token (reload the page)"),
        }
    }
    Ok(())
}

/// The token of `Authorization: Bearer <token>`, the scheme in any case
/// (RFC 9110 §11.1), the token trimmed.
fn bearer_token(header: &str) -> Option<&str> {
    let header = header.trim_start();
    let (scheme, rest) = header.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case("bearer") || !rest.starts_with([' ', '\t']) {
        return None;
    }
    Some(rest.trim())
}

/// Compares two secrets in time that depends on their lengths only.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k.trim() == name).then(|| v.trim())
    })
}

/// The value of `name` in a query string, percent-decoded.
pub fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k) == name).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn page(opts: &OperatorOptions, req: &OperatorRequest<'_>) -> OperatorResponse {
    let csrf = crate::runtime::token::mint_token().unwrap_or_default();
    let nonce = crate::runtime::token::mint_token().unwrap_or_default();
    let auth = if opts.token.is_some() {
        "bearer"
    } else {
        "host"
    };
    let html = PAGE
        .replace("{{NONCE}}", &nonce)
        .replace("{{CSRF}}", &csrf)
        .replace("{{ACTIONS}}", if opts.allow_actions { "on" } else { "off" })
        .replace("{{AUTH}}", auth);
    let mut r = OperatorResponse::new(200, "text/html; charset=utf-8", html);
    let path = if req.mount.is_empty() { "/" } else { req.mount };
    let mut cookie = format!("{CSRF_COOKIE}={csrf}; Path={path}; SameSite=Strict; HttpOnly");
    if effective_scheme(opts, req) == "https" {
        cookie.push_str("; Secure");
    }
    r.headers.push(("Set-Cookie".into(), cookie));
    let mut csp = String::new();
    let _ = write!(
        csp,
        "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    );
    r.headers.push(("Content-Security-Policy".into(), csp));
    r.headers.push(("X-Frame-Options".into(), "DENY".into()));
    r.headers
        .push(("Referrer-Policy".into(), "no-referrer".into()));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_three_action_routes_are_actions() {
        assert_eq!(Action::route("/api/stop"), Some(Action::Stop));
        assert_eq!(Action::route("/api/clear"), Some(Action::Clear));
        assert_eq!(Action::route("/api/break"), Some(Action::Break));
        for path in [
            "/api/brea",
            "/api/breakx",
            "/api/Break",
            "/api/",
            "/api/state",
            "/x/break",
        ] {
            assert_eq!(Action::route(path), None, "{path}");
        }
    }

    #[test]
    fn query_and_cookies() {
        assert_eq!(
            query_param("a=1&prefix=report%3A4+2", "prefix").as_deref(),
            Some("report:4 2")
        );
        assert_eq!(query_param("prefix", "prefix").as_deref(), Some(""));
        assert_eq!(query_param("x=%zz%4", "x").as_deref(), Some("%zz%4"));
        assert_eq!(
            cookie_value("a=1; mistri_locks_csrf=abc", CSRF_COOKIE),
            Some("abc")
        );
        assert!(
            same_secret(b"abc", b"abc")
                && !same_secret(b"abc", b"abd")
                && !same_secret(b"ab", b"abc")
        );
    }
}
