//! `mistri_locks.Locks`, the owner handle, and its backends `Memory`, `Redis`, `Local` and
//! `Postgres`: the
//! seed's seven token-less operations, plus `hold`, `info`, `list`,
//! `active_holds` and `stats`.
//!
//! Every call converts its arguments first, then runs the core operation
//! with the GIL released when the backend does I/O (a Redis round trip, an
//! SQLite transaction must not stall other Python threads). Memory
//! operations are a few hundred nanoseconds under a mutex that no thread
//! holds across Python code, so they keep the GIL: releasing and retaking
//! it would cost more than the operation.

use crate::aio;
use crate::args::{Key, Limit, Seconds, Ttl, Wait};
use crate::error::IntoPyResult;
use crate::signal::PyAbortSignal;
use mistri_locks::{AcquireOptions, Family, Locks, OpenOptions, StopOutcome};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::PyClass;
use std::path::PathBuf;

/// An owner of leases on one backend (use `Memory()`, `Redis(...)`,
/// `Local(...)` or `Postgres(...)`).
#[pyclass(subclass, frozen, module = "mistri_locks", name = "Locks")]
pub(crate) struct PyLocks {
    locks: Locks,
    blocking: bool,
}

/// Applies a `label=` given to a constructor (None: the default).
fn labelled(py: Python<'_>, locks: Locks, label: Option<String>) -> PyResult<Locks> {
    locks.set_label(label.as_deref()).py_err(py)?;
    Ok(locks)
}

impl PyLocks {
    fn new(locks: Locks) -> Self {
        // A backend with an I/O bound does I/O: release the GIL for it.
        let blocking = !locks.adapter().io_timeout().is_zero();
        PyLocks { locks, blocking }
    }

    /// The core object. After `fork` the core itself reconnects, forgets
    /// the parent's issued leases and starts a fresh heartbeat engine.
    pub(crate) fn locks(&self) -> Locks {
        self.locks.clone()
    }

    /// Another owner on the same backend, as `new_owner` of subclass `S`.
    fn new_owner_as<S: PyClass<BaseType = PyLocks>>(
        &self,
        py: Python<'_>,
        sub: S,
    ) -> PyResult<Py<S>> {
        let base = PyLocks::new(self.locks.new_owner());
        Py::new(py, PyClassInitializer::from(base).add_subclass(sub))
    }

    /// Runs `op` GIL-free if it may block on I/O.
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        op: impl FnOnce(&Locks) -> mistri_locks::Result<T> + Send,
    ) -> PyResult<T> {
        // `self` is borrowed from a live Python object for the whole call:
        // no clone of the handle needed to leave the GIL.
        let locks = &self.locks;
        let result = if self.blocking {
            py.detach(|| op(locks))
        } else {
            op(locks)
        };
        result.py_err(py)
    }
}

