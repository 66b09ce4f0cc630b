//! The operator's interface for Ruby hosts (`MistriLocks::Web`,
//! `MistriLocks::Metrics`): private `Locks#_operator_handle` (the core's
//! `operator::handle`, run without the GVL: a request lists the backend)
//! and `Locks#_stats_prometheus`. The Rack app is Ruby, in
//! `lib/mistri_locks/web.rb`.

use crate::locks::RbLocks;
use crate::nogvl::nogvl;
use magnus::r_hash::ForEach;
use magnus::{method, prelude::*, Error, RArray, RHash, RModule, RString, Ruby, Symbol, Value};
use mistri_locks::operator::{self, OperatorOptions, OperatorRequest};
use mistri_locks::OptionValue;

fn text(v: Value) -> Result<Option<String>, Error> {
    if v.is_nil() {
        return Ok(None);
    }
    let s = RString::try_convert(v)?;
    // SAFETY: the bytes are copied before any other Ruby code can run.
    let bytes = unsafe { s.as_slice() }.to_vec();
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// The request fields `_operator_handle` reads (by name).
const REQUEST_FIELDS: &[&str] = &[
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

/// Refuses a key of `hash` that is not a Symbol in `known` (a misspelt
/// field would otherwise be read as absent).
fn check_keys(ruby: &Ruby, what: &str, hash: RHash, known: &[&str]) -> Result<(), Error> {
    let mut names = Vec::new();
    hash.foreach(|key: Value, _: Value| {
        names.push(Symbol::from_value(key).map(|s| s.name().map(|n| n.into_owned())));
        Ok(ForEach::Continue)
    })?;
    for name in names {
        match name {
            Some(Ok(n)) if known.contains(&n.as_str()) => {}
            Some(Ok(n)) => {
                return Err(Error::new(
                    ruby.exception_arg_error(),
                    format!(
                        "_operator_handle: unknown {what} field :{n} (known: {})",
                        known.join(", ")
                    ),
                ))
            }
            Some(Err(e)) => return Err(e),
            None => {
                return Err(Error::new(
                    ruby.exception_type_error(),
                    format!("_operator_handle: {what} keys must be Symbols"),
                ))
            }
        }
    }
    Ok(())
}

/// The interface's options, by name, through the core's one parser (its
/// rules: the token's length, actions need a token or `authorize`).
fn operator_options(ruby: &Ruby, options: RHash) -> Result<OperatorOptions, Error> {
    let mut entries = Vec::new();
    options.foreach(|key: Value, value: Value| {
        entries.push((key, value));
        Ok(ForEach::Continue)
    })?;
    let mut builder = OperatorOptions::builder();
    for (key, value) in entries {
        let name = Symbol::from_value(key)
            .ok_or_else(|| {
                Error::new(
                    ruby.exception_type_error(),
                    "_operator_handle: option keys must be Symbols",
                )
            })?
            .name()?
            .into_owned();
        if name == "allowed_hosts" {
            let list = RArray::from_value(value).ok_or_else(|| {
                Error::new(
                    ruby.exception_type_error(),
                    "_operator_handle: allowed_hosts must be an Array of Strings",
                )
            })?;
            for i in 0..list.len() {
                let entry: Value = list.entry(i as isize)?;
                let host = text(entry)?.unwrap_or_default();
                builder
                    .set(&name, OptionValue::Text(host))
                    .map_err(|e| crate::error::to_ruby(ruby, e))?;
            }
            continue;
        }
        // A name the core does not know (None sets nothing else).
        builder.set(&name, OptionValue::None).map_err(|e| {
            let message = e
                .message()
                .replacen(&format!("{name:?}"), &format!(":{name}"), 1);
            Error::new(
                ruby.exception_arg_error(),
                format!("_operator_handle: {message}"),
            )
        })?;
        let value = crate::args::option_value(ruby, &name, value)?;
        builder
            .set(&name, value.clone())
            .map_err(|e| crate::args::option_error(ruby, &value, e))?;
    }
    builder.build().map_err(|e| crate::error::to_ruby(ruby, e))
}

/// `_operator_options(options)`: the options checked by the core's rules,
/// at construction; whether actions are enabled (`allow_actions` defaults
/// to "a token or `authorize` was given").
fn check_options(ruby: &Ruby, _rb_self: &RbLocks, options: RHash) -> Result<bool, Error> {
    Ok(operator_options(ruby, options)?.allow_actions)
}

/// `hash[:name]`, `None` when absent or nil.
fn get(ruby: &Ruby, hash: RHash, name: &str) -> Option<Value> {
    hash.get(ruby.to_symbol(name)).filter(|v| !v.is_nil())
}

/// `hash[:name]` as text (`None` when absent or nil).
fn text_field(ruby: &Ruby, hash: RHash, name: &str) -> Result<Option<String>, Error> {
    get(ruby, hash, name).map_or(Ok(None), text)
}

/// `_operator_handle(request, options)`: `request` holds the request's
/// fields by name (`:method, :path, :query, :mount, :scheme, :host,
/// :forwarded_proto, :forwarded_host, :origin, :authorization, :csrf,
/// :cookie, :body` (Strings or nil), `:host_authorized` (true, false or
/// nil)), `options` the interface's (`:prefix, :allow_actions, :token,
/// :allowed_hosts` (an Array of Strings), `:trust_forwarded`). Returns
/// `[status, [[name, value], …], body]`.
fn handle(ruby: &Ruby, rb_self: &RbLocks, request: RHash, options: RHash) -> Result<RArray, Error> {
    check_keys(ruby, "request", request, REQUEST_FIELDS)?;
    let opts = operator_options(ruby, options)?;
    let field = |name: &str| text_field(ruby, request, name);
    let method = field("method")?.unwrap_or_else(|| "GET".to_owned());
    let path = field("path")?.unwrap_or_else(|| "/".to_owned());
    let query = field("query")?.unwrap_or_default();
    let mount = field("mount")?.unwrap_or_default();
    let scheme = field("scheme")?.unwrap_or_else(|| "http".to_owned());
    let (host, forwarded_proto, forwarded_host) = (
        field("host")?,
        field("forwarded_proto")?,
        field("forwarded_host")?,
    );
    let (origin, authorization, csrf, cookie) = (
        field("origin")?,
        field("authorization")?,
        field("csrf")?,
        field("cookie")?,
    );
    let body = match get(ruby, request, "body") {
        None => Vec::new(),
        Some(v) => {
            let b = RString::try_convert(v)?;
            // SAFETY: copied at once, before any other Ruby code can run.
            unsafe { b.as_slice() }.to_vec()
        }
    };
    let host_authorized = get(ruby, request, "host_authorized").map(|v| v.to_bool());
    let locks = rb_self.locks().clone();
    let response = nogvl(ruby, move || {
        let req = OperatorRequest {
            method: &method,
            path: &path,
            query: &query,
            mount: &mount,
            scheme: &scheme,
            host: host.as_deref(),
            forwarded_proto: forwarded_proto.as_deref(),
            forwarded_host: forwarded_host.as_deref(),
            origin: origin.as_deref(),
            authorization: authorization.as_deref(),
            csrf: csrf.as_deref(),
            cookie: cookie.as_deref(),
            body: &body,
            host_authorized,
        };
        operator::handle(&locks, &opts, &req)
    })?;
    let headers = ruby.ary_new();
    for (k, v) in response.headers {
        headers.push(ruby.ary_from_vec(vec![k, v]))?;
    }
    let out = ruby.ary_new();
    out.push(response.status)?;
    out.push(headers)?;
    out.push(ruby.str_from_slice(&response.body))?;
    Ok(out)
}

/// `_stats_prometheus` -> this handle's counters as Prometheus text.
fn stats_prometheus(rb_self: &RbLocks) -> String {
    operator::stats_prometheus(&rb_self.locks().stats())
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let class = module.define_class("Locks", ruby.class_object())?;
    class.define_private_method("_operator_handle", method!(handle, 2))?;
    class.define_private_method("_operator_options", method!(check_options, 1))?;
    class.define_private_method("_stats_prometheus", method!(stats_prometheus, 0))?;
    module.const_set("OPERATOR_MAX_BODY", operator::MAX_BODY)?;
    Ok(())
}
