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
    // its counter runs ahead of the clock floor (here by 10 ms).
    let busy = Memory::new();
    let ahead = fence_of(&busy) + 10_000;
    busy.state().lock().fence = ahead;
    let last = fence_of(&busy);
    assert!(last > ahead);
    let first = fence_of(&Memory::new());
    assert!(first > last, "a fresh adapter's fence {first} after {last}");
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
