//! The adapter trait: what a backend (Memory, Redis, later Local) must do.
//!
//! The trait passes ownership explicitly: `acquire` returns a [`Lease`]
//! carrying the key, the owner token and the fencing number, and `renew` /
//! `release` take that lease back and act only if its token still owns the
//! key (atomically: Lua on Redis, one lock on Memory). The token-less
//! seven-method surface of the seed lives one level up, in
//! [`crate::Locks`], which keeps the issued leases inside itself.
//!
//! Implementations may assume the faces validated their arguments: keys are
//! non-empty and durations non-zero and at most [`crate::args::MAX_SECS`].

use crate::error::Result;
use std::sync::Arc;
use std::time::Duration;

/// A lease this process holds on a key: the proof of ownership that renew
/// and release present.
#[derive(Clone, PartialEq, Eq)]
pub struct Lease {
    // Shared with the issued-lease map of `Locks` (one allocation per key).
    key: Arc<str>,
    token: String,
    fence: u64,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a capability: keep it out of logs.
        f.debug_struct("Lease")
            .field("key", &self.key)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// Builds a lease; for adapter implementations.
    pub fn new(key: impl Into<Arc<str>>, token: impl Into<String>, fence: u64) -> Self {
        Lease {
            key: key.into(),
            token: token.into(),
            fence,
        }
    }
    /// The key the lease is on (without any namespace).
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The key as a shared string (cheap to clone).
    pub fn shared_key(&self) -> &Arc<str> {
        &self.key
    }
    /// The owner token minted at acquire (128 random bits as hex).
    pub fn token(&self) -> &str {
        &self.token
    }
    /// The fencing number: strictly greater than every earlier acquire's
    /// number for this key on this backend.
    pub fn fence(&self) -> u64 {
        self.fence
    }
}

/// One heartbeat tick's answers, in request order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Beat {
    /// For each renewal: did the lease's owner token still own the key (and
    /// so was it extended)?
    pub renewed: Vec<bool>,
    /// For each flag key: is the flag up?
    pub flags: Vec<bool>,
}

/// A backend for leases and flags. Object-safe, shared between threads.
///
/// # Errors
/// Every method returns [`crate::Error::Connection`] when the backend can't
/// be reached and [`crate::Error::Backend`] when it answers with an error.
/// "Someone else holds it" is never an error: it is `Ok(None)` / `Ok(false)`.
pub trait Adapter: Send + Sync + 'static {
    /// A short name for messages and inspection: `"memory"`, `"redis"`.
    fn name(&self) -> &'static str;

    /// Takes the lease on `key` for `ttl` if no live lease exists, minting a
    /// fresh owner token and the next fencing number.
    fn acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lease>>;

    /// Extends `lease` to `ttl` from now if its token still owns the key.
    /// Returns whether it did.
    fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool>;

    /// Deletes `lease` if its token still owns the key. Returns whether it
    /// did.
    fn release(&self, lease: &Lease) -> Result<bool>;

    /// Is a live lease on `key` (anyone's)?
    fn held(&self, key: &str) -> Result<bool>;

    /// Operator override: deletes whatever lease is on `key`, whoever owns
    /// it. Its holder finds out at its next renewal (its hold is lost).
    /// Returns whether there was a live lease.
    fn break_lease(&self, key: &str) -> Result<bool>;

    /// Raises the flag `key` for `ttl`.
    fn set_flag(&self, key: &str, ttl: Duration) -> Result<()>;

    /// Is the flag `key` up?
    fn flag(&self, key: &str) -> Result<bool>;

    /// Lowers the flag `key` (no error if it was down).
    fn clear_flag(&self, key: &str) -> Result<()>;

    /// One heartbeat tick: renew each `(lease, ttl)` and read each flag.
    ///
    /// Networked adapters override this to send everything in one round
    /// trip; the default does one call per item. An `Err` means the whole
    /// batch's outcome is unknown (the engine retries until deadlines pass).
    fn beat(&self, renewals: &[(&Lease, Duration)], flags: &[&str]) -> Result<Beat> {
        let renewed = renewals
            .iter()
            .map(|(lease, ttl)| self.renew(lease, *ttl))
            .collect::<Result<Vec<_>>>()?;
        let flags = flags
            .iter()
            .map(|key| self.flag(key))
            .collect::<Result<Vec<_>>>()?;
        Ok(Beat { renewed, flags })
    }
}
