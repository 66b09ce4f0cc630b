//! `mistri_locks`: an adapter handle (Memory, Local or Redis) with the seven
//! operations of the contract, and the process-wide configured adapter.

use crate::args::{arg_opt_str, arg_ref, arg_str, out_ptr, secs, write_out};
use crate::panic::{ffi_boundary, ffi_boundary_void};
use crate::status::mistri_status;
use mistri_core::Locks;
use std::ffi::c_char;

/// Default lease TTL of a hold, in seconds (`mistri_hold_options_default`).
pub const MISTRI_LEASE_TTL: f64 = 180.0;
/// Default heartbeat of a hold, in seconds (`mistri_hold_options_default`).
pub const MISTRI_HEARTBEAT: f64 = 60.0;
/// The conventional TTL of a flag, in seconds (pass it to
/// `mistri_locks_set_flag` when you have no better value).
pub const MISTRI_FLAG_TTL: f64 = 300.0;

/// An adapter: a backend (Memory, Local or Redis) plus the leases this handle has
/// acquired, and the heartbeat engine that renews its holds.
///
/// Each handle is one *owner*: `mistri_locks_renew` and
/// `mistri_locks_release` only touch leases that this handle (or a handle
/// obtained from it with `mistri_configured`) acquired. Two handles made by
/// `mistri_locks_memory_new` are two separate backends; use
/// `mistri_locks_sharing_adapter` for a second owner on the same Memory
/// backend. Two Redis handles on the same server and namespace (or two
/// Local handles on the same file) are two
/// owners of the same leases and flags, in this process or any other.
///
/// Ownership: made by `mistri_locks_memory_new`, `mistri_locks_local_new`,
/// `mistri_locks_redis_new`,
/// `mistri_locks_sharing_adapter` or `mistri_configured`; freed by
/// `mistri_locks_free`. Holds made from it keep what they need alive, so it
/// may be freed before them.
///
/// Threading: thread-safe. Any number of threads may call any function on
/// the same handle at once, except `mistri_locks_free`, which must be the
/// last call on it. After `fork()`, the child may keep using the handle: a
/// Redis adapter reconnects, and the child forgets the parent's leases (it
/// can neither renew nor release them).
pub struct mistri_locks {
    pub(crate) locks: Locks,
}

fn new_handle(locks: Locks) -> *mut mistri_locks {
    // Default holder labels of this process say "c" (`host:pid c`).
    mistri_core::info::set_language("c");
    Box::into_raw(Box::new(mistri_locks { locks }))
}

/// Makes an in-process Memory adapter: real TTLs on a monotonic clock,
/// visible only inside this process.
///
/// On `MISTRI_OK`, `*out` receives a new handle; free it with
/// `mistri_locks_free`.
///
/// # Safety
/// `out` is NULL (an error) or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_memory_new(out: *mut *mut mistri_locks) -> mistri_status {
    ffi_boundary!("mistri_locks_memory_new", {
        let out = out_ptr(out, "out")?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, new_handle(Locks::memory())) };
        Ok(())
    })
}

/// Makes a Redis adapter for `url` (`redis://[user:pass@]host:port/db`, or
/// `rediss://` for TLS), with every key under `namespace` (NULL means the
/// default, `"mistri:locks"`). Connections are opened on first use (a
/// small pool, reconnected after `fork()`), so an unreachable server shows
/// as `MISTRI_CONNECTION` from the first operation, not from here.
///
/// On `MISTRI_OK`, `*out` receives a new handle; free it with
/// `mistri_locks_free`.
///
/// Errors: `MISTRI_CONFIG` (unparsable URL), `MISTRI_INVALID_ARGUMENT`
/// (namespace empty or containing `{` or `}`), `MISTRI_NULL_ARGUMENT` (url,
/// out), `MISTRI_INVALID_UTF8`. Messages never contain the password.
///
/// # Safety
/// `url` and `namespace_` are NULL or NUL-terminated strings; `out` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_redis_new(
    url: *const c_char,
    namespace_: *const c_char,
    out: *mut *mut mistri_locks,
) -> mistri_status {
    ffi_boundary!("mistri_locks_redis_new", {
        let out = out_ptr(out, "out")?;
        // SAFETY: C strings per this function's contract.
        let url = unsafe { arg_str(url, "url") }?;
        // SAFETY: as above.
        let namespace = unsafe { arg_opt_str(namespace_, "namespace") }?
            .unwrap_or(mistri_core::redis::DEFAULT_NAMESPACE);
        let locks = Locks::redis(url, namespace)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, new_handle(locks)) };
        Ok(())
    })
}

