//! A test's view of hand-offs (hidden; for the soak's checker, rule 4 of
//! `tests/support/src/history.rs`): each try a line's head makes because
//! it was rung is reported, just before it is sent, with the ring's time
//! and the release it was for. Between a release and the try its ring
//! causes, the key is free but its line's turn: a wait of that line that
//! runs out meanwhile waited for the hand-off (a loaded machine's
//! scheduling latency), not on a lost wake-up, which has no such try.
//! Nothing is reported, and nothing is paid but one atomic load per rung
//! try, unless a hook is installed.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Told the key, the line's id, the fencing number of the release that
/// rang the head (`None`: a ring that names no release) and how long ago
/// the ring came, on the thread about to send the try. It must not block,
/// nor call into the library.
pub type RungTry = fn(key: &str, line: &str, fence: Option<u64>, since_ring: Duration);

static HOOK: OnceLock<RungTry> = OnceLock::new();

/// Installs `hook` for the rest of this process (and its forked children);
/// `false` if one was installed before (it stays).
pub fn observe_rung_tries(hook: RungTry) -> bool {
    HOOK.set(hook).is_ok()
}

/// A try of `line` on `key`, caused by the ring `rung`, is about to go.
pub(crate) fn rung_try(key: &str, line: &str, rung: super::lines::Rung) {
    if let Some(hook) = HOOK.get() {
        let (at, fence) = rung;
        hook(
            key,
            line,
            fence,
            Instant::now().saturating_duration_since(at),
        );
    }
}
