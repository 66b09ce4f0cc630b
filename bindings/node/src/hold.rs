//! A held lease (`NativeHold`), the core signal a hold is given
//! (`NativeSignal`: the caller's `AbortSignal` aborts it, which ends a wait
//! in line), and the news of a stop or a loss: the core trips the hold's
//! signal on its heartbeat thread, whose callback calls this JS thread's
//! dispatcher, a thread-safe function that does not keep the process alive.

use crate::js_error;
use mistri_locks::{AbortSignal, CallbackHandle, Hold, Interruption, Locks, ReleaseOutcome};
use napi::bindgen_prelude::*;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi_derive::napi;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Calls JS with a hold's id; unref'd (`Weak`), so it keeps nothing alive.
type Dispatcher = ThreadsafeFunction<u32, (), u32, Status, false, true>;

thread_local! {
    /// This JS thread's dispatcher (the main thread and each worker have one).
    static DISPATCHER: RefCell<Option<Arc<Dispatcher>>> = const { RefCell::new(None) };
}

static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// Sets the function called, on this JS thread, with the id of a hold whose
/// signal tripped (`lib/index.cjs` calls it once as it loads).
#[napi]
pub fn set_dispatcher(callback: Function<'_, u32, ()>) -> Result<()> {
    let tsfn = callback
        .build_threadsafe_function::<u32>()
        .callee_handled::<false>()
        .weak::<true>()
        .build()?;
    DISPATCHER.with(|d| *d.borrow_mut() = Some(Arc::new(tsfn)));
    // Leases describe their holder as `host:pid node`.
    mistri_locks::internals::set_language("node");
    Ok(())
}

/// This JS thread's dispatcher (taken on the JS thread, used on others).
pub(crate) fn dispatcher() -> Result<Arc<Dispatcher>> {
    DISPATCHER
        .with(|d| d.borrow().clone())
        .ok_or_else(|| Error::from_reason("[MISTRI_SYSTEM] the dispatcher is not set"))
}

/// The core's AbortSignal behind one hold request.
#[napi]
pub struct NativeSignal {
    pub(crate) inner: AbortSignal,
}

#[napi]
impl NativeSignal {
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        NativeSignal {
            inner: AbortSignal::new(),
        }
    }

    /// Aborts it (no I/O: wakes a wait in line, trips a hold's signal).
    #[napi]
    pub fn abort(&self, reason: Option<String>) -> bool {
        self.inner.abort(reason.as_deref())
    }
}

/// Why the work should stop: `{kind: "stopped"|"lost", flag, cause}`.
#[napi(object)]
pub struct InterruptionInfo {
    pub kind: String,
    pub flag: Option<String>,
    pub cause: Option<String>,
}

/// A held lease, renewed by the core's heartbeat engine.
#[napi]
pub struct NativeHold {
    hold: Arc<Hold>,
    /// The Locks it came from (for `info`); `None` for the configured one.
    locks: Option<Locks>,
    callback: Mutex<Option<CallbackHandle>>,
    id: u32,
}

impl NativeHold {
    /// Wraps `hold` and tells `dispatcher` (with the new id) when its
    /// signal trips, now or later.
    pub(crate) fn wrap(hold: Hold, locks: Option<Locks>, dispatcher: Arc<Dispatcher>) -> Self {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let handle = hold.signal().on_abort(move |_| {
            // Non-blocking: the heartbeat thread never waits on JS.
            dispatcher.call(id, ThreadsafeFunctionCallMode::NonBlocking);
        });
        NativeHold {
            hold: Arc::new(hold),
            locks,
            callback: Mutex::new(Some(handle)),
            id,
        }
    }

    fn forget_callback(&self) {
        let handle = self
            .callback
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(handle) = handle {
            self.hold.signal().remove_callback(handle);
        }
    }
}

fn outcome_name(o: ReleaseOutcome) -> &'static str {
    match o {
        ReleaseOutcome::Released => "released",
        ReleaseOutcome::NotHeld => "not_held",
        ReleaseOutcome::Lost => "lost",
        ReleaseOutcome::AlreadyReleased => "already_released",
        ReleaseOutcome::OtherProcess => "other_process",
        ReleaseOutcome::Expired => "expired",
    }
}

#[napi]
impl NativeHold {
    /// The id the dispatcher is called with.
    #[napi(getter)]
    pub fn id(&self) -> u32 {
        self.id
    }

