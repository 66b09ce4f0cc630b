use super::slab::{index_of, Entry, Slab};
use super::state::State;
use super::status::{HoldStatus, Ms};
use super::threads::renew_early;
use super::timers::Kind;
use super::*;
use crate::contract::adapter::Lease;
use crate::contract::push::FlagWatcher;
use crate::signal::AbortSignal;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn entry(at: Ms) -> Entry {
    Entry {
        status: Arc::new(HoldStatus::new(
            Lease::new("k", "t", 1),
            Instant::now() + Duration::from_secs(60),
        )),
        signal: AbortSignal::new(),
        stop_key: None,
        last_error: None,
        guard: None,
        ttl: ns(Duration::from_secs(3)),
        margin: 0,
        renew_every: ns(Duration::from_millis(10)),
        tick: ns(Duration::from_millis(10)),
        rtt: 0,
        next_renew: at,
        safe_deadline: at,
        next_check: at,
        renew_pos: NOWHERE,
        check_pos: NOWHERE,
        deadline_pos: NOWHERE,
        recheck: false,
        in_flight: false,
        subscribe_pending: false,
    }
}

/// Every queued timer is where its entry says, and every entry that
/// says it is queued is there.
fn consistent(state: &mut State) {
    let mut queued = 0;
    for (id, e) in state.entries.iter_mut() {
        let (at, pos) = (e.next_renew, e.renew_pos);
        if pos != NOWHERE {
            queued += 1;
            assert_eq!(
                state.sched.renew_due.due[&at][pos as usize],
                index_of(id),
                "entry {id} is not where it says"
            );
        }
    }
    let listed: usize = state.sched.renew_due.due.values().map(Vec::len).sum();
    assert_eq!(
        listed, queued,
        "the queue lists entries that say they are not queued"
    );
    assert!(state.sched.renew_due.due.values().all(|l| !l.is_empty()));
}

#[test]
fn slab_ids_do_not_find_a_reused_cell() {
    let mut slab = Slab::default();
    let a = slab.insert(entry(1));
    assert!(slab.get(a).is_some());
    assert!(slab.remove(a).is_some());
    let b = slab.insert(entry(2));
    assert_eq!(index_of(a), index_of(b), "the cell is reused");
    assert!(
        slab.get(a).is_none(),
        "an old id must not find the new hold"
    );
    assert!(slab.remove(a).is_none());
    assert_eq!(slab.len, 1);
    assert_eq!(slab.get(b).map(|e| e.next_renew), Some(2));
}

#[test]
fn timers_stay_consistent_through_moves_and_removals() {
    let mut state = State::default();
    let mut ids = Vec::new();
    let mut seed = 7u64;
    let mut rand = move |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for step in 0..5000 {
        match rand(4) {
            0 | 1 => {
                let id = state.entries.insert(entry(rand(8)));
                state.arm(Kind::Renew, id);
                ids.push(id);
            }
            2 if !ids.is_empty() => {
                let id = ids[rand(ids.len() as u64) as usize];
                state.schedule(Kind::Renew, id, rand(8));
            }
            _ if !ids.is_empty() => {
                let id = ids.swap_remove(rand(ids.len() as u64) as usize);
                assert!(state.remove_entry(id).is_some());
            }
            _ => {}
        }
        if step % 50 == 0 {
            consistent(&mut state);
        }
    }
    consistent(&mut state);
    // Everything due by 3 (no early allowance) comes out, in time order,
    // and nothing else.
    let State { entries, sched, .. } = &mut state;
    let ready = sched.renew_due.take_ready(entries, 3, |_| 0);
    let times: Vec<Ms> = ready.iter().map(|&i| entries.at(i).next_renew).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "in time order");
    assert!(times.iter().all(|&t| t <= 3));
    assert!(sched.renew_due.first().is_none_or(|t| t > 3));
    for &i in &ready {
        assert_eq!(entries.at(i).renew_pos, NOWHERE);
    }
    consistent(&mut state);
}

#[test]
fn take_ready_goes_early_by_the_entrys_allowance_only() {
    let mut state = State::default();
    let early = state.entries.insert(entry(10));
    state.arm(Kind::Renew, early);
    let mut late = entry(10);
    late.renew_every = ns(Duration::from_millis(2));
    let late = state.entries.insert(late);
    state.arm(Kind::Renew, late);
    let State { entries, sched, .. } = &mut state;
    // At 6: the first may go 5 ms early (half of 10 ms), the second 1.
    let ready = sched.renew_due.take_ready(entries, 6, renew_early);
    assert_eq!(ready, vec![index_of(early)]);
    assert_eq!(sched.renew_due.first(), Some(10), "the other stays queued");
    consistent(&mut state);
}

