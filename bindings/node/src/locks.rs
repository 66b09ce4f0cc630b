//! `NativeLocks`: one backend handle, every call that may touch the backend
//! off the JS thread (a promise); counters and names read in place.

use crate::convert::{self, Opt};
use crate::hold::NativeSignal;
use crate::{js_error, spawn_promise};
use mistri_locks::{args::duration_from_secs, Locks};
use napi::bindgen_prelude::*;
use napi_derive::napi;
use std::time::Duration;

#[napi]
pub struct NativeLocks {
    pub(crate) inner: Locks,
    family: String,
}

/// Opens the backend `url` names (any scheme of the core's one table) with
/// options by name; resolves with a `NativeLocks`.
#[napi]
pub fn open<'env>(env: &'env Env, url: String, options: Vec<Opt>) -> Result<Object<'env>> {
    let opts = convert::open_options(&options).map_err(|e| js_error(&e))?;
    spawn_promise(env, move || {
        let (family, locks) = Locks::open_as(&url, &opts)?;
        Ok(NativeLocks {
            inner: locks,
            family: family.name().to_owned(),
        })
    })
}

/// Sets (or with null clears) the process's configured Locks, which the
/// module-level `hold` uses.
#[napi]
pub fn configure(locks: Option<&NativeLocks>) {
    mistri_locks::configure(locks.map(|l| l.inner.clone()));
}

/// A hold on the configured Locks (null when none is configured).
#[napi]
pub fn hold_configured<'env>(
    env: &'env Env,
    key: String,
    options: Vec<Opt>,
    signal: &NativeSignal,
) -> Result<Object<'env>> {
    crate::hold::start(env, None, key, &options, signal)
}

fn secs(what: &str, s: f64) -> Result<Duration> {
    duration_from_secs(what, s).map_err(|e| js_error(&e))
}

/// The flag ttl when none is given: the core's default.
fn flag_ttl(ttl: Option<f64>) -> Result<Duration> {
    ttl.map_or(Ok(mistri_locks::FLAG_TTL), |t| secs("ttl", t))
}

impl NativeLocks {
    /// Runs `work` on this handle's backend off the JS thread
    /// ([`spawn_promise`]: the face's call threads, the core's error as a
    /// rejection); every method that may touch the backend goes through it.
    pub(crate) fn call<'env, T, F>(&self, env: &'env Env, work: F) -> Result<Object<'env>>
    where
        T: ToNapiValue + Send + 'static,
        F: FnOnce(&Locks) -> mistri_locks::Result<T> + Send + 'static,
    {
        let locks = self.inner.clone();
        spawn_promise(env, move || work(&locks))
    }
}

#[napi]
impl NativeLocks {
    /// The backend family's stable name (`memory`, `local`, `redis`, `postgres`, …).
    #[napi(getter)]
    pub fn family(&self) -> String {
        self.family.clone()
    }

    /// The label this handle's leases carry.
    #[napi(getter)]
    pub fn label(&self) -> String {
        self.inner.label()
    }

    /// Another owner on the same backend (as another process would be).
    #[napi]
    pub fn new_owner(&self) -> NativeLocks {
        NativeLocks {
            inner: self.inner.new_owner(),
            family: self.family.clone(),
        }
    }

