//! How long one heartbeat tick of N holds takes on each backend.
//! `cargo run --release -p mistri_locks_core --example beat_cost -- 1000`
use mistri_locks::{Adapter, Local, Memory, Renewal};
use std::time::{Duration, Instant};

fn measure(name: &str, adapter: &dyn Adapter, n: usize) {
    let ttl = Duration::from_secs(5);
    let leases: Vec<_> = (0..n)
        .map(|i| adapter.acquire(&format!("k{i}"), ttl).unwrap().unwrap())
        .collect();
    let flags: Vec<String> = (0..n).map(|i| format!("stop-{i}")).collect();
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let renewals: Vec<Renewal<'_>> = leases
        .iter()
        .map(|lease| Renewal {
            lease,
            ttl,
            min_left: Duration::from_millis(100),
        })
        .collect();
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let beat = adapter
            .beat(&renewals, &flag_refs, Instant::now() + ttl)
            .unwrap();
        best = best.min(t.elapsed());
        assert!(beat.renewals.iter().all(|r| r.is_ok()));
    }
    println!(
        "{name:>6}: one tick of {n} renewals + {n} flag reads: best of 5 {:.1} ms",
        best.as_secs_f64() * 1e3
    );
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    measure("memory", &Memory::new(), n);
    let dir = std::env::temp_dir().join(format!("mistri-beat-{}", std::process::id()));
    measure(
        "local",
        &Local::open(Some(&dir.join("locks.db"))).unwrap(),
        n,
    );
    let _ = std::fs::remove_dir_all(dir);
}