/// A host suspend (injected: `State::suspended`, as the scheduler calls it
/// when `CLOCK_BOOTTIME` ran ahead of the monotonic clock) moves every safe
/// deadline earlier by its length: a hold whose deadline is then past is
/// lost at once with a reason naming the suspend, one moved by its margin
/// or more is told `at_risk`, and one the suspend left safe keeps going.
#[test]
fn a_host_suspend_moves_every_safe_deadline_and_tells_the_holds() {
    use crate::stats::{Event, EventKind};
    use std::sync::Mutex;
    let mut state = State::default();
    let seen: Arc<Mutex<Vec<Event>>> = Arc::default();
    let sink = seen.clone();
    state.stats.add_hook(Arc::new(move |e: &Event| {
        sink.lock().unwrap().push(e.clone())
    }));
    let now: Ms = 100_000;
    let margin = ns(Duration::from_secs(1));
    let mut hold = |deadline: Ms| {
        let mut e = entry(now + 500);
        e.safe_deadline = deadline;
        e.margin = margin;
        let id = state.entries.insert(e);
        state.arm(Kind::Deadline, id);
        id
    };
    let doomed = hold(now + 10_000); // 10 s left: a 12.5 s suspend ends it
    let shaken = hold(now + 20_000); // 20 s left: 7.5 s after it, told
    state.suspended(Duration::from_millis(12_500), now);
    assert_eq!(
        state.entries.get(shaken).map(|e| e.safe_deadline),
        Some(now + 7_500)
    );
    assert_eq!(
        state.entries.get(doomed).map(|e| e.safe_deadline),
        Some(now - 2_500)
    );
    let mut trips = Vec::new();
    super::threads::expire(&mut state, now, &mut trips);
    assert_eq!(trips.len(), 1, "only the doomed hold is lost");
    assert!(
        trips[0].1.contains("host was suspended for 12.500 s"),
        "{}",
        trips[0].1
    );
    assert!(state.entries.get(doomed).is_none());
    assert!(state.entries.get(shaken).is_some());
    state.stats.flush();
    // A suspend shorter than the margin moves the deadline without a word.
    state.suspended(Duration::from_millis(300), now);
    assert_eq!(
        state.entries.get(shaken).map(|e| e.safe_deadline),
        Some(now + 7_200)
    );
    state.stats.flush();
    let deadline = Instant::now() + Duration::from_secs(5);
    let kinds = loop {
        let kinds: Vec<EventKind> = seen.lock().unwrap().iter().map(|e| e.kind).collect();
        if kinds.len() >= 2 || Instant::now() > deadline {
            break kinds;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(kinds, [EventKind::AtRisk, EventKind::Lost]);
    consistent(&mut state);
}

/// A server clock that jumps ahead (injected readings, as the I/O thread
/// passes them from each beat's answer) tells the holds whose safety
/// margin it exceeds `at_risk`; a step back tells nobody.
#[test]
fn a_server_clock_jump_ahead_tells_the_holds_whose_margin_it_exceeds() {
    use super::clocks::ClockReading;
    use crate::stats::{Event, EventKind};
    use std::sync::Mutex;
    let mut state = State::default();
    let seen: Arc<Mutex<Vec<Event>>> = Arc::default();
    let sink = seen.clone();
    state.stats.add_hook(Arc::new(move |e: &Event| {
        sink.lock().unwrap().push(e.clone())
    }));
    for (key, margin) in [("tight", 1), ("loose", 10)] {
        let mut e = entry(1_000);
        e.status = Arc::new(HoldStatus::new(
            Lease::new(key, "t", 1),
            Instant::now() + Duration::from_secs(60),
        ));
        e.margin = ns(Duration::from_secs(margin));
        state.entries.insert(e);
    }
    let read = |at_s: u64, server_s: u64| ClockReading {
        sent: at_s * 1_000_000_000,
        done: at_s * 1_000_000_000 + 2_000_000,
        server: Duration::from_secs(1_700_000_000 + server_s),
    };
    state.server_clock_read(read(1, 1));
    state.server_clock_read(read(2, 2)); // steady
    state.server_clock_read(read(3, 8)); // 5 s ahead
    state.server_clock_read(read(4, 4)); // 5 s back: nobody
    state.stats.flush();
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen.lock().unwrap().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    let told: Vec<(EventKind, String, String)> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|e| (e.kind, e.key.clone(), e.reason.clone().unwrap_or_default()))
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(
        (told[0].0, told[0].1.as_str()),
        (EventKind::AtRisk, "tight")
    );
    assert!(told[0].2.contains("jumped ahead by 4.99"), "{}", told[0].2);
}

/// Issue 40, item 7: a short hold wakes no engine thread. Register
/// notifies the scheduler only when the new entry is due before its
/// planned wake, and unregister never does, so holds whose first renewal
/// is seconds away cost no scheduler wake: it wakes at its planned times
/// only, at most once per [`MAX_TICK`] while it has holds or is idle
/// (plus the first registration, which starts it). Before, every register
/// and every unregister notified it: two wakes per hold.
#[test]
fn short_holds_do_not_wake_the_scheduler() {
    let adapter: Arc<dyn crate::Adapter> = Arc::new(crate::Memory::new());
    let engine = Engine::new(adapter.clone());
    let hold = |key: &str| {
        let lease = adapter
            .acquire(key, Duration::from_secs(30))
            .unwrap()
            .unwrap();
        let now = Instant::now();
        engine
            .register(Registration {
                status: Arc::new(HoldStatus::new(lease, now + Duration::from_secs(30))),
                ttl: Duration::from_secs(30),
                heartbeat: Duration::from_secs(10),
                margin: Duration::from_secs(1),
                stop_key: None,
                stop_up: None,
                signal: AbortSignal::new(),
                sent: now,
                confirmed: now,
                max_hold: None,
                progress_timeout: None,
            })
            .unwrap()
    };
    // The first hold starts the scheduler; wait until it sleeps.
    let first = hold("first");
    let asleep = |engine: &Engine| engine.shared().state.lock().sleep != state::Sleep::Awake;
    let started = Instant::now();
    while !asleep(&engine) && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(asleep(&engine), "the scheduler never went to sleep");
    let before = engine.shared().state.lock().scheduler_wakes;
    let t0 = Instant::now();
    const HOLDS: u32 = 40;
    for i in 0..HOLDS {
        let id = hold(&format!("k{i}"));
        // Time for a notified scheduler to run (the old rule woke it here
        // and below; the new rule must not).
        std::thread::sleep(Duration::from_millis(1));
        assert_eq!(engine.unregister(id), Unregistered::Removed);
        std::thread::sleep(Duration::from_millis(1));
    }
    let wakes = engine.shared().state.lock().scheduler_wakes - before;
    // Its planned wakes: at most one per MAX_TICK of the time that passed,
    // and the one in progress.
    let ticks = t0.elapsed().as_nanos().div_ceil(MAX_TICK.as_nanos()) as u64;
    assert!(
        wakes <= ticks + 1,
        "{HOLDS} short holds woke the scheduler {wakes} times in {:?} (planned wakes: {})",
        t0.elapsed(),
        ticks + 1
    );
    assert_eq!(engine.unregister(first), Unregistered::Removed);
}

/// Issue 40, item 7: a hold whose acquire read its stop flag asks the
/// push listener for its key only once it is [`SUBSCRIBE_AFTER`] old (a
/// shorter hold never subscribes); a later hold of a key already asked
/// for reads its flag at its tick, unless a push or poll came after its
/// acquire was sent (then at once: it was not watching yet). Driven by
/// hand: the engine's threads are marked running, so none starts.
#[test]
fn a_stop_key_is_subscribed_once_its_hold_is_old_enough() {
    let adapter: Arc<dyn crate::Adapter> = Arc::new(crate::Memory::new());
    let engine = Engine::new(adapter.clone());
    {
        let mut state = engine.shared().state.lock();
        state.scheduler_running = true;
        state.io_running = true;
    }
    let hold = |key: &str, sent: Instant| {
        let lease = adapter
            .acquire(key, Duration::from_secs(30))
            .unwrap()
            .unwrap();
        engine
            .register(Registration {
                status: Arc::new(HoldStatus::new(lease, sent + Duration::from_secs(30))),
                ttl: Duration::from_secs(30),
                heartbeat: Duration::from_secs(10),
                margin: Duration::from_secs(1),
                stop_key: Some("job:1:stop".into()),
                stop_up: Some(false),
                signal: AbortSignal::new(),
                sent,
                confirmed: sent,
                max_hold: None,
                progress_timeout: None,
            })
            .unwrap()
    };
    let shared = engine.shared().clone();
    let t0 = Instant::now();
    let first = hold("a", t0);
    let collect = |at: Instant| {
        let mut trips = Vec::new();
        let mut state = shared.state.lock();
        let job = super::threads::collect_due(&mut state, at, &mut trips);
        (job.map(|j| j.check_ids), state.subscribed("job:1:stop"))
    };
    {
        let state = shared.state.lock();
        assert!(!state.subscribed("job:1:stop"), "asked for at once");
        assert!(state.entries.get(first).unwrap().subscribe_pending);
    }
    // Before SUBSCRIBE_AFTER: nothing (not even early, as reads may be).
    assert_eq!(collect(t0), (None, false));
    // Old enough: asked for, and no read of its own (the listener's
    // confirmation makes it); its next read a tick on.
    let (job, subscribed) = collect(t0 + SUBSCRIBE_AFTER + Duration::from_millis(1));
    assert_eq!((job, subscribed), (None, true));
    {
        let state = shared.state.lock();
        let e = state.entries.get(first).unwrap();
        assert!(!e.subscribe_pending);
        assert!(e.next_check >= ms(t0 + Duration::from_millis(1000)));
    }
    // A second hold of the asked-for key: its read at its tick.
    let t1 = Instant::now();
    let second = hold("b", t1);
    {
        let state = shared.state.lock();
        let e = state.entries.get(second).unwrap();
        assert!(!e.subscribe_pending);
        assert_eq!(e.next_check, ms(t1 + Duration::from_secs(1)));
    }
    // A poll (the listener's confirmation) after a third hold's acquire
    // was sent but before it registered: that hold reads at once.
    let t2 = Instant::now();
    shared.poll_flag("job:1:stop");
    let third = hold("c", t2);
    {
        let state = shared.state.lock();
        assert_eq!(state.entries.get(third).unwrap().next_check, ms(t2));
    }
    for id in [first, second, third] {
        assert_eq!(engine.unregister(id), Unregistered::Removed);
    }
    assert!(shared.state.lock().watching.is_empty());
}

/// Issue 40, item 7: a stream of short holds whose subscriptions wait
/// ([`SUBSCRIBE_AFTER`]) costs the scheduler at most one wake per
/// `SUBSCRIBE_AFTER`: it keeps pace with them, so their registers find a
/// wake planned in time and need no notify. Without the pace, each hold
/// after a quiet wake notified it and each left a timer wake behind:
/// about two wakes per `SUBSCRIBE_AFTER` at this spacing.
#[test]
fn a_stream_of_short_holds_costs_one_scheduler_wake_per_subscribe_after() {
    let adapter: Arc<dyn crate::Adapter> = Arc::new(crate::Memory::new());
    let engine = Engine::new(adapter.clone());
    let hold = |key: &str| {
        let lease = adapter
            .acquire(key, Duration::from_secs(30))
            .unwrap()
            .unwrap();
        let now = Instant::now();
        engine
            .register(Registration {
                status: Arc::new(HoldStatus::new(lease, now + Duration::from_secs(30))),
                ttl: Duration::from_secs(30),
                heartbeat: Duration::from_secs(10),
                margin: Duration::from_secs(1),
                stop_key: Some(format!("{key}:stop")),
                stop_up: Some(false),
                signal: AbortSignal::new(),
                sent: now,
                confirmed: now,
                max_hold: None,
                progress_timeout: None,
            })
            .unwrap()
    };
    let first = hold("first");
    std::thread::sleep(Duration::from_millis(20));
    let before = engine.shared().state.lock().scheduler_wakes;
    let t0 = Instant::now();
    for i in 0..40 {
        let id = hold(&format!("k{i}"));
        assert_eq!(engine.unregister(id), Unregistered::Removed);
        std::thread::sleep(SUBSCRIBE_AFTER / 2);
    }
    let wakes = engine.shared().state.lock().scheduler_wakes - before;
    let paced = t0.elapsed().as_nanos().div_ceil(SUBSCRIBE_AFTER.as_nanos()) as u64;
    assert!(
        wakes <= paced + 2,
        "40 short holds in {:?} woke the scheduler {wakes} times (one per {SUBSCRIBE_AFTER:?}: {paced})",
        t0.elapsed()
    );
    assert_eq!(engine.unregister(first), Unregistered::Removed);
}
