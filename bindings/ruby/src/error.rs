//! Core errors as Ruby exceptions, mapped in one place.
//!
//! | core                     | Ruby                           |
//! |--------------------------|--------------------------------|
//! | `InvalidArgument`        | `ArgumentError`                |
//! | `WrongType`              | `TypeError`                    |
//! | `Config`                 | `MistriLocks::ConfigError`     |
//! | `Connection`             | `MistriLocks::ConnectionError` |
//! | `Backend`                | `MistriLocks::BackendError`    |
//! | `System`                 | `MistriLocks::SystemResourceError` |
//! | (a future kind)          | `MistriLocks::Error`           |
//!
//! `SystemResourceError` is Python's name too.
//!
//! The classes are defined by `lib/mistri_locks/error.rb` (with their docs);
//! `init` looks them up (defining them if that file was skipped, with the
//! same superclasses, so `rb_define_class_under` finds the existing ones).

use magnus::{exception::ExceptionClass, prelude::*, value::Opaque, Error, RModule, Ruby};
use std::sync::OnceLock;

struct Classes {
    base: Opaque<ExceptionClass>,
    config: Opaque<ExceptionClass>,
    connection: Opaque<ExceptionClass>,
    backend: Opaque<ExceptionClass>,
    system: Opaque<ExceptionClass>,
}

static CLASSES: OnceLock<Classes> = OnceLock::new();

pub fn init(ruby: &Ruby, module: RModule) -> Result<(), Error> {
    // Kept in a static: pin them for the GC (compaction must not move them).
    let define = |name: &str, superclass: ExceptionClass| {
        let class = module.define_error(name, superclass)?;
        ruby.gc_register_mark_object(class);
        Ok::<_, Error>(class)
    };
    let base = define("Error", ruby.exception_standard_error())?;
    let classes = Classes {
        base: base.into(),
        config: define("ConfigError", base)?.into(),
        connection: define("ConnectionError", base)?.into(),
        backend: define("BackendError", base)?.into(),
        system: define("SystemResourceError", base)?.into(),
    };
    // A second load of the extension finds the same constants: keep the first.
    let _ = CLASSES.set(classes);
    Ok(())
}

/// `MistriLocks::Error`, for failures of the binding itself.
pub fn base(ruby: &Ruby, message: String) -> Error {
    match CLASSES.get() {
        Some(c) => Error::new(ruby.get_inner(c.base), message),
        None => Error::new(ruby.exception_runtime_error(), message),
    }
}

/// The one mapping from core errors to Ruby exceptions.
pub fn to_ruby(ruby: &Ruby, err: mistri_locks::Error) -> Error {
    use mistri_locks::Error as E;
    let Some(c) = CLASSES.get() else {
        return Error::new(ruby.exception_runtime_error(), err.to_string());
    };
    let (class, message) = match err {
        E::InvalidArgument(m) => (ruby.exception_arg_error(), m),
        E::WrongType(m) => (ruby.exception_type_error(), m),
        E::Config(m) => (ruby.get_inner(c.config), m),
        E::Connection(m) => (ruby.get_inner(c.connection), m),
        E::Backend(m) => (ruby.get_inner(c.backend), m),
        E::System(m) => (ruby.get_inner(c.system), m),
        // The core's enum is non_exhaustive: a kind added later still
        // arrives as a MistriLocks::Error with the core's full text.
        other => (ruby.get_inner(c.base), other.to_string()),
    };
    Error::new(class, message)
}