/// Makes a Local adapter: leases and flags shared by every process on this
/// host that opens the same SQLite database file, with no server. `path`
/// is the file (created with mode 0600, its folder with 0700, if missing);
/// NULL means `$MISTRI_LOCKS_LOCAL_PATH`, else the per-user default
/// `/var/tmp/mistri_locks-<uid>/locks.db` (the same for every process of the
/// user, whatever its environment).
///
/// On `MISTRI_OK`, `*out` receives a new handle; free it with
/// `mistri_locks_free`. Connections are reopened after `fork()`.
///
/// Errors: `MISTRI_CONFIG` (the file can't be created or written, is not an
/// SQLite database, is a symbolic link or another user's, or its folder is a
/// symbolic link, another user's or writable by others: the message names
/// the path and the problem),
/// `MISTRI_INVALID_ARGUMENT` (empty path), `MISTRI_NULL_ARGUMENT` (out),
/// `MISTRI_INVALID_UTF8`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_local_new(
    path: *const c_char,
    out: *mut *mut mistri_locks,
) -> mistri_status {
    ffi_boundary!("mistri_locks_local_new", {
        let out = out_ptr(out, "out")?;
        // SAFETY: C string per this function's contract.
        let path = unsafe { arg_opt_str(path, "path") }?;
        let locks = Locks::local(path.map(std::path::Path::new))?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, new_handle(locks)) };
        Ok(())
    })
}

/// Makes another owner on the same backend as `locks`: it shares the
/// backend (a Memory adapter's leases and flags, a Redis adapter's
/// connection pool) but has its own acquired leases and its own heartbeat
/// engine, so it behaves like another process would.
///
/// On `MISTRI_OK`, `*out` receives a new handle; free it with
/// `mistri_locks_free`.
///
/// # Safety
/// `locks` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_sharing_adapter(
    locks: *const mistri_locks,
    out: *mut *mut mistri_locks,
) -> mistri_status {
    ffi_boundary!("mistri_locks_sharing_adapter", {
        let out = out_ptr(out, "out")?;
        // SAFETY: a live handle per this function's contract.
        let locks = unsafe { arg_ref(locks, "locks") }?;
        let other = locks.locks.sharing_adapter();
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, new_handle(other)) };
        Ok(())
    })
}

/// Frees an adapter handle. NULL is ignored.
///
/// Leases acquired with `mistri_locks_acquire` are not released (they expire
/// on their own); holds made from this handle keep running until released
/// or freed.
///
/// # Safety
/// `locks` is NULL or a live handle that no other thread is using; it must
/// not be used again.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_free(locks: *mut mistri_locks) {
    ffi_boundary_void!("mistri_locks_free", {
        if !locks.is_null() {
            // SAFETY: made by Box::into_raw in this module; the caller gives
            // it back exactly once.
            drop(unsafe { Box::from_raw(locks) });
        }
    })
}

/// Takes the lease on `key` for `ttl` seconds if no live lease exists.
///
/// On `MISTRI_OK`, `*acquired` is `true` if this handle now holds the
/// lease, `false` if a live lease is there already (anyone's, this handle's
/// included): a refusal, not an error.
///
/// Errors: `MISTRI_INVALID_ARGUMENT` (empty key; ttl NaN, infinite, <= 0 or
/// > 1e9), the backend's errors.
///
/// # Safety
/// `locks` is NULL or a live handle; `key` is NULL or a NUL-terminated
/// string; `acquired` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_acquire(
    locks: *const mistri_locks,
    key: *const c_char,
    ttl: f64,
    acquired: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_locks_acquire", {
        let out = out_ptr(acquired, "acquired")?;
        // SAFETY: pointers per this function's contract.
        let (locks, key) = unsafe { (arg_ref(locks, "locks")?, arg_str(key, "key")?) };
        let ttl = secs("ttl", ttl)?;
        let got = locks.locks.acquire(key, ttl)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, got) };
        Ok(())
    })
}

/// Extends this handle's lease on `key` to `ttl` seconds from now.
///
/// On `MISTRI_OK`, `*renewed` is `true` if it was renewed, `false` if this
/// handle holds no lease on `key` (never acquired, released, or expired and
/// taken by someone else): a refusal, not an error. Someone else's lease is
/// never touched.
///
/// Errors: as `mistri_locks_acquire`.
///
/// # Safety
/// As `mistri_locks_acquire`.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_renew(
    locks: *const mistri_locks,
    key: *const c_char,
    ttl: f64,
    renewed: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_locks_renew", {
        let out = out_ptr(renewed, "renewed")?;
        // SAFETY: pointers per this function's contract.
        let (locks, key) = unsafe { (arg_ref(locks, "locks")?, arg_str(key, "key")?) };
        let ttl = secs("ttl", ttl)?;
        let got = locks.locks.renew(key, ttl)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, got) };
        Ok(())
    })
}