#[pymethods]
impl PyLocks {
    /// This owner's counters as a dict (names and meanings:
    /// `mistri_locks::stats`, `events.rs`).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        crate::events::stats(py, &self.locks)
    }

    /// Registers `callback(event: dict)` for this owner's hold events;
    /// returns a handle for `remove_event_hook`.
    fn on_event(&self, py: Python<'_>, callback: Bound<'_, PyAny>) -> PyResult<u64> {
        crate::events::on_event(py, &self.locks, callback)
    }

    /// Removes an `on_event` callback; True if it was registered here.
    fn remove_event_hook(&self, handle: u64) -> bool {
        crate::events::remove_event_hook(&self.locks, handle)
    }

    /// The holder label this object's leases and holds store (default
    /// `host:pid python`); shown by `info()` and `mistri-locks status`.
    /// Set it to a string, or to None for the default.
    #[getter]
    fn label(&self) -> String {
        self.locks.label()
    }

    #[setter]
    fn set_label(&self, py: Python<'_>, label: Option<String>) -> PyResult<()> {
        labelled(py, self.locks(), label).map(drop)
    }

    /// Takes the lease on `key` for `ttl` seconds if no live lease exists.
    ///
    /// `wait` seconds (None: don't wait; 0: try once; math.inf: no limit):
    /// when the lease is held elsewhere, wait for its release or expiry;
    /// False at the end of the wait. GIL-free; Ctrl-C and `signal` (an
    /// AbortSignal: False once it trips) end the wait. `limit`: take one of
    /// `limit` slots of an N-holder lease.
    #[pyo3(signature = (key, ttl, wait = None, limit = Limit::ONE, signal = None))]
    fn acquire(
        &self,
        py: Python<'_>,
        key: Key<'_>,
        ttl: Seconds<Ttl>,
        wait: Option<Seconds<Wait>>,
        limit: Limit,
        signal: Option<PyRef<'_, PyAbortSignal>>,
    ) -> PyResult<bool> {
        let ttl = ttl.duration(py)?;
        let opts = AcquireOptions {
            wait: crate::args::wait(py, wait)?,
            limit: limit.0,
            signal: signal.as_ref().map(|s| s.core.clone()),
        };
        if opts.wait.is_none() {
            // One attempt: like the other operations (the exclusive lease
            // by the seed's `acquire`, exactly).
            return self.run(py, |l| match opts.limit {
                1 => l.acquire(&key, ttl),
                _ => l.acquire_with(&key, ttl, &opts),
            });
        }
        let waiting = self.locks.start_acquire(&key, ttl, &opts).py_err(py)?;
        let signals: Vec<_> = opts.signal.iter().collect();
        crate::waiting::drive(py, waiting, &signals, None, || false)
    }

    /// Extends this adapter's lease on `key` to `ttl` seconds from now.
    /// False if it holds none (never acquired, released, or expired and
    /// retaken).
    fn renew(&self, py: Python<'_>, key: Key<'_>, ttl: Seconds<Ttl>) -> PyResult<bool> {
        let ttl = ttl.duration(py)?;
        self.run(py, |l| l.renew(&key, ttl))
    }

    /// Deletes this adapter's lease on `key`. False if it holds none.
    fn release(&self, py: Python<'_>, key: Key<'_>) -> PyResult<bool> {
        self.run(py, |l| l.release(&key))
    }

    /// Is a live lease on `key` (anyone's)?
    fn held(&self, py: Python<'_>, key: Key<'_>) -> PyResult<bool> {
        self.run(py, |l| l.held(&key))
    }

    /// Who holds `key` (label, fence, times, ttl, heartbeat, time left), as
    /// a dict; None when no live lease is there.
    fn info<'py>(&self, py: Python<'py>, key: Key<'_>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let found = self.run(py, |l| l.info(&key))?;
        found.map(|i| crate::info::to_dict(py, &i)).transpose()
    }

    /// The live leases and raised flags whose keys start with `prefix`
    /// (`""`: every one in this namespace or file), as a dict
    /// `{"leases": [...], "flags": [...]}`, each list sorted by key: a
    /// lease as `info()` describes it, a flag as `{"key", "time_left"}`.
    /// What `mistri-locks list` shows. GIL-free on Redis and Local.
    #[pyo3(signature = (prefix = ""))]
    fn list<'py>(&self, py: Python<'py>, prefix: &str) -> PyResult<Bound<'py, PyDict>> {
        let listing = self.run(py, |l| l.list(prefix))?;
        crate::info::listing_dict(py, &listing)
    }

    /// How many holds this object's heartbeat is renewing now (a released
    /// or lost hold no longer counts).
    fn active_holds(&self) -> usize {
        self.locks.active_holds()
    }

    /// Raises the flag `key` for `ttl` seconds.
    #[pyo3(signature = (key, ttl = Seconds::<Ttl>::FLAG_TTL))]
    fn set_flag(&self, py: Python<'_>, key: Key<'_>, ttl: Seconds<Ttl>) -> PyResult<()> {
        let ttl = ttl.duration(py)?;
        self.run(py, |l| l.set_flag(&key, ttl))
    }

    /// Stops whoever holds `key`: raises, for `ttl` seconds, the stop flag
    /// each holder watches (each once). Returns the stop keys raised, in
    /// the order of the holders (`[]` when nobody holds `key` or no holder
    /// watches a stop key: a plain lease can only be broken). The core's
    /// `Locks::stop_holders`.
    #[pyo3(signature = (key, ttl = Seconds::<Ttl>::FLAG_TTL))]
    fn stop_holders(
        &self,
        py: Python<'_>,
        key: Key<'_>,
        ttl: Seconds<Ttl>,
    ) -> PyResult<Vec<String>> {
        let ttl = ttl.duration(py)?;
        Ok(match self.run(py, |l| l.stop_holders(&key, ttl))? {
            StopOutcome::Raised(keys) => keys,
            _ => Vec::new(),
        })
    }

    /// Raises the stop flag of job `job_id` (`job_stop_key(job_id)`) for
    /// `ttl` seconds. Returns the stop key. The core's `Locks::stop_job`.
    #[pyo3(signature = (job_id, ttl = Seconds::<Ttl>::FLAG_TTL))]
    fn stop_job(&self, py: Python<'_>, job_id: Key<'_>, ttl: Seconds<Ttl>) -> PyResult<String> {
        let ttl = ttl.duration(py)?;
        self.run(py, |l| l.stop_job(&job_id, ttl))
    }

    /// Is the flag `key` up?
    fn flag(&self, py: Python<'_>, key: Key<'_>) -> PyResult<bool> {
        self.run(py, |l| l.flag(&key))
    }

    /// Lowers the flag `key` (no error if it was down).
    fn clear_flag(&self, py: Python<'_>, key: Key<'_>) -> PyResult<()> {
        self.run(py, |l| l.clear_flag(&key))
    }

    /// The fencing number of this adapter's lease on `key`, if it has one.
    fn fence(&self, key: Key<'_>) -> Option<u64> {
        self.locks.fence(&key)
    }

    /// Operator override: deletes whatever lease is on `key`; its holder's
    /// hold becomes lost at its next renewal. Returns whether there was one.
    fn break_lease(&self, py: Python<'_>, key: Key<'_>) -> PyResult<bool> {
        self.run(py, |l| l.break_lease(&key))
    }

    /// Acquires `key` and keeps it renewed until the Hold is released.
    /// None when the lease is held elsewhere (at the end of `wait`, if
    /// given). The arguments are those of `mistri_locks.hold`.
    #[pyo3(signature = (key, *args, **kwargs))]
    fn hold<'py>(
        slf: &Bound<'py, Self>,
        key: Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::args::forward_hold(slf.py(), Some(slf.as_any()), key, args, kwargs)
    }

    // asyncio (see `aio.rs`): coroutines that run the call off the loop.

    /// `acquire` as a coroutine (same arguments); a lease taken after the
    /// awaiting task was cancelled is released again, and a cancelled task
    /// leaves the line of a waiting acquire at once.
    #[pyo3(signature = (key, ttl, wait = None, limit = None, signal = None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        key: Bound<'py, PyAny>,
        ttl: Bound<'py, PyAny>,
        wait: Option<Bound<'py, PyAny>>,
        limit: Option<Bound<'py, PyAny>>,
        signal: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio::call(
            slf.py(),
            "acquire",
            (slf, key, ttl, wait, limit, signal),
            None,
        )
    }

    /// `renew` as a coroutine.
    fn renew_async<'py>(
        slf: &Bound<'py, Self>,
        key: Bound<'py, PyAny>,
        ttl: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio::call(
            slf.py(),
            "operation",
            (slf.getattr("renew")?, key, ttl),
            None,
        )
    }

    /// `release` as a coroutine.
    fn release_async<'py>(
        slf: &Bound<'py, Self>,
        key: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio::call(slf.py(), "operation", (slf.getattr("release")?, key), None)
    }

    /// `held` as a coroutine.
    fn held_async<'py>(
        slf: &Bound<'py, Self>,
        key: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio::call(slf.py(), "operation", (slf.getattr("held")?, key), None)
    }

    /// `set_flag` as a coroutine.
    #[pyo3(signature = (key, ttl = None))]
    fn set_flag_async<'py>(
        slf: &Bound<'py, Self>,
        key: Bound<'py, PyAny>,
        ttl: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let set_flag = slf.getattr("set_flag")?;
        match ttl {
            None => aio::call(slf.py(), "operation", (set_flag, key), None),
            Some(ttl) => aio::call(slf.py(), "operation", (set_flag, key, ttl), None),
        }
    }

    /// `flag` as a coroutine.
    fn flag_async<'py>(
        slf: &Bound<'py, Self>,
        key: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio::call(slf.py(), "operation", (slf.getattr("flag")?, key), None)
    }

    /// `clear_flag` as a coroutine.
    fn clear_flag_async<'py>(
        slf: &Bound<'py, Self>,
        key: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio::call(
            slf.py(),
            "operation",
            (slf.getattr("clear_flag")?, key),
            None,
        )
    }

    /// `hold` for asyncio, same arguments: a `HoldContext` to await (for
    /// the Hold, or None) or to use with `async with`.
    #[pyo3(signature = (*args, **kwargs))]
    fn hold_async<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio::call(slf.py(), "hold_context", (slf, args, kwargs), None)
    }
}

