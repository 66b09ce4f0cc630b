//! The operator's interface for Ruby hosts (`MistriLocks::Web`,
//! `MistriLocks::Metrics`): private `Locks#_operator_handle` (the core's
//! `operator::handle`, run without the GVL: a request lists the backend)
//! and `Locks#_stats_prometheus`. The Rack app is Ruby, in
//! `lib/mistri_locks/integrations/web.rb`.

use crate::locks::RbLocks;
use crate::nogvl::nogvl;
use magnus::r_hash::ForEach;
use magnus::{method, prelude::*, Error, RArray, RHash, RModule, RString, Ruby, Symbol, Value};
use mistri_locks::operator::{self, OperatorOptions, OperatorRequestFields};
use mistri_locks::OptionValue;
use std::sync::Arc;

fn text(v: Value) -> Result<Option<String>, Error> {
    if v.is_nil() {
        return Ok(None);
    }
    let s = RString::try_convert(v)?;
    // SAFETY: the bytes are copied before any other Ruby code can run.
    let bytes = unsafe { s.as_slice() }.to_vec();
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// The entries of `hash`, whose keys must be Symbols, by name.
fn entries(ruby: &Ruby, what: &str, hash: RHash) -> Result<Vec<(String, Value)>, Error> {
    let mut raw = Vec::new();
    hash.foreach(|key: Value, value: Value| {
        raw.push((key, value));
        Ok(ForEach::Continue)
    })?;
    let mut out = Vec::with_capacity(raw.len());
    for (key, value) in raw {
        let name = Symbol::from_value(key)
            .ok_or_else(|| {
                Error::new(
                    ruby.exception_type_error(),
                    format!("{what} keys must be Symbols"),
                )
            })?
            .name()?
            .into_owned();
        out.push((name, value));
    }
    Ok(out)
}

/// A name the core does not know, as Ruby spells it (`:name`).
fn unknown(ruby: &Ruby, function: &str, name: &str, e: &mistri_locks::Error) -> Error {
    let message = e
        .message()
        .replacen(&format!("{name:?}"), &format!(":{name}"), 1);
    Error::new(ruby.exception_arg_error(), format!("{function}: {message}"))
}

/// The interface's options, by name, through the core's one parser (its
/// rules: the token's length, actions need a token or `authorize`).
fn operator_options(ruby: &Ruby, options: RHash) -> Result<OperatorOptions, Error> {
    let mut builder = OperatorOptions::builder();
    for (name, value) in entries(ruby, "_operator_options: option", options)? {
        // A name the core does not know (None sets nothing else).
        builder
            .set(&name, OptionValue::None)
            .map_err(|e| unknown(ruby, "_operator_options", &name, &e))?;
        if name == "allowed_hosts" && !value.is_nil() {
            let list = RArray::from_value(value).ok_or_else(|| {
                Error::new(
                    ruby.exception_type_error(),
                    "_operator_options: allowed_hosts must be an Array of Strings",
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
        let value = crate::args::option_value(ruby, &name, value)?;
        builder
            .set(&name, value)
            .map_err(|e| crate::error::to_ruby(ruby, e))?;
    }
    builder.build().map_err(|e| crate::error::to_ruby(ruby, e))
}

/// The interface's options, built once by the core's parser when the app
/// is made (`Locks#_operator_options`) and held by it: a request passes
/// only its own fields.
#[magnus::wrap(class = "MistriLocks::OperatorOptions", free_immediately, size)]
pub struct RbOperatorOptions(Arc<OperatorOptions>);

impl RbOperatorOptions {
    /// Whether Stop, Clear and Break are enabled (`allow_actions` defaults
    /// to "a token or `authorize` was given").
    fn allow_actions(&self) -> bool {
        self.0.allow_actions
    }
}

/// `_operator_options(options)` -> MistriLocks::OperatorOptions: the
/// options (`:prefix, :allow_actions, :token, :authorize, :allowed_hosts`
/// (an Array of Strings), `:trust_forwarded`) checked by the core's rules
/// and built, at construction.
fn build_options(
    ruby: &Ruby,
    _rb_self: &RbLocks,
    options: RHash,
) -> Result<RbOperatorOptions, Error> {
    Ok(RbOperatorOptions(Arc::new(operator_options(
        ruby, options,
    )?)))
}

/// `_operator_handle(request, options)`: `request` holds the request's
/// fields by name (`:method, :path, :query, :mount, :scheme, :host,
/// :forwarded_proto, :forwarded_host, :origin, :authorization, :csrf,
/// :cookie, :body` (Strings or nil), `:host_authorized` (true, false or
/// nil)), `options` the app's `_operator_options(…)`. Returns
/// `[status, [[name, value], …], body]`.
fn handle(
    ruby: &Ruby,
    rb_self: &RbLocks,
    request: RHash,
    options: &RbOperatorOptions,
) -> Result<RArray, Error> {
    let opts = Arc::clone(&options.0);
    let mut fields = OperatorRequestFields::default();
    for (name, value) in entries(ruby, "_operator_handle: request", request)? {
        // A name the core does not know (None sets nothing).
        fields
            .set(&name, OptionValue::None)
            .map_err(|e| unknown(ruby, "_operator_handle", &name, &e))?;
        if value.is_nil() {
            continue;
        }
        match name.as_str() {
            "body" => {
                let b = RString::try_convert(value)?;
                // SAFETY: copied at once, before any other Ruby code can run.
                fields.set_body(unsafe { b.as_slice() }.to_vec());
            }
            "host_authorized" => {
                fields
                    .set(&name, OptionValue::Bool(value.to_bool()))
                    .map_err(|e| crate::error::to_ruby(ruby, e))?;
            }
            _ => {
                let t = text(value)?.map_or(OptionValue::None, OptionValue::Text);
                fields
                    .set(&name, t)
                    .map_err(|e| crate::error::to_ruby(ruby, e))?;
            }
        }
    }
    let locks = rb_self.locks().clone();
    let response = nogvl(ruby, move || {
        operator::handle(&locks, &opts, &fields.request())
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
    class.define_private_method("_operator_options", method!(build_options, 1))?;
    class.define_private_method("_stats_prometheus", method!(stats_prometheus, 0))?;
    module.const_set("OPERATOR_MAX_BODY", operator::MAX_BODY)?;
    let options = module.define_class("OperatorOptions", ruby.class_object())?;
    options.undef_default_alloc_func();
    options.define_method(
        "allow_actions?",
        method!(RbOperatorOptions::allow_actions, 0),
    )?;
    Ok(())
}