    #[napi(getter)]
    pub fn key(&self) -> String {
        self.hold.key().to_owned()
    }

    /// The fencing number (microseconds-floored: exact in a JS number).
    #[napi(getter)]
    pub fn fence(&self) -> f64 {
        // Exact below 2^53 (microseconds since 1970 stay below it until 2255).
        #[allow(clippy::cast_precision_loss)]
        let f = self.hold.fence() as f64;
        f
    }

    #[napi(getter)]
    pub fn lost(&self) -> bool {
        self.hold.is_lost()
    }

    #[napi(getter)]
    pub fn aborted(&self) -> bool {
        self.hold.signal().is_aborted()
    }

    /// The core signal's reason text.
    #[napi(getter)]
    pub fn reason(&self) -> Option<String> {
        self.hold.signal().reason()
    }

    /// The core's typed answer ([`Hold::interruption`]); null while running.
    #[napi]
    pub fn interruption(&self) -> Option<InterruptionInfo> {
        let found = self.hold.interruption().or_else(|| {
            // Lost is recorded just before the signal trips: lost already.
            self.hold
                .is_lost()
                .then_some(Interruption::Lost { cause: None })
        });
        found.map(|i| match i {
            Interruption::Stopped { flag } => InterruptionInfo {
                kind: "stopped".into(),
                flag,
                cause: None,
            },
            Interruption::Lost { cause } => InterruptionInfo {
                kind: "lost".into(),
                flag: None,
                cause: cause.map(|c| c.name().to_owned()),
            },
            other => InterruptionInfo {
                kind: other.name().into(),
                flag: None,
                cause: None,
            },
        })
    }

    /// Progress for the hung-holder guard (`progressTimeout`).
    #[napi]
    pub fn touch(&self) {
        self.hold.touch();
    }

    /// Releases (off the JS thread); resolves with the outcome's name.
    #[napi]
    pub fn release<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        self.forget_callback();
        let hold = self.hold.clone();
        crate::spawn_promise(env, move || hold.release().map(outcome_name))
    }

    /// Who holds the key now (off the JS thread).
    #[napi]
    pub fn info<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let key = self.hold.key().to_owned();
        let locks = self.locks.clone().or_else(mistri_locks::locks);
        crate::spawn_promise(env, move || {
            let Some(locks) = locks else {
                return Ok(serde_json::Value::Null);
            };
            Ok(match locks.info(&key)? {
                Some(info) => crate::convert::lease_info(&info),
                None => serde_json::Value::Null,
            })
        })
    }
}

impl Drop for NativeHold {
    /// Collected without a release: stop renewing and leave the delete to
    /// the core's I/O thread (no I/O on the JS thread).
    fn drop(&mut self) {
        self.forget_callback();
        self.hold.release_in_background();
    }
}

/// Holds `key` (waiting as the options say, cancelled by `signal`) on
/// `locks`, or on the configured Locks when `None`; resolves with a
/// `NativeHold` or null.
pub(crate) fn start<'env>(
    env: &'env Env,
    locks: Option<Locks>,
    key: String,
    opts: &[crate::convert::Opt],
    signal: &NativeSignal,
) -> Result<Object<'env>> {
    let mut options = crate::convert::hold_options(opts).map_err(|e| js_error(&e))?;
    options.signal = Some(signal.inner.clone());
    let dispatcher = dispatcher()?;
    // A hold that waits in line sleeps its thread: one of the wait group's,
    // never a call thread. Its `wait` counts from this call, so time spent
    // queued for a thread (past `WAIT_THREADS` waits) comes off it.
    let waits = options.wait.is_some_and(|w| !w.is_zero());
    let kind = if waits {
        crate::pool::Kind::Wait
    } else {
        crate::pool::Kind::Call
    };
    let called = std::time::Instant::now();
    crate::spawn_promise_in(env, kind, move || {
        let mut options = options;
        if let Some(w) = options.wait.filter(|w| !w.is_zero()) {
            let left = w.saturating_sub(called.elapsed());
            // Ran out while queued: one try, as at the end of a wait.
            options.wait = Some(left);
        }
        let held = match &locks {
            Some(l) => l.hold(&key, options)?,
            None => mistri_locks::hold(&key, options)?,
        };
        Ok(held.map(|h| NativeHold::wrap(h, locks, dispatcher)))
    })
}