/// Leases and flags in this process only (threads), with real TTLs.
#[pyclass(extends = PyLocks, frozen, module = "mistri_locks")]
pub(crate) struct Memory;

#[pymethods]
impl Memory {
    #[new]
    #[pyo3(signature = (label = None))]
    fn new(py: Python<'_>, label: Option<String>) -> PyResult<PyClassInitializer<Self>> {
        let locks = labelled(py, Locks::memory(), label)?;
        Ok(PyClassInitializer::from(PyLocks::new(locks)).add_subclass(Memory))
    }

    /// Another owner on the same in-process store: its own leases and
    /// heartbeat. Two of these behave like two processes.
    fn new_owner(slf: PyRef<'_, Self>) -> PyResult<Py<Memory>> {
        slf.as_super().new_owner_as(slf.py(), Memory)
    }

    fn __repr__(&self) -> &'static str {
        "<mistri_locks.Memory>"
    }
}

/// Leases and flags on a Redis server, shared by every process (and
/// language) that speaks the protocol. Connects lazily: an unreachable
/// server is reported by the first operation. Another backend's URL is a
/// `ConfigError` (`mistri_locks.open` takes every backend).
#[pyclass(extends = PyLocks, frozen, module = "mistri_locks")]
pub(crate) struct Redis {
    namespace: String,
}

