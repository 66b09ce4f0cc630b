//! Acquire+release pairs per second through Sentinel, next to the same
//! adapter on the same master reached directly (`redis://`), in one run,
//! against a throwaway master + 2 replicas + 3 sentinels on 127.0.0.1.
//! What a `redis+sentinel://` URL costs on top of one server (docs/SCALE-OUT.md).
//!
//! Run: `cargo run --release -p mistri_locks_core --example sentinel_pairs [seconds]`
//! (candidates are measured in interleaved slices; each keeps its best).

use mistri_locks::Locks;
use mistri_locks_testkit::{command_on, RedisSentinels};
use std::time::{Duration, Instant};

/// Pairs/s of `pair` over `seconds`.
fn slice_rate(seconds: f64, pair: &mut dyn FnMut(), n: &mut u64) -> f64 {
    let start = Instant::now();
    let first = *n;
    while start.elapsed().as_secs_f64() < seconds {
        for _ in 0..50 {
            pair();
            *n += 1;
        }
    }
    (*n - first) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let ttl = Duration::from_secs(30);
    let set = RedisSentinels::start();
    let (master, _) = set.data_ports();
    let direct = Locks::redis(&format!("redis://127.0.0.1:{master}/0"), "bench:direct").unwrap();
    let sentinel = Locks::redis(&set.url(), "bench:sentinel").unwrap();
    let mut pairs: [(&str, &Locks); 2] = [
        ("redis:// (the master, directly)", &direct),
        ("redis+sentinel:// (same master)", &sentinel),
    ];
    let mut best = [0.0f64; 2];
    let mut counts = [0u64; 2];
    for (_, locks) in pairs.iter_mut() {
        for _ in 0..200 {
            assert!(locks.acquire("bench", ttl).unwrap());
            assert!(locks.release("bench").unwrap());
        }
    }
    for _ in 0..5 {
        for (i, (_, locks)) in pairs.iter().enumerate() {
            let mut pair = || {
                assert!(locks.acquire("bench", ttl).unwrap());
                assert!(locks.release("bench").unwrap());
            };
            best[i] = best[i].max(slice_rate(seconds / 5.0, &mut pair, &mut counts[i]));
        }
    }
    println!("acquire+release pairs/s (best of 5 interleaved slices, {seconds} s each in all)");
    for (i, (name, _)) in pairs.iter().enumerate() {
        println!("{name:<40} {:>10.0}", best[i]);
    }
    println!("sentinel / direct: {:.2}", best[1] / best[0]);

    // Round trips to the sentinels per pair: the commands they ran (also
    // counts their own chatter, a few per second, and our INFO).
    let asked = || -> u64 {
        set.sentinel_ports()
            .iter()
            .map(|p| {
                let info = command_on(*p, "INFO stats");
                info.lines()
                    .find_map(|l| l.strip_prefix("total_commands_processed:"))
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    };
    const PAIRS: u64 = 2000;
    let before = asked();
    let start = Instant::now();
    for _ in 0..PAIRS {
        assert!(sentinel.acquire("bench", ttl).unwrap());
        assert!(sentinel.release("bench").unwrap());
    }
    let took = start.elapsed();
    let sentinel_calls = asked() - before;
    println!(
        "{PAIRS} pairs through Sentinel in {took:.2?}: {sentinel_calls} commands run by \
         the sentinels ({:.3} per pair)",
        sentinel_calls as f64 / PAIRS as f64
    );
}
