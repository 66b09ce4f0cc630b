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
use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RModule, RString, Ruby};
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

/// `MistriLocks::Postgres._schema_sql(schema)`: the core's DDL.
fn schema_sql(ruby: &Ruby, _class: RClass, schema: RString) -> Result<String, Error> {
    mistri_locks::Postgres::schema_sql(&schema.to_string()?).map_err(|e| error::to_ruby(ruby, e))
}

pub fn init(_ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let base: RClass = module.const_get("Locks")?;
    let class = module.define_class("Postgres", base)?;
    class.define_singleton_method("_open", method!(open, 3))?;
    class.define_singleton_method("_schema_sql", method!(schema_sql, 1))?;
    Ok(())
}