#[pymethods]
impl Redis {
    #[new]
    #[pyo3(signature = (url = String::from(mistri_locks::DEFAULT_URL), namespace = String::from(mistri_locks::DEFAULT_NAMESPACE), label = None))]
    fn new(
        py: Python<'_>,
        url: String,
        namespace: String,
        label: Option<String>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let locks = labelled(py, Locks::redis(&url, &namespace).py_err(py)?, label)?;
        Ok(PyClassInitializer::from(PyLocks::new(locks)).add_subclass(Redis { namespace }))
    }

    /// Another owner on the same server and connection pool: its own
    /// leases and heartbeat. Two of these behave like two processes.
    fn new_owner(slf: PyRef<'_, Self>) -> PyResult<Py<Redis>> {
        let namespace = slf.namespace.clone();
        slf.as_super().new_owner_as(slf.py(), Redis { namespace })
    }

    /// The key namespace.
    #[getter]
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn __repr__(&self) -> String {
        // Never the URL: it may carry a password.
        format!("<mistri_locks.Redis namespace={:?}>", self.namespace)
    }
}

/// Leases and flags shared by every process on this host, with no server:
/// an SQLite file (default: a per-user file chosen by the core).
#[pyclass(extends = PyLocks, frozen, module = "mistri_locks")]
pub(crate) struct Local {
    path: PathBuf,
}