/// Deletes this handle's lease on `key`.
///
/// On `MISTRI_OK`, `*released` is `true` if it was deleted, `false` if this
/// handle holds no lease on `key` (a refusal, not an error; someone else's
/// lease is never deleted). On a backend error the lease is remembered, so
/// the release can be retried.
///
/// Errors: `MISTRI_INVALID_ARGUMENT` (empty key), the backend's errors.
///
/// # Safety
/// `locks` is NULL or a live handle; `key` is NULL or a NUL-terminated
/// string; `released` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_release(
    locks: *const mistri_locks,
    key: *const c_char,
    released: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_locks_release", {
        let out = out_ptr(released, "released")?;
        // SAFETY: pointers per this function's contract.
        let (locks, key) = unsafe { (arg_ref(locks, "locks")?, arg_str(key, "key")?) };
        let got = locks.locks.release(key)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, got) };
        Ok(())
    })
}

/// Is a live lease on `key` (anyone's)?
///
/// On `MISTRI_OK`, `*held` says so.
///
/// Errors: `MISTRI_INVALID_ARGUMENT` (empty key), the backend's errors.
///
/// # Safety
/// `locks` is NULL or a live handle; `key` is NULL or a NUL-terminated
/// string; `held` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_held(
    locks: *const mistri_locks,
    key: *const c_char,
    held: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_locks_held", {
        let out = out_ptr(held, "held")?;
        // SAFETY: pointers per this function's contract.
        let (locks, key) = unsafe { (arg_ref(locks, "locks")?, arg_str(key, "key")?) };
        let got = locks.locks.held(key)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, got) };
        Ok(())
    })
}

/// Raises the flag `key` for `ttl` seconds (`MISTRI_FLAG_TTL` by
/// convention). A flag needs no owner: anyone may raise, read or lower it,
/// and it expires on its own. Raising a raised flag restarts its TTL.
///
/// Errors: `MISTRI_INVALID_ARGUMENT` (empty key; bad ttl), the backend's
/// errors.
///
/// # Safety
/// `locks` is NULL or a live handle; `key` is NULL or a NUL-terminated
/// string.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_set_flag(
    locks: *const mistri_locks,
    key: *const c_char,
    ttl: f64,
) -> mistri_status {
    ffi_boundary!("mistri_locks_set_flag", {
        // SAFETY: pointers per this function's contract.
        let (locks, key) = unsafe { (arg_ref(locks, "locks")?, arg_str(key, "key")?) };
        let ttl = secs("ttl", ttl)?;
        locks.locks.set_flag(key, ttl)?;
        Ok(())
    })
}

/// Is the flag `key` up?
///
/// On `MISTRI_OK`, `*up` says so.
///
/// Errors: `MISTRI_INVALID_ARGUMENT` (empty key), the backend's errors.
///
/// # Safety
/// `locks` is NULL or a live handle; `key` is NULL or a NUL-terminated
/// string; `up` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_flag(
    locks: *const mistri_locks,
    key: *const c_char,
    up: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_locks_flag", {
        let out = out_ptr(up, "up")?;
        // SAFETY: pointers per this function's contract.
        let (locks, key) = unsafe { (arg_ref(locks, "locks")?, arg_str(key, "key")?) };
        let got = locks.locks.flag(key)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, got) };
        Ok(())
    })
}

/// Lowers the flag `key`. Lowering a flag that is not up is fine.
///
/// Errors: `MISTRI_INVALID_ARGUMENT` (empty key), the backend's errors.
///
/// # Safety
/// `locks` is NULL or a live handle; `key` is NULL or a NUL-terminated
/// string.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_clear_flag(
    locks: *const mistri_locks,
    key: *const c_char,
) -> mistri_status {
    ffi_boundary!("mistri_locks_clear_flag", {
        // SAFETY: pointers per this function's contract.
        let (locks, key) = unsafe { (arg_ref(locks, "locks")?, arg_str(key, "key")?) };
        locks.locks.clear_flag(key)?;
        Ok(())
    })
}

