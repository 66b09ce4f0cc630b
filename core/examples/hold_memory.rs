//! Live heap bytes per hold (a counting allocator), on Memory and Redis:
//! where the per-hold memory of `heartbeat_scale` goes. A benchmark tool.
//!
//! `cargo run --release -p mistri_locks_core --example hold_memory -- [N] [redis URL]`

use mistri_locks::{HoldOptions, Locks};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn per_hold(name: &str, locks: &Locks, n: usize) {
    let opts = HoldOptions {
        ttl: Duration::from_secs(10),
        heartbeat: Duration::from_secs(1),
        ..HoldOptions::default()
    };
    let keys: Vec<String> = (0..n).map(|i| format!("hold-{i}")).collect();
    let mut holds = Vec::with_capacity(n);
    // One hold first: threads, pools and connections are not per hold.
    holds.push(locks.hold("warm-up", opts.clone()).unwrap().unwrap());
    let before = LIVE.load(Ordering::Relaxed);
    for k in &keys {
        holds.push(locks.hold(k, opts.clone()).unwrap().unwrap());
    }
    let after = LIVE.load(Ordering::Relaxed);
    println!(
        "{name}: {} live heap bytes per hold ({n} holds; the Hold values themselves are {} bytes each)",
        (after - before) / n as isize,
        std::mem::size_of::<mistri_locks::Hold>()
    );
    for h in holds {
        let _ = h.release();
    }
    // Plain leases (no hold) for comparison: what the lease and the
    // issued-lease map cost alone.
    let before = LIVE.load(Ordering::Relaxed);
    for k in &keys {
        assert!(locks.acquire(k, Duration::from_secs(10)).unwrap());
    }
    let after = LIVE.load(Ordering::Relaxed);
    println!(
        "{name}: {} live heap bytes per plain lease",
        (after - before) / n as isize
    );
    for k in &keys {
        let _ = locks.release(k);
    }
    let signals: Vec<mistri_locks::AbortSignal> = Vec::with_capacity(n);
    let before = LIVE.load(Ordering::Relaxed);
    let signals: Vec<_> = signals
        .into_iter()
        .chain((0..n).map(|_| mistri_locks::AbortSignal::new()))
        .collect();
    let after = LIVE.load(Ordering::Relaxed);
    println!(
        "{name}: {} live heap bytes per AbortSignal",
        (after - before) / n as isize - 8
    );
    drop(signals);
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    per_hold("memory", &Locks::memory(), n);
    if let Some(url) = std::env::args().nth(2) {
        let ns = format!("mistri:holdmem:{}", std::process::id());
        per_hold("redis", &Locks::redis(&url, &ns).unwrap(), n);
    }
}