#[pymethods]
impl Local {
    #[new]
    #[pyo3(signature = (path = None, label = None))]
    fn new(
        py: Python<'_>,
        path: Option<PathBuf>,
        label: Option<String>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let locks = py.detach(|| Locks::local(path.as_deref())).py_err(py)?;
        let locks = labelled(py, locks, label)?;
        let path = path.unwrap_or_else(mistri_locks::local_default_path);
        Ok(PyClassInitializer::from(PyLocks::new(locks)).add_subclass(Local { path }))
    }

    /// Another owner on the same database file: its own leases and
    /// heartbeat. Two of these behave like two processes.
    fn new_owner(slf: PyRef<'_, Self>) -> PyResult<Py<Local>> {
        let path = slf.path.clone();
        slf.as_super().new_owner_as(slf.py(), Local { path })
    }

    /// The database file.
    #[getter]
    fn path(&self) -> &std::path::Path {
        &self.path
    }

    fn __repr__(&self) -> String {
        format!("<mistri_locks.Local path={:?}>", self.path)
    }
}

/// Leases and flags in a PostgreSQL database, shared by every process (and
/// language) that speaks the protocol: rows judged by the database's
/// clock, one statement or one short transaction per operation (so
/// PgBouncer in transaction mode works too), LISTEN/NOTIFY where the
/// connection allows it.
///
/// `url`: `postgres://` or `postgresql://` with libpq's conventions
/// (`postgres://user:pass@host:5432/dbname?sslmode=require`, a unix socket
/// with `?host=/run/postgresql`) or a libpq key/value DSN. `schema`: where
/// the tables live (default `mistri_locks`, created on first use); give it
/// here or as `?schema=` in the URL, not both (a `ValueError`). An
/// unparsable URL or another backend's is a `ConfigError`
/// (`mistri_locks.open` takes every backend). `Postgres.schema_sql()` returns the DDL for a role that
/// may not run it (e.g. in a Django migration's `RunSQL`).
#[pyclass(extends = PyLocks, frozen, module = "mistri_locks")]
pub(crate) struct Postgres {
    namespace: String,
}

#[pymethods]
impl Postgres {
    #[new]
    #[pyo3(signature = (url, *, schema = None, namespace = String::from(mistri_locks::DEFAULT_NAMESPACE), label = None))]
    fn new(
        py: Python<'_>,
        url: String,
        schema: Option<String>,
        namespace: String,
        label: Option<String>,
    ) -> PyResult<PyClassInitializer<Self>> {
        // Another backend's URL: name ours and point to open().
        mistri_locks::check_family(&url, Family::Postgres).py_err(py)?;
        let options = open_options(&namespace, label, schema);
        let locks = py.detach(|| Locks::open_with(&url, &options)).py_err(py)?;
        Ok(PyClassInitializer::from(PyLocks::new(locks)).add_subclass(Postgres { namespace }))
    }

    /// The DDL that creates (or, run again, leaves as it is) the tables and
    /// the `fence_check` function in `schema`: for teams whose application
    /// role may not run DDL (`mistri-locks schema` prints the same).
    #[staticmethod]
    #[pyo3(signature = (schema = String::from("mistri_locks")), text_signature = "(schema='mistri_locks')")]
    fn schema_sql(py: Python<'_>, schema: String) -> PyResult<String> {
        mistri_locks::Postgres::schema_sql(&schema).py_err(py)
    }

    /// Another owner on the same database and connections: its own leases
    /// and heartbeat. Two of these behave like two processes.
    fn new_owner(slf: PyRef<'_, Self>) -> PyResult<Py<Postgres>> {
        let namespace = slf.namespace.clone();
        slf.as_super()
            .new_owner_as(slf.py(), Postgres { namespace })
    }

    /// The key namespace.
    #[getter]
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn __repr__(&self) -> String {
        // Never the URL: it may carry a password.
        format!("<mistri_locks.Postgres namespace={:?}>", self.namespace)
    }
}

