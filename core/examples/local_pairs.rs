//! Acquire + release pairs of one key on a Local database for a while:
//! what a release costs while other processes listen on the same file
//! (issue 21, the fleet fan-out). A benchmark, not a test; see
//! `LOCAL-BELLS-NOTE.md` for how it is run beside N holders.
//!
//! ```sh
//! cargo run -p mistri_locks_core --example local_pairs -- DB [KEY] [SECONDS]
//! ```
//! Prints `pairs=<n> seconds=<s> pairs_per_s=<r>`.

use mistri_locks::Locks;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let db = PathBuf::from(args.next().ok_or("usage: local_pairs DB [KEY] [SECONDS]")?);
    let key = args.next().unwrap_or_else(|| "pairs:key".into());
    let seconds: f64 = args.next().map_or(Ok(3.0), |s| s.parse())?;
    let locks = Locks::local(Some(&db))?;
    let ttl = Duration::from_secs(30);
    // Warm up: the connection pool and the statement caches.
    for _ in 0..50 {
        locks.acquire(&key, ttl)?;
        locks.release(&key)?;
    }
    let run = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut pairs = 0u64;
    while start.elapsed() < run {
        if !locks.acquire(&key, ttl)? {
            return Err(format!("{key} is held elsewhere").into());
        }
        locks.release(&key)?;
        pairs += 1;
    }
    let took = start.elapsed().as_secs_f64();
    println!(
        "pairs={pairs} seconds={took:.3} pairs_per_s={:.1}",
        pairs as f64 / took
    );
    Ok(())
}