/// The fencing number of this handle's lease on `key`.
///
/// On `MISTRI_OK`, `*fence` is the number (>= 1, strictly greater than that
/// of every earlier acquisition of `key`), or 0 if this handle holds no
/// lease on `key` as far as it knows (it is not asked of the backend).
///
/// # Safety
/// `locks` is NULL or a live handle; `key` is NULL or a NUL-terminated
/// string; `fence` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_fence(
    locks: *const mistri_locks,
    key: *const c_char,
    fence: *mut u64,
) -> mistri_status {
    ffi_boundary!("mistri_locks_fence", {
        let out = out_ptr(fence, "fence")?;
        // SAFETY: pointers per this function's contract.
        let (locks, key) = unsafe { (arg_ref(locks, "locks")?, arg_str(key, "key")?) };
        let got = locks.locks.fence(key).unwrap_or(0);
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, got) };
        Ok(())
    })
}

/// Operator override: deletes whatever lease is on `key`, whoever holds it.
/// The holder's hold becomes lost at its next renewal (its signal trips).
///
/// On `MISTRI_OK`, `*broken` is `true` if a lease was deleted.
///
/// Errors: `MISTRI_INVALID_ARGUMENT` (empty key), the backend's errors.
///
/// # Safety
/// `locks` is NULL or a live handle; `key` is NULL or a NUL-terminated
/// string; `broken` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_break_lease(
    locks: *const mistri_locks,
    key: *const c_char,
    broken: *mut bool,
) -> mistri_status {
    ffi_boundary!("mistri_locks_break_lease", {
        let out = out_ptr(broken, "broken")?;
        // SAFETY: pointers per this function's contract.
        let (locks, key) = unsafe { (arg_ref(locks, "locks")?, arg_str(key, "key")?) };
        let got = locks.locks.break_lease(key)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, got) };
        Ok(())
    })
}

/// How many holds this handle's heartbeat engine is renewing right now.
///
/// On `MISTRI_OK`, `*count` receives the number.
///
/// # Safety
/// `locks` is NULL or a live handle; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_active_holds(
    locks: *const mistri_locks,
    count: *mut usize,
) -> mistri_status {
    ffi_boundary!("mistri_locks_active_holds", {
        let out = out_ptr(count, "count")?;
        // SAFETY: a live handle per this function's contract.
        let locks = unsafe { arg_ref(locks, "locks") }?;
        let got = locks.locks.active_holds();
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, got) };
        Ok(())
    })
}

/// Makes `locks` the process-wide adapter used by
/// `mistri_hold_start_configured` (the seed's `Mistri.locks = ...`),
/// replacing any configured before.
///
/// The configuration shares `locks` (same backend, same owner, same
/// heartbeat engine); the caller keeps its own handle and may free it.
///
/// Threading: any thread; the configuration is visible to all threads.
///
/// # Safety
/// `locks` is NULL (an error: use `mistri_configure_clear`) or a live
/// handle.
#[no_mangle]
pub unsafe extern "C" fn mistri_configure(locks: *const mistri_locks) -> mistri_status {
    ffi_boundary!("mistri_configure", {
        // SAFETY: a live handle per this function's contract.
        let locks = unsafe { arg_ref(locks, "locks") }?;
        // The replaced configuration is dropped here, outside the core's
        // configuration lock.
        drop(mistri_core::configure(Some(locks.locks.clone())));
        Ok(())
    })
}

/// Clears the process-wide adapter: `mistri_hold_start_configured` then
/// refuses (NULL hold) until `mistri_configure` is called again. Holds
/// already made keep running. Always `MISTRI_OK`.
///
/// Threading: any thread.
#[no_mangle]
pub extern "C" fn mistri_configure_clear() -> mistri_status {
    ffi_boundary!("mistri_configure_clear", {
        drop(mistri_core::configure(None));
        Ok(())
    })
}

/// Reads the process-wide adapter back.
///
/// On `MISTRI_OK`, `*out` receives a new handle that shares the configured
/// adapter (same backend, same owner), to be freed with
/// `mistri_locks_free`, or NULL if none is configured.
///
/// Threading: any thread.
///
/// # Safety
/// `out` is NULL (an error) or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_configured(out: *mut *mut mistri_locks) -> mistri_status {
    ffi_boundary!("mistri_configured", {
        let out = out_ptr(out, "out")?;
        let handle = mistri_core::locks().map_or(std::ptr::null_mut(), new_handle);
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, handle) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_constants_match_the_core() {
        assert_eq!(MISTRI_LEASE_TTL, mistri_core::LEASE_TTL.as_secs_f64());
        assert_eq!(MISTRI_HEARTBEAT, mistri_core::HEARTBEAT.as_secs_f64());
        assert_eq!(MISTRI_FLAG_TTL, mistri_core::FLAG_TTL.as_secs_f64());
    }
}