/// `postgres_url(**parts)`: the `postgres://` URL of a database's typed
/// connection parts (`host`, `port`, `database`, `user`, `password`,
/// `sslmode`, `application_name`; see the core's `ConnectionParts`), every
/// part percent-encoded and an IPv6 host bracketed. None or `""` leaves a
/// part unset. An unknown part or a bad port is a ValueError.
#[pyfunction]
#[pyo3(signature = (**parts))]
pub(crate) fn postgres_url(py: Python<'_>, parts: Option<&Bound<'_, PyDict>>) -> PyResult<String> {
    Ok(connection_parts(py, parts)?.postgres_url())
}

/// `mysql_url(**parts)`: the `mysql://` URL of a database's typed
/// connection parts (`host`, default 127.0.0.1; `port`; `database`;
/// `user`; `password`; `tls_mode`/`sslmode` as `ssl-mode`), built by the
/// core as [`postgres_url`] is. A unix socket host, an `application_name`
/// or an unknown TLS mode is a ValueError.
#[pyfunction]
#[pyo3(signature = (**parts))]
pub(crate) fn mysql_url(py: Python<'_>, parts: Option<&Bound<'_, PyDict>>) -> PyResult<String> {
    connection_parts(py, parts)?.mysql_url().py_err(py)
}

/// The core's typed connection parts from a face's keyword arguments.
fn connection_parts(
    py: Python<'_>,
    parts: Option<&Bound<'_, PyDict>>,
) -> PyResult<mistri_locks::ConnectionParts> {
    let mut out = mistri_locks::ConnectionParts::new();
    for (name, value) in parts.into_iter().flatten() {
        let name: String = name.extract()?;
        let value = crate::args::option_value(&name, &value)?;
        out.set(&name, value)
            .map_err(|e| crate::error::map_error(py, e))?;
    }
    Ok(out)
}

/// The core's options from a face's keyword arguments.
fn open_options(namespace: &str, label: Option<String>, schema: Option<String>) -> OpenOptions {
    let mut options = OpenOptions::new().namespace(namespace);
    options.label = label;
    options.schema = schema;
    options
}

/// The one entry point: the backend `url` names, any of them (`memory://`,
/// a Local path or `file://PATH`, `redis://`, `rediss://`,
/// `redis+cluster://`, `redis+sentinel://`, `postgres://`,
/// `postgresql://`, a libpq key/value DSN), as that backend's class
/// (`Memory`, `Local`, `Redis`, `Postgres`). `namespace` is for Redis and
/// Postgres; `schema` for Postgres only (another backend's is a
/// `ConfigError`). An unknown scheme is a `ConfigError` listing them all.
#[pyfunction]
#[pyo3(signature = (url, *, namespace = String::from(mistri_locks::DEFAULT_NAMESPACE), label = None, schema = None))]
pub(crate) fn open(
    py: Python<'_>,
    url: String,
    namespace: String,
    label: Option<String>,
    schema: Option<String>,
) -> PyResult<Py<PyAny>> {
    let options = open_options(&namespace, label, schema);
    let (family, locks) = py.detach(|| Locks::open_as(&url, &options)).py_err(py)?;
    let base = PyClassInitializer::from(PyLocks::new(locks));
    // A family's class by its name; a family this face does not know yet
    // opens as the generic `Locks` (every operation works on it).
    Ok(match family.name() {
        "memory" => Py::new(py, base.add_subclass(Memory))?.into_any(),
        "local" => {
            let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
            let path = if rest.is_empty() {
                mistri_locks::local_default_path()
            } else {
                PathBuf::from(rest)
            };
            Py::new(py, base.add_subclass(Local { path }))?.into_any()
        }
        "redis" => Py::new(py, base.add_subclass(Redis { namespace }))?.into_any(),
        "postgres" => Py::new(py, base.add_subclass(Postgres { namespace }))?.into_any(),
        _ => Py::new(py, base)?.into_any(),
    })
}
