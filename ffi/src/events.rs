//! Hold events of a `mistri_locks` handle, for C: `mistri_locks_on_event`
//! (a callback that receives an opaque `mistri_event`, read with getters).
//! The names, and what each event means, are the core's
//! (`core/src/stats.rs`); the handle's counters are in `stats.rs`.
//!
//! Callbacks run on the library's notifier thread (`mistri-notifier`),
//! never on a heartbeat thread and never under a library lock.

use crate::args::{c_string_lossy, try_out};
use crate::handle::{try_ref_from_ptr, Castable};
use crate::panic::ffi_boundary;
use crate::signal::mistri_userdata_finalizer;
use crate::status::{mistri_status, Failure};
use mistri_core::{Event, EventHookHandle};
use std::ffi::{c_char, c_void, CStr, CString};

/// One event of a hold, handed to a `mistri_event_callback`. Read it with
/// `mistri_event_kind`, `mistri_event_key`, `mistri_event_fence`,
/// `mistri_event_reason` and `mistri_event_cause`.
///
/// Ownership: the library's; valid only during the callback (copy what
/// you keep). Never free it.
///
/// Threading: use it only on the callback's thread.
pub struct mistri_event {
    _private: [u8; 0],
}

/// The Rust side of a `mistri_event`: the event and its C strings.
pub(crate) struct CEvent {
    kind: &'static CStr,
    key: CString,
    fence: u64,
    reason: Option<CString>,
    cause: Option<&'static CStr>,
}

impl Castable for mistri_event {
    type RustType = CEvent;
}

/// The static C string of a kind or cause name (the names are a fixed set).
fn static_c_name(name: &str) -> &'static CStr {
    match name {
        "acquired" => c"acquired",
        "refused" => c"refused",
        "renewed_late" => c"renewed_late",
        "at_risk" => c"at_risk",
        "lost" => c"lost",
        "stopped" => c"stopped",
        "released" => c"released",
        "not_held" => c"not_held",
        "too_late" => c"too_late",
        "deadline" => c"deadline",
        "max_hold" => c"max_hold",
        "stalled" => c"stalled",
        _ => c"unknown",
    }
}

impl CEvent {
    fn new(event: &Event) -> Self {
        CEvent {
            kind: static_c_name(event.kind.name()),
            key: c_string_lossy(&event.key),
            fence: event.fence,
            reason: event.reason.as_deref().map(c_string_lossy),
            cause: event.cause.map(|c| static_c_name(c.name())),
        }
    }
}

/// A callback run for each event of the holds of one `mistri_locks` handle.
///
/// `userdata` is the pointer given to `mistri_locks_on_event`; `event` is
/// valid only during the call.
///
/// Events (`mistri_event_kind`): `"acquired"` (a hold took its lease),
/// `"refused"` (a hold found the lease held elsewhere), `"at_risk"` (the
/// first failed renewal attempt since the last confirmed one),
/// `"renewed_late"` (a renewal confirmed after failed attempts), `"lost"`
/// (the hold is lost; `mistri_event_cause` says why: `"not_held"`,
/// `"too_late"`, `"deadline"`, `"max_hold"` or `"stalled"`), `"stopped"` (its stop flag was seen),
/// `"released"` (released before being lost). Names may be added.
///
/// It runs on the library's notifier thread (`mistri-notifier`), never on
/// a heartbeat thread, with no library lock held: it may call any
/// `mistri_*` function. Events of one handle arrive in order.
pub type mistri_event_callback =
    Option<unsafe extern "C" fn(userdata: *mut c_void, event: *const mistri_event)>;

/// A registered C event callback. Dropping it runs the finalizer.
struct CEventHook {
    callback: unsafe extern "C" fn(*mut c_void, *const mistri_event),
    finalizer: mistri_userdata_finalizer,
    /// The caller's `userdata`, kept as an address (only handed back to the
    /// caller's functions, which `mistri_locks_on_event` says may run on
    /// another thread).
    userdata: usize,
}

impl CEventHook {
    fn run(&self, event: &Event) {
        let event = CEvent::new(event);
        let ptr: *const mistri_event = (&event as *const CEvent).cast();
        // SAFETY: the caller of mistri_locks_on_event gave a valid function
        // for this userdata; `ptr` points at a `CEvent` that lives until
        // after the call (the getters borrow it as `Castable` says).
        unsafe { (self.callback)(self.userdata as *mut c_void, ptr) };
    }
}

impl Drop for CEventHook {
    fn drop(&mut self) {
        if let Some(finalizer) = self.finalizer {
            // SAFETY: the finalizer registered for this userdata; it runs
            // exactly once (the only drop of the hook).
            unsafe { finalizer(self.userdata as *mut c_void) };
        }
    }
}

