//! `MistriLocks::Postgres`: leases and flags in a PostgreSQL database (the
//! core's Postgres adapter), shared with every process (Ruby, Python, C,
//! Rust) speaking the project's protocol.
//!
//! `lib/mistri_locks/postgres.rb` defines `Postgres.new(url:, schema:,
//! namespace:)`, `from_active_record` and `schema_sql` (the Ruby idiom:
//! keywords, the schema a typed option, the URL built from an
//! ActiveRecord database config); they call `_open` and `_schema_sql`.
//! Opening may talk to the server, so it runs without the GVL.

use crate::error;
use crate::locks::RbLocks;
use crate::nogvl::nogvl;
use magnus::r_hash::ForEach;
use magnus::{
    method, prelude::*, typed_data::Obj, Error, RClass, RHash, RModule, RString, Ruby, Value,
};
use mistri_locks::{Family, Locks, OpenOptions};

/// `MistriLocks::Postgres._open(url, namespace, schema)`: refuses another
/// backend's URL (naming ours, pointing to `MistriLocks.open`); the schema
/// goes as a typed option, never into the URL.
fn open(
    ruby: &Ruby,
    class: RClass,
    url: RString,
    namespace: RString,
    schema: Option<RString>,
) -> Result<Obj<RbLocks>, Error> {
    let url = url.to_string()?;
    let mut options = OpenOptions::new().namespace(namespace.to_string()?);
    options.schema = schema.map(|s| s.to_string()).transpose()?;
    mistri_locks::check_family(&url, Family::Postgres).map_err(|e| error::to_ruby(ruby, e))?;
    let locks =
        nogvl(ruby, || Locks::open_with(&url, &options))?.map_err(|e| error::to_ruby(ruby, e))?;
    Ok(ruby.obj_wrap_as(RbLocks::new(locks), class))
}

/// `MistriLocks::Postgres._url_of(parts)`: the core's `postgres://` URL of
/// a Hash of typed connection parts (`host`, `port`, `database`, `user`,
/// `password`, `sslmode`, `application_name`): every part percent-encoded,
/// an IPv6 host bracketed. nil or "" leaves a part unset; an unknown part
/// or a bad port is an ArgumentError.
fn url_of(ruby: &Ruby, _class: RClass, parts: RHash) -> Result<String, Error> {
    Ok(connection_parts(ruby, parts)?.postgres_url())
}

/// The core's typed connection parts from a Hash of them (nil or "" leaves
/// a part unset; an unknown part or a bad port is an ArgumentError).
pub(crate) fn connection_parts(
    ruby: &Ruby,
    parts: RHash,
) -> Result<mistri_locks::ConnectionParts, Error> {
    let mut out = mistri_locks::ConnectionParts::new();
    let mut failed = None;
    parts.foreach(|name: Value, value: Value| {
        let name = crate::args::key(ruby, "a connection part's name", name)?;
        let value = crate::args::option_value(ruby, &name, value)?;
        if let Err(e) = out.set(&name, value) {
            failed = Some(e);
            return Ok(ForEach::Stop);
        }
        Ok(ForEach::Continue)
    })?;
    match failed {
        Some(e) => Err(error::to_ruby(ruby, e)),
        None => Ok(out),
    }
}

/// `MistriLocks::Postgres._schema_sql(schema)`: the core's DDL.
fn schema_sql(ruby: &Ruby, _class: RClass, schema: RString) -> Result<String, Error> {
    mistri_locks::Postgres::schema_sql(&schema.to_string()?).map_err(|e| error::to_ruby(ruby, e))
}

pub fn init(_ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let base: RClass = module.const_get("Locks")?;
    let class = module.define_class("Postgres", base)?;
    class.define_singleton_method("_open", method!(open, 3))?;
    class.define_singleton_method("_schema_sql", method!(schema_sql, 1))?;
    class.define_singleton_method("_url_of", method!(url_of, 1))?;
    Ok(())
}
