//! `mistri_locks`: a handle on a backend (Memory, Local, Redis or Postgres) with the
//! seven operations of the contract, and the process-wide configured handle.

use crate::args::{secs, try_out, try_str};
use crate::handle::{free_box, to_boxed_mut_ptr, try_ref_from_ptr, Castable};
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

/// A handle (the core's `Locks`): a backend (Memory, Local, Redis or
/// Postgres) plus
/// the leases this handle has acquired, and the heartbeat engine that renews
/// its holds.
///
/// Each handle is one *owner*: `mistri_locks_renew` and
/// `mistri_locks_release` only touch leases that this handle (or a handle
/// obtained from it with `mistri_configured`) acquired. Two handles made by
/// `mistri_locks_memory_new` are two separate backends; use
/// `mistri_locks_new_owner` for a second owner on the same Memory
/// backend. Two Redis (or Postgres) handles on the same server and namespace (or two
/// Local handles on the same file) are two
/// owners of the same leases and flags, in this process or any other.
///
/// Ownership: made by `mistri_locks_memory_new`, `mistri_locks_local_new`,
/// `mistri_locks_redis_new`, `mistri_locks_postgres_new`,
/// `mistri_locks_new_owner` or `mistri_configured`; freed by
/// `mistri_locks_free`. Holds made from it keep what they need alive, so it
/// may be freed before them.
///
/// Threading: thread-safe. Any number of threads may call any function on
/// the same handle at once, except `mistri_locks_free`, which must be the
/// last call on it. After `fork()`, the child may keep using the handle: a
/// Redis or Postgres handle reconnects, and the child forgets the parent's leases (it
/// can neither renew nor release them).
pub struct mistri_locks {
    _private: [u8; 0],
}

impl Castable for mistri_locks {
    type RustType = Locks;
}

/// A new handle; the default holder labels of this process say "c"
/// (`host:pid c`) unless another face claimed the process first.
pub(crate) fn locks_handle(locks: Locks) -> *mut mistri_locks {
    mistri_core::internals::set_language("c");
    to_boxed_mut_ptr(locks)
}

/// Makes a handle on an in-process Memory backend: real TTLs on a
/// monotonic clock, visible only inside this process.
///
/// On `MISTRI_OK`, `*out` receives a new handle; free it with
/// `mistri_locks_free`.
///
/// # Safety
/// `out` is NULL (an error) or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_memory_new(out: *mut *mut mistri_locks) -> mistri_status {
    ffi_boundary!("mistri_locks_memory_new", {
        try_out!(out).write(locks_handle(Locks::memory()))
    })
}

/// Makes a handle on Redis at `url` (`redis://[user:pass@]host:port/db`, or
/// `rediss://` for TLS), with every key under `namespace` (NULL means the
/// default, `"mistri:locks"`). It takes the Redis schemes only
/// (`redis://`, `rediss://`, `unix://`, `redis+cluster://`,
/// `redis+sentinel://`); another backend's URL (one taken from a
/// `MISTRI_LOCKS_URL`, say) is `MISTRI_CONFIG` pointing to
/// `mistri_locks_open`, which opens every backend. Connections are opened on first use (a
/// small pool, reconnected after `fork()`), so an unreachable server shows
/// as `MISTRI_CONNECTION` from the first operation, not from here.
///
/// On `MISTRI_OK`, `*out` receives a new handle; free it with
/// `mistri_locks_free`.
///
/// Errors: `MISTRI_CONFIG` (unparsable URL, another backend's URL), `MISTRI_INVALID_ARGUMENT`
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
        let out = try_out!(out);
        let namespace =
            try_str!(opt namespace_, "namespace").unwrap_or(mistri_core::DEFAULT_NAMESPACE);
        out.write(locks_handle(Locks::redis(try_str!(url), namespace)?))
    })
}

