//! Unit tests of the Memory adapter ([`super`]).

use super::*;

fn fence_of(m: &Memory) -> u64 {
    let lease = m.acquire("job", Duration::from_secs(30)).unwrap();
    let lease = lease.expect("job is free");
    assert!(m.release(&lease).unwrap());
    lease.fence()
}

#[test]
fn a_fresh_adapter_issues_above_a_busy_one() {
    // A busy adapter issues more than one fence per microsecond, so
    // its counter runs ahead of the clock floor (here by 1.5 ms, as far
    // as a rate takes it before an acquire waits).
    let busy = Memory::new();
    let ahead = fence_of(&busy) + 1_500;
    busy.state().lock().fence = ahead;
    let last = fence_of(&busy);
    assert!(last > ahead);
    let first = fence_of(&Memory::new());
    assert!(first > last, "a fresh adapter's fence {first} after {last}");
}

/// The wall clock now, in µs since 1970 (a fence's floor).
fn wall_us() -> u64 {
    crate::contract::fence::floor_now()
}

/// Waits (at most a second) until no Memory adapter of this process has
/// issued a fence ahead of the clock (other tests run beside this one).
fn settle() {
    let start = Instant::now();
    while ISSUED.load(Ordering::SeqCst) > wall_us() {
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "fences stay ahead"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A counter that a rate above one acquire per µs took to the bound (and
/// past it, as far as another millisecond): the next acquire waits for
/// the clock, and its fence is at most `MAX_FENCE_LEAD` ahead of the wall
/// clock read after it returned. Before (issue 39, finding 9) it was
/// issued at once, as far ahead as the counter was: a restarted process
/// issued lower fences until the clock caught up.
#[test]
fn a_fence_never_runs_more_than_a_millisecond_ahead_of_the_clock() {
    let lead = MAX_FENCE_LEAD.as_micros() as u64;
    let m = Memory::new();
    // Up to 900 µs past the bound: the rate's lead (a wait); the test's own
    // reads come first, so the acquire sees at most that much.
    for extra in [1, 200, 900] {
        settle();
        let ahead = wall_us() + lead + extra;
        m.state().lock().fence = ahead;
        let fence = fence_of(&m);
        let clock = wall_us();
        assert!(fence > ahead, "{fence} after {ahead}");
        assert!(
            fence <= clock + lead,
            "{} µs ahead of the clock (counter {extra} µs past the bound)",
            fence - clock
        );
    }
    // A tight loop from the bound on: every fence within the bound.
    settle();
    m.state().lock().fence = wall_us() + lead;
    let mut last = 0;
    for _ in 0..2_000 {
        let fence = fence_of(&m);
        assert!(fence > last);
        last = fence;
        let clock = wall_us();
        assert!(fence <= clock + lead, "{} µs ahead", fence - clock);
    }
    // A lead the rate can't explain (a wall-clock step back): no wait,
    // the counter keeps counting.
    settle();
    let stepped = wall_us() + 50_000;
    m.state().lock().fence = stepped;
    assert_eq!(fence_of(&m), stepped + 1);
}

#[test]
fn an_acquire_that_waited_for_the_lock_reads_the_clock_after_it() {
    // An acquire blocks on the store's lock while another thread
    // re-reads the clock pair; its wall time must not run ahead of
    // the wall clock (an instant read before the lock, paired with
    // a fresher wall reading, would: by the wait).
    let m = Arc::new(Memory::new());
    let state = m.state().lock();
    let waiter = {
        let m = m.clone();
        std::thread::spawn(move || m.acquire("job", Duration::from_secs(30)))
    };
    std::thread::sleep(Duration::from_millis(100));
    let mut state = state;
    state.clock = wall_now();
    drop(state);
    let lease = waiter.join().unwrap().unwrap().expect("job is free");
    assert!(m.release(&lease).unwrap());
    // The next acquire derives its wall time from the pair the
    // waiter left behind.
    let next = m.acquire("job", Duration::from_secs(30)).unwrap();
    let lease = next.expect("job is free");
    let now = SystemTime::now();
    let info = m.info("job").unwrap().expect("held");
    let at = info.holder.expect("a holder description").acquired_at;
    assert!(
        at <= now,
        "acquired {:?} ahead of the wall clock",
        at.duration_since(now).unwrap()
    );
    assert!(m.release(&lease).unwrap());
}

#[test]
fn expired_entries_are_pruned() {
    let m = Memory::new();
    for i in 0..1000 {
        m.acquire(&format!("k{i}"), Duration::from_nanos(1))
            .unwrap();
        m.set_flag(&format!("f{i}"), Duration::from_nanos(1))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(2));
    m.acquire("last", Duration::from_secs(5)).unwrap();
    let state = m.state().lock();
    assert!(
        state.leases.len() + state.flags.len() < 300,
        "{}",
        state.leases.len()
    );
}
