//! `MistriLocks.open(url, namespace:, label:, schema:)`: the one entry
//! point, any URL of the core's one scheme table, wrapped as that
//! backend's class (`Memory`, `Local`, `Redis`, `Postgres`).
//! `lib/mistri_locks/locks.rb` defines the keywords; it calls `_open`.
//! Opening may talk to the server, so it runs without the GVL.

use crate::error;
use crate::locks::RbLocks;
use crate::nogvl::nogvl;
use magnus::{function, prelude::*, typed_data::Obj, Error, RClass, RHash, RModule, RString, Ruby};
use mistri_locks::{Locks, OpenOptions};

/// `MistriLocks._open(url, namespace, label, schema)`.
fn open(
    ruby: &Ruby,
    url: RString,
    namespace: RString,
    label: Option<RString>,
    schema: Option<RString>,
) -> Result<Obj<RbLocks>, Error> {
    let url = url.to_string()?;
    let mut options = OpenOptions::new().namespace(namespace.to_string()?);
    options.label = label.map(|l| l.to_string()).transpose()?;
    options.schema = schema.map(|s| s.to_string()).transpose()?;
    let (family, locks) =
        nogvl(ruby, || Locks::open_as(&url, &options))?.map_err(|e| error::to_ruby(ruby, e))?;
    let module: RModule = ruby.class_object().const_get("MistriLocks")?;
    let class: RClass = module.const_get(class_of(family.name()))?;
    Ok(ruby.obj_wrap_as(RbLocks::new(locks), class))
}

/// Each family's class by the family's name. A family this face does not
/// know yet opens as the generic `MistriLocks::Locks`.
const CLASSES: &[(&str, &str)] = &[
    ("memory", "Memory"),
    ("local", "Local"),
    ("redis", "Redis"),
    ("postgres", "Postgres"),
];

fn class_of(family: &str) -> &'static str {
    CLASSES
        .iter()
        .find(|(name, _)| *name == family)
        .map_or("Locks", |(_, class)| class)
}

/// `MistriLocks._mysql_url_of(parts)`: the core's `mysql://` URL of a Hash
/// of typed connection parts (`host`, `port`, `database`, `user`,
/// `password`, `tls_mode`/`sslmode`): every part percent-encoded, an IPv6
/// host bracketed. A unix socket host, an `application_name` or an unknown
/// TLS mode is an ArgumentError.
fn mysql_url_of(ruby: &Ruby, parts: RHash) -> Result<String, Error> {
    crate::postgres::connection_parts(ruby, parts)?
        .mysql_url()
        .map_err(|e| error::to_ruby(ruby, e))
}

pub fn init(_ruby: &Ruby, module: RModule) -> Result<(), Error> {
    module.define_singleton_method("_open", function!(open, 4))?;
    module.define_singleton_method("_mysql_url_of", function!(mysql_url_of, 1))?;
    Ok(())
}