/// Makes a handle on PostgreSQL at `url`: `postgres://` or `postgresql://`
/// with libpq's conventions (`postgres://user:pass@host:port/dbname`,
/// `?sslmode=`, `?application_name=`, `?host=/socket/dir` for a unix
/// socket), plus `?schema=NAME` for where the tables live (default
/// `mistri_locks`, created on first use; `mistri-locks schema` prints the
/// DDL for a role that may not run it). Every key lives under `namespace`
/// (NULL means the default, `"mistri:locks"`). Leases are rows judged by
/// the database's clock; every operation is one statement or one short
/// transaction, so a transaction pooler (PgBouncer) works too. The
/// application can refuse a stale holder's write inside its own
/// transaction with `SELECT mistri_locks.fence_check(resource, fence)`
/// (see docs/PROTOCOL.md).
///
/// This constructor accepts only PostgreSQL URLs (another backend's is
/// `MISTRI_CONFIG` pointing to `mistri_locks_open`, which takes them all).
///
/// On `MISTRI_OK`, `*out` receives a new handle; free it with
/// `mistri_locks_free`. Connections are reopened after `fork()`.
///
/// Errors: `MISTRI_CONFIG` (unparsable URL, another scheme, a bad
/// parameter), `MISTRI_INVALID_ARGUMENT` (namespace empty or containing
/// `{` or `}`), `MISTRI_CONNECTION` (if the server is unreachable while the
/// handle opens), `MISTRI_NULL_ARGUMENT` (url, out), `MISTRI_INVALID_UTF8`.
/// Messages never contain the password.
///
/// # Safety
/// `url` and `namespace_` are NULL or NUL-terminated strings; `out` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_postgres_new(
    url: *const c_char,
    namespace_: *const c_char,
    out: *mut *mut mistri_locks,
) -> mistri_status {
    ffi_boundary!("mistri_locks_postgres_new", {
        let out = try_out!(out);
        let namespace =
            try_str!(opt namespace_, "namespace").unwrap_or(mistri_core::DEFAULT_NAMESPACE);
        let postgres = mistri_core::Postgres::open(try_str!(url), namespace)?;
        out.write(locks_handle(Locks::new(postgres)))
    })
}

/// Makes a handle on a Local backend: leases and flags shared by every
/// process on this host that opens the same SQLite database file, with no
/// server. `path` is the file (created with mode 0600, its folder with 0700, if missing);
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
        let out = try_out!(out);
        let path = try_str!(opt path).map(std::path::Path::new);
        out.write(locks_handle(Locks::local(path)?))
    })
}

/// Makes another owner on the same backend as `locks`: it shares the
/// backend (a Memory backend's leases and flags, a Redis handle's
/// connection pool) but has its own acquired leases and its own heartbeat
/// engine, so it behaves like another process would.
///
/// On `MISTRI_OK`, `*out` receives a new handle; free it with
/// `mistri_locks_free`.
///
/// # Safety
/// `locks` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_locks_new_owner(
    locks: *const mistri_locks,
    out: *mut *mut mistri_locks,
) -> mistri_status {
    ffi_boundary!("mistri_locks_new_owner", {
        let out = try_out!(out);
        out.write(locks_handle(try_ref_from_ptr!(locks).new_owner()))
    })
}

/// Frees a handle. NULL is ignored.
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
        // SAFETY: per this function's contract, `locks` is NULL or a handle
        // given back exactly once.
        unsafe { free_box(locks) }
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
        let out = try_out!(acquired);
        out.write(try_ref_from_ptr!(locks).acquire(try_str!(key), secs("ttl", ttl)?)?)
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
        let out = try_out!(renewed);
        out.write(try_ref_from_ptr!(locks).renew(try_str!(key), secs("ttl", ttl)?)?)
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
        let out = try_out!(released);
        out.write(try_ref_from_ptr!(locks).release(try_str!(key))?)
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
        let out = try_out!(held);
        out.write(try_ref_from_ptr!(locks).held(try_str!(key))?)
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
        Ok(try_ref_from_ptr!(locks).set_flag(try_str!(key), secs("ttl", ttl)?)?)
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
        let out = try_out!(up);
        out.write(try_ref_from_ptr!(locks).flag(try_str!(key))?)
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
        Ok(try_ref_from_ptr!(locks).clear_flag(try_str!(key))?)
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
        let out = try_out!(fence);
        out.write(try_ref_from_ptr!(locks).fence(try_str!(key)).unwrap_or(0))
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
        let out = try_out!(broken);
        out.write(try_ref_from_ptr!(locks).break_lease(try_str!(key))?)
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
        let out = try_out!(count);
        out.write(try_ref_from_ptr!(locks).active_holds())
    })
}

/// Makes `locks` the process-wide handle used by
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
        // The replaced configuration is dropped here, outside the core's
        // configuration lock.
        drop(mistri_core::configure(Some(
            try_ref_from_ptr!(locks).clone(),
        )));
        Ok(())
    })
}

/// Clears the process-wide handle: `mistri_hold_start_configured` then
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

/// Reads the process-wide handle back.
///
/// On `MISTRI_OK`, `*out` receives a new handle that shares the configured
/// handle (same backend, same owner), to be freed with
/// `mistri_locks_free`, or NULL if none is configured.
///
/// Threading: any thread.
///
/// # Safety
/// `out` is NULL (an error) or writable.
#[no_mangle]
pub unsafe extern "C" fn mistri_configured(out: *mut *mut mistri_locks) -> mistri_status {
    ffi_boundary!("mistri_configured", {
        let out = try_out!(out);
        out.write(mistri_core::locks().map_or(std::ptr::null_mut(), locks_handle))
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
