//! The operator's interface for Ruby hosts (`MistriLocks::Web`,
//! `MistriLocks::Metrics`): private `Locks#_operator_handle` (the core's
//! `operator::handle`, run without the GVL: a request lists the backend)
//! and `Locks#_stats_prometheus`. The Rack app is Ruby, in
//! `lib/mistri_locks/web.rb`.

use crate::locks::RbLocks;
use crate::nogvl::nogvl;
use magnus::{method, prelude::*, Error, RArray, RModule, RString, Ruby, Value};
use mistri_locks::operator::{self, OperatorOptions, OperatorRequest};

fn text(v: Value) -> Result<Option<String>, Error> {
    if v.is_nil() {
        return Ok(None);
    }
    let s = RString::try_convert(v)?;
    // SAFETY: the bytes are copied before any other Ruby code can run.
    let bytes = unsafe { s.as_slice() }.to_vec();
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// `_operator_handle([method, path, query, mount, scheme, host, origin,
/// authorization, csrf, cookie, body, host_authorized, prefix,
/// allow_actions, token])` -> `[status, [[name, value], …], body]`.
fn handle(ruby: &Ruby, rb_self: &RbLocks, args: RArray) -> Result<RArray, Error> {
    if args.len() != 15 {
        return Err(Error::new(
            ruby.exception_arg_error(),
            "_operator_handle takes 15 request fields",
        ));
    }
    let field = |i: isize| -> Result<Option<String>, Error> { text(args.entry(i)?) };
    let s = |i: isize| -> Result<String, Error> { Ok(field(i)?.unwrap_or_default()) };
    let (method, path, query, mount, scheme) = (s(0)?, s(1)?, s(2)?, s(3)?, s(4)?);
    let (host, origin, authorization, csrf, cookie) =
        (field(5)?, field(6)?, field(7)?, field(8)?, field(9)?);
    let body_value: Value = args.entry(10)?;
    let body = if body_value.is_nil() {
        Vec::new()
    } else {
        let b = RString::try_convert(body_value)?;
        // SAFETY: copied at once, before any other Ruby code can run.
        unsafe { b.as_slice() }.to_vec()
    };
    let authorized: Value = args.entry(11)?;
    let host_authorized = if authorized.is_nil() {
        None
    } else {
        Some(authorized.to_bool())
    };
    let prefix = s(12)?;
    let allow_actions = args.entry::<Value>(13)?.to_bool();
    let token = field(14)?;
    let opts = OperatorOptions {
        prefix,
        allow_actions,
        token,
        ..OperatorOptions::default()
    };
    let locks = rb_self.locks().clone();
    let response = nogvl(ruby, move || {
        let req = OperatorRequest {
            method: &method,
            path: &path,
            query: &query,
            mount: &mount,
            scheme: &scheme,
            host: host.as_deref(),
            forwarded_proto: None,
            forwarded_host: None,
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
    class.define_private_method("_operator_handle", method!(handle, 1))?;
    class.define_private_method("_stats_prometheus", method!(stats_prometheus, 0))?;
    module.const_set("OPERATOR_MAX_BODY", operator::MAX_BODY)?;
    Ok(())
}
