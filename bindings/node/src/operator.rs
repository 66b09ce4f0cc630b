//! The operator's page for Node servers: one request through the core's one
//! handler (`operator::handle`: routes, the Host check, the token and CSRF
//! rules, the JSON, the metrics), off the JS thread (it lists the backend).
//! The `node:http` / Express handler is JavaScript (`lib/index.cjs`).

use crate::locks::NativeLocks;
use mistri_locks::operator::{self, OperatorOptions, OperatorRequest};
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

/// One request through the core's handler; resolves with an `OperatorAnswer`.
#[napi]
pub fn operator_handle<'env>(
    env: &'env Env,
    locks: &NativeLocks,
    request: OperatorRequestFields,
    options: OperatorOptionFields,
) -> Result<Object<'env>> {
    let locks = locks.inner.clone();
    let opts = OperatorOptions {
        prefix: options.prefix.unwrap_or_default(),
        allow_actions: options.allow_actions.unwrap_or(false),
        token: options.token,
        allowed_hosts: options.allowed_hosts.unwrap_or_default(),
        trust_forwarded: options.trust_forwarded.unwrap_or(false),
    };
    let body: Vec<u8> = request.body.map(|b| b.to_vec()).unwrap_or_default();
    crate::spawn_promise(env, move || {
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
        Ok(answer(operator::handle(&locks, &opts, &req)))
    })
}
