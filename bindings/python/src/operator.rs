//! The operator's interface for Python hosts (`mistri_locks.integrations.web`,
//! `mistri_locks.metrics`): the core's `operator::handle` and
//! `operator::stats_prometheus`, called without the GIL (a request lists
//! the backend). The WSGI app and the collector are Python, in
//! `python/mistri_locks/integrations/web.py` and `python/mistri_locks/metrics.py`.

use crate::locks::PyLocks;
use mistri_locks::operator::{self, OperatorOptions, OperatorRequestFields};
use mistri_locks::OptionValue;
use pyo3::conversion::FromPyObjectOwned;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// `(status, [(header, value)], body)`.
type Answer = (u16, Vec<(String, String)>, Vec<u8>);

/// The interface's options, by name, through the core's one parser (its
/// rules: the token's length, actions need a token or `authorize`).
fn operator_options(py: Python<'_>, options: &Bound<'_, PyDict>) -> PyResult<OperatorOptions> {
    let mut builder = OperatorOptions::builder();
    for (key, value) in options.iter() {
        let name: String = key
            .extract()
            .map_err(|_| PyTypeError::new_err("_operator_options: option keys must be str"))?;
        // A name the core does not know (None sets nothing else).
        builder
            .set(&name, OptionValue::None)
            .map_err(|e| PyTypeError::new_err(format!("_operator_options: {}", e.message())))?;
        if name == "allowed_hosts" {
            for host in
                field::<Vec<String>>("_operator_options", options, &name)?.unwrap_or_default()
            {
                builder
                    .set(&name, OptionValue::Text(host))
                    .map_err(|e| crate::error::map_error(py, e))?;
            }
            continue;
        }
        let value = crate::args::option_value(&name, &value)?;
        builder
            .set(&name, value)
            .map_err(|e| crate::error::map_error(py, e))?;
    }
    builder.build().map_err(|e| crate::error::map_error(py, e))
}

/// The interface's options, built once by the core's parser when the app
/// is made (`_operator_options`) and held by it: a request passes only its
/// own fields.
#[pyclass(frozen, module = "mistri_locks", name = "_OperatorOptions")]
pub struct PyOperatorOptions {
    opts: OperatorOptions,
}

#[pymethods]
impl PyOperatorOptions {
    /// Whether Stop, Clear and Break are enabled (`allow_actions` defaults
    /// to "a token or `authorize` was given").
    #[getter]
    fn allow_actions(&self) -> bool {
        self.opts.allow_actions
    }
}

/// `_operator_options(options)`: the options checked by the core's rules
/// and built, at construction (`prefix`, `allow_actions`, `token`,
/// `authorize`: bool, `allowed_hosts`: a list of str, `trust_forwarded`).
#[pyfunction]
pub fn _operator_options(
    py: Python<'_>,
    options: &Bound<'_, PyDict>,
) -> PyResult<PyOperatorOptions> {
    Ok(PyOperatorOptions {
        opts: operator_options(py, options)?,
    })
}

/// `dict[name]` as `T`, `None` when absent or None; a wrong type names the field.
fn field<'py, T: FromPyObjectOwned<'py>>(
    function: &str,
    dict: &Bound<'py, PyDict>,
    name: &str,
) -> PyResult<Option<T>> {
    match dict.get_item(name)? {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => v.extract::<T>().map(Some).map_err(|_| {
            PyTypeError::new_err(format!(
                "{function}: {name} has the wrong type ({})",
                crate::args::type_name(&v)
            ))
        }),
    }
}

/// One request through the shared HTTP interface: `request` holds the
/// request's fields by name (`method`, `path`, `query`, `mount`, `scheme`,
/// `host`, `forwarded_proto`, `forwarded_host`, `origin`,
/// `authorization`, `csrf`, `cookie`: str or None; `body`: bytes;
/// `host_authorized`: bool or None), `options` the app's
/// `_operator_options(…)`. Returns `(status, [(header, value)], body)`.
#[pyfunction]
pub fn _operator_handle(
    py: Python<'_>,
    locks: &Bound<'_, PyLocks>,
    request: &Bound<'_, PyDict>,
    options: &Bound<'_, PyOperatorOptions>,
) -> PyResult<Answer> {
    let opts = &options.get().opts;
    let mut fields = OperatorRequestFields::default();
    for (key, value) in request.iter() {
        let name: String = key
            .extract()
            .map_err(|_| PyTypeError::new_err("_operator_handle: request keys must be str"))?;
        // A name the core does not know (None sets nothing).
        fields
            .set(&name, OptionValue::None)
            .map_err(|e| PyTypeError::new_err(format!("_operator_handle: {}", e.message())))?;
        if name == "body" {
            if !value.is_none() {
                let bytes = value
                    .cast::<PyBytes>()
                    .map_err(|_| PyTypeError::new_err("_operator_handle: body must be bytes"))?;
                fields.set_body(bytes.as_bytes().to_vec());
            }
            continue;
        }
        let value = if name == "host_authorized" {
            field::<bool>("_operator_handle", request, &name)?
                .map_or(OptionValue::None, OptionValue::Bool)
        } else {
            field::<String>("_operator_handle", request, &name)?
                .map_or(OptionValue::None, OptionValue::Text)
        };
        fields
            .set(&name, value)
            .map_err(|e| crate::error::map_error(py, e))?;
    }
    let locks = locks.get().locks();
    let r = py.detach(|| operator::handle(&locks, opts, &fields.request()));
    Ok((r.status, r.headers, r.body))
}

/// This handle's counters as Prometheus text.
#[pyfunction]
pub fn _stats_prometheus(locks: &Bound<'_, PyLocks>) -> String {
    operator::stats_prometheus(&locks.get().locks().stats())
}

/// The largest action body the interface reads.
pub const MAX_BODY: usize = operator::MAX_BODY;