/// Registers `callback` to run with `userdata` for every event of the holds
/// made through this handle (see `mistri_event_callback`).
///
/// `finalizer` (may be NULL) runs exactly once when the library is done
/// with `userdata`: when the callback is removed, or when the handle and
/// every hold made from it are gone. Ownership of `userdata` passes to the
/// library only on `MISTRI_OK`.
///
/// On `MISTRI_OK`, `*handle` receives a number for
/// `mistri_locks_remove_event_hook`.
///
/// Errors: `MISTRI_NULL_ARGUMENT` (locks, callback, handle).
///
/// # Safety
/// `locks` is NULL or a live handle; `callback` and `finalizer` are NULL or
/// functions safe to call with `userdata` from any thread; `handle` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_on_event(
    locks: *const crate::locks::mistri_locks,
    callback: mistri_event_callback,
    userdata: *mut c_void,
    finalizer: mistri_userdata_finalizer,
    handle: *mut u64,
) -> mistri_status {
    ffi_boundary!("mistri_locks_on_event", {
        let out = try_out!(handle);
        let locks = try_ref_from_ptr!(locks);
        let hook = CEventHook {
            callback: callback.ok_or(Failure::Null("callback"))?,
            finalizer,
            userdata: userdata as usize,
        };
        out.write(locks.on_event(move |e| hook.run(e)).as_u64())
    })
}

/// Removes an event callback; its finalizer runs (on this thread, after the
/// removal). No event reaches it after this returns, except in a call
/// already running.
///
/// On `MISTRI_OK`, if `removed` is not NULL, `*removed` is `true` if the
/// callback was registered, `false` if `handle` is unknown (or removed
/// before).
///
/// # Safety
/// `locks` is NULL or a live handle (to the owner the callback was
/// registered on); `removed` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_remove_event_hook(
    locks: *const crate::locks::mistri_locks,
    handle: u64,
    removed: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_locks_remove_event_hook", {
        let removed_out = try_out!(opt removed);
        let did = try_ref_from_ptr!(locks).remove_event_hook(EventHookHandle::from_u64(handle));
        removed_out.map_or(Ok(()), |out| out.write(did))
    })
}

/// The event's kind, e.g. `"lost"` (static; never free it).
///
/// # Safety
/// `event` is NULL or the event of a running callback; `kind` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_event_kind(
    event: *const mistri_event,
    kind: *mut *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_event_kind", {
        let out = try_out!(kind);
        out.write(try_ref_from_ptr!(event).kind.as_ptr())
    })
}

/// The hold's key (valid during the callback; a key containing a NUL byte
/// is cut there).
///
/// # Safety
/// `event` is NULL or the event of a running callback; `key` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_event_key(
    event: *const mistri_event,
    key: *mut *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_event_key", {
        let out = try_out!(key);
        out.write(try_ref_from_ptr!(event).key.as_ptr())
    })
}

/// The hold's fencing number (0 for `"refused"`).
///
/// # Safety
/// `event` is NULL or the event of a running callback; `fence` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_event_fence(
    event: *const mistri_event,
    fence: *mut u64,
) -> mistri_status {
    ffi_boundary!("mistri_event_fence", {
        let out = try_out!(fence);
        out.write(try_ref_from_ptr!(event).fence)
    })
}

/// `"lost"`, `"stopped"`: the reason the hold's signal was tripped with;
/// `"at_risk"`: the renewal's error; otherwise NULL. Valid during the
/// callback.
///
/// # Safety
/// `event` is NULL or the event of a running callback; `reason` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_event_reason(
    event: *const mistri_event,
    reason: *mut *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_event_reason", {
        let out = try_out!(reason);
        let event = try_ref_from_ptr!(event);
        out.write(
            event
                .reason
                .as_ref()
                .map_or(std::ptr::null(), |r| r.as_ptr()),
        )
    })
}

/// `"lost"` only: why, `"not_held"`, `"too_late"`, `"deadline"`,
/// `"max_hold"` (the hung-holder guard's maximum) or `"stalled"` (no
/// `mistri_hold_touch` within the progress timeout) (static); otherwise
/// NULL. Causes may be added.
///
/// # Safety
/// `event` is NULL or the event of a running callback; `cause` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_event_cause(
    event: *const mistri_event,
    cause: *mut *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_event_cause", {
        let out = try_out!(cause);
        let event = try_ref_from_ptr!(event);
        out.write(event.cause.map_or(std::ptr::null(), |c| c.as_ptr()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mistri_core::{EventKind, LostCause};

    #[test]
    fn every_kind_and_cause_has_its_c_name() {
        for kind in EventKind::ALL {
            assert_eq!(static_c_name(kind.name()).to_str(), Ok(kind.name()));
        }
        for name in ["not_held", "too_late", "deadline", "max_hold", "stalled"] {
            let cause = LostCause::from_name(name).expect("a cause of the core");
            assert_eq!(static_c_name(cause.name()).to_str(), Ok(name));
        }
    }
}
