//! The operator's page for Node servers: one request through the core's one
//! handler (`operator::handle`: routes, the Host check, the token and CSRF
//! rules, the JSON, the metrics), off the JS thread (it lists the backend).
//! The `node:http` / Express handler is JavaScript (`lib/index.cjs`).

use crate::locks::NativeLocks;
use mistri_locks::operator::{self, OperatorOptions, OperatorOptionsBuilder, OperatorRequest};
use mistri_locks::OptionValue;
use napi::bindgen_prelude::*;
use napi_derive::napi;

/// The request as a Node server read it (header values as sent, or absent).
#[napi(object)]
pub struct OperatorRequestFields {
    pub method: String,
    pub path: String,
    pub query: String,
    pub mount: String,
    pub scheme: String,
    pub host: Option<String>,
    pub forwarded_proto: Option<String>,
    pub forwarded_host: Option<String>,
    pub origin: Option<String>,
    pub authorization: Option<String>,
    pub csrf: Option<String>,
    pub cookie: Option<String>,
    pub body: Option<Buffer>,
    pub host_authorized: Option<bool>,
}

/// How the page is served.
#[napi(object)]
pub struct OperatorOptionFields {
    pub prefix: Option<String>,
    pub allow_actions: Option<bool>,
    pub token: Option<String>,
    /// The application checks each action itself (`authorize(req)`).
    pub authorize: Option<bool>,
    pub allowed_hosts: Option<Vec<String>>,
    pub trust_forwarded: Option<bool>,
}

/// `{status, reason, headers: [[name, value]], body}`.
#[napi(object)]
pub struct OperatorAnswer {
    pub status: u32,
    pub reason: String,
    pub headers: Vec<Vec<String>>,
    pub body: Buffer,
}

/// The largest action body the handler reads (larger: 413 unread).
#[napi]
pub fn operator_max_body() -> u32 {
    u32::try_from(operator::MAX_BODY).unwrap_or(u32::MAX)
}

/// The 413 answer for a body larger than [`operator_max_body`].
#[napi]
pub fn operator_too_large() -> OperatorAnswer {
    answer(operator::too_large())
}

fn answer(r: operator::OperatorResponse) -> OperatorAnswer {
    OperatorAnswer {
        status: u32::from(r.status),
        reason: r.reason().to_owned(),
        headers: r.headers.into_iter().map(|(k, v)| vec![k, v]).collect(),
        body: r.body.into(),
    }
}

/// The options through the core's one parser, which holds the rules (the
/// token's length; actions need a token or `authorize`).
fn operator_options(o: OperatorOptionFields) -> Result<OperatorOptions> {
    let text = |t: Option<String>| t.map_or(OptionValue::None, OptionValue::Text);
    let flag = |b: Option<bool>| b.map_or(OptionValue::None, OptionValue::Bool);
    let mut b = OperatorOptions::builder();
    let set = |b: &mut OperatorOptionsBuilder, name: &str, v: OptionValue| {
        b.set(name, v).map(|_| ()).map_err(|e| crate::js_error(&e))
    };
    set(&mut b, "prefix", text(o.prefix))?;
    set(&mut b, "allow_actions", flag(o.allow_actions))?;
    set(&mut b, "token", text(o.token))?;
    set(&mut b, "authorize", flag(o.authorize))?;
    set(&mut b, "trust_forwarded", flag(o.trust_forwarded))?;
    for host in o.allowed_hosts.unwrap_or_default() {
        set(&mut b, "allowed_hosts", OptionValue::Text(host))?;
    }
    b.build().map_err(|e| crate::js_error(&e))
}

/// The options checked by the core's rules (at construction): whether
/// actions are enabled (`allowActions` defaults to "a token or `authorize`
/// was given").
#[napi]
pub fn operator_options_check(options: OperatorOptionFields) -> Result<bool> {
    Ok(operator_options(options)?.allow_actions)
}

/// One request through the core's handler; resolves with an `OperatorAnswer`.
#[napi]
pub fn operator_handle<'env>(
    env: &'env Env,
    locks: &NativeLocks,
    request: OperatorRequestFields,
    options: OperatorOptionFields,
) -> Result<Object<'env>> {
    let opts = operator_options(options)?;
    let body: Vec<u8> = request.body.map(|b| b.to_vec()).unwrap_or_default();
    locks.call(env, move |locks| {
        let req = OperatorRequest {
            method: &request.method,
            path: &request.path,
            query: &request.query,
            mount: &request.mount,
            scheme: &request.scheme,
            host: request.host.as_deref(),
            forwarded_proto: request.forwarded_proto.as_deref(),
            forwarded_host: request.forwarded_host.as_deref(),
            origin: request.origin.as_deref(),
            authorization: request.authorization.as_deref(),
            csrf: request.csrf.as_deref(),
            cookie: request.cookie.as_deref(),
            body: &body,
            host_authorized: request.host_authorized,
        };
        Ok(answer(operator::handle(locks, &opts, &req)))
    })
}