    #[napi]
    pub fn hold<'env>(
        &self,
        env: &'env Env,
        key: String,
        options: Vec<Opt>,
        signal: &NativeSignal,
    ) -> Result<Object<'env>> {
        crate::hold::start(env, Some(self.inner.clone()), key, &options, signal)
    }

    #[napi]
    pub fn acquire<'env>(&self, env: &'env Env, key: String, ttl: f64) -> Result<Object<'env>> {
        let ttl = secs("ttl", ttl)?;
        self.call(env, move |l| l.acquire(&key, ttl))
    }

    #[napi]
    pub fn renew<'env>(&self, env: &'env Env, key: String, ttl: f64) -> Result<Object<'env>> {
        let ttl = secs("ttl", ttl)?;
        self.call(env, move |l| l.renew(&key, ttl))
    }

    #[napi]
    pub fn release<'env>(&self, env: &'env Env, key: String) -> Result<Object<'env>> {
        self.call(env, move |l| l.release(&key))
    }

    #[napi]
    pub fn held<'env>(&self, env: &'env Env, key: String) -> Result<Object<'env>> {
        self.call(env, move |l| l.held(&key))
    }

    /// This handle's fence for `key` (no I/O: what it was issued), or null.
    #[napi]
    pub fn fence(&self, key: String) -> Option<f64> {
        // Exact below 2^53 (see NativeHold::fence).
        #[allow(clippy::cast_precision_loss)]
        self.inner.fence(&key).map(|f| f as f64)
    }

    #[napi]
    pub fn set_flag<'env>(
        &self,
        env: &'env Env,
        key: String,
        ttl: Option<f64>,
    ) -> Result<Object<'env>> {
        let ttl = flag_ttl(ttl)?;
        self.call(env, move |l| l.set_flag(&key, ttl))
    }

    #[napi]
    pub fn flag<'env>(&self, env: &'env Env, key: String) -> Result<Object<'env>> {
        self.call(env, move |l| l.flag(&key))
    }

    #[napi]
    pub fn clear_flag<'env>(&self, env: &'env Env, key: String) -> Result<Object<'env>> {
        self.call(env, move |l| l.clear_flag(&key))
    }

    #[napi]
    pub fn break_lease<'env>(&self, env: &'env Env, key: String) -> Result<Object<'env>> {
        self.call(env, move |l| l.break_lease(&key))
    }

    #[napi]
    pub fn info<'env>(&self, env: &'env Env, key: String) -> Result<Object<'env>> {
        self.call(env, move |l| {
            Ok(match l.info(&key)? {
                Some(info) => convert::lease_info(&info),
                None => serde_json::Value::Null,
            })
        })
    }

    #[napi]
    pub fn list<'env>(&self, env: &'env Env, prefix: String) -> Result<Object<'env>> {
        self.call(env, move |l| Ok(convert::listing(&l.list(&prefix)?)))
    }

    /// The core's stop-the-holders: resolves with `{outcome, flags, stopKey}`.
    #[napi]
    pub fn stop_holders<'env>(
        &self,
        env: &'env Env,
        key: String,
        ttl: Option<f64>,
    ) -> Result<Object<'env>> {
        let ttl = flag_ttl(ttl)?;
        self.call(env, move |l| {
            use mistri_locks::StopOutcome as S;
            Ok(match l.stop_holders(&key, ttl)? {
                S::Raised(flags) => serde_json::json!({"outcome": "raised", "flags": flags}),
                S::NotHeld => serde_json::json!({"outcome": "not_held", "flags": []}),
                S::NoStopKey => serde_json::json!({"outcome": "no_stop_key", "flags": []}),
                S::Outside { stop_key } => {
                    serde_json::json!({"outcome": "outside", "flags": [], "stopKey": stop_key})
                }
                _ => serde_json::json!({"outcome": "unknown", "flags": []}),
            })
        })
    }

    /// Raises job `id`'s stop flag (the core's key format); resolves with its key.
    #[napi]
    pub fn stop_job<'env>(
        &self,
        env: &'env Env,
        id: String,
        ttl: Option<f64>,
    ) -> Result<Object<'env>> {
        let ttl = flag_ttl(ttl)?;
        self.call(env, move |l| l.stop_job(&id, ttl))
    }

    /// This handle's counters by the core's names (in memory, no I/O).
    #[napi]
    pub fn stats(&self) -> serde_json::Value {
        convert::stats(&self.inner.stats())
    }

    /// The counters as Prometheus text (the core's rendering).
    #[napi]
    pub fn prometheus(&self) -> String {
        mistri_locks::operator::stats_prometheus(&self.inner.stats())
    }

    /// How many holds this handle's engine renews.
    #[napi]
    pub fn active_holds(&self) -> u32 {
        u32::try_from(self.inner.active_holds()).unwrap_or(u32::MAX)
    }
}
