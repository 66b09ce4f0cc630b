//! Loom models of the engine's state machine (built with
//! `RUSTFLAGS="--cfg loom"`; docs/RELIABILITY.md, "Model-checked").
//!
//! The real state and its transitions run: [`Engine::register`] (insert),
//! `collect_due` (a renewal goes in flight), `expire` (the safe deadline),
//! `apply` (a beat's answers), [`Engine::unregister`] (the release), the
//! slab, the timers, and the Memory backend's compare-and-renew and
//! compare-and-delete (its store lock is a model point under `cfg(loom)`).
//! The threads are the model's: the engine's own loops wait on timers,
//! which loom cannot run, so each model thread is one round of one of
//! them, written as `threads.rs` writes it — the I/O thread's round
//! (`run_io`: beat, `apply` under the lock, then the undo deletes), the
//! scheduler's expiry (`run_scheduler`: `expire` under the lock, then the
//! trips) and the holder's release (`Hold::release`: `unregister`, then
//! the compare-and-delete unless the hold was already lost). The engine's
//! threads are marked running before the first insert, so none starts.

use super::state::{trip_all, Job, Shared, Trips};
use super::threads::{apply, collect_due, expire, plan, sleep};
use super::{Engine, HoldStatus, Registration, Unregistered};
use crate::contract::adapter::{Adapter, Lease, Renewal};
use crate::signal::AbortSignal;
use crate::Memory;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(30);
const MARGIN: Duration = Duration::from_secs(1);

fn confirmed(shared: &Shared) -> u64 {
    shared
        .stats
        .renewals_confirmed
        .load(std::sync::atomic::Ordering::SeqCst)
}

/// An engine on a fresh Memory backend, its threads marked running (so an
/// insert starts none: the model's threads play them).
fn engine() -> (Engine, Arc<dyn Adapter>) {
    let adapter: Arc<dyn Adapter> = Arc::new(Memory::new());
    let engine = Engine::new(adapter.clone());
    {
        let mut state = engine.shared().state.lock();
        state.scheduler_running = true;
        state.io_running = true;
    }
    (engine, adapter)
}

/// A hold on `key`: the lease taken now; the engine is told it was sent
/// 20 s ago, so its renewal is due now and its safe deadline is 9 s away.
fn insert(engine: &Engine, adapter: &Arc<dyn Adapter>, key: &str) -> (u64, Lease, AbortSignal) {
    insert_sent(
        engine,
        adapter,
        key,
        Instant::now() - Duration::from_secs(20),
    )
}

/// A hold on `key` whose acquire the engine is told was sent at `sent`.
fn insert_sent(
    engine: &Engine,
    adapter: &Arc<dyn Adapter>,
    key: &str,
    sent: Instant,
) -> (u64, Lease, AbortSignal) {
    let lease = adapter.acquire(key, TTL).unwrap().expect("the key is free");
    let signal = AbortSignal::new();
    let id = engine
        .register(Registration {
            status: Arc::new(HoldStatus::new(lease.clone(), sent + TTL)),
            ttl: TTL,
            heartbeat: Duration::from_secs(10),
            margin: MARGIN,
            stop_key: None,
            stop_up: None,
            signal: signal.clone(),
            sent,
            confirmed: sent,
            max_hold: None,
            progress_timeout: None,
        })
        .unwrap();
    (id, lease, signal)
}

/// The scheduler collects the due renewal: it is in flight from now on.
fn collect(shared: &Shared) -> Job {
    let mut state = shared.state.lock();
    let mut trips = Trips::new();
    let job = collect_due(&mut state, Instant::now(), &mut trips).expect("a renewal is due");
    assert!(trips.is_empty());
    assert_eq!(job.renew_ids.len(), 1);
    state.io_busy = true;
    job
}

/// The I/O thread's round for `job` (as `run_io`): the beat, its answers
/// applied under the lock, then the undo deletes. Returns how many of
/// those deleted a lease.
fn io_round(shared: &Shared, mut job: Job) -> usize {
    let renewals: Vec<Renewal<'_>> = job
        .renewals
        .iter()
        .map(|(status, ttl, min_left)| Renewal {
            lease: &status.lease,
            ttl: *ttl,
            min_left: *min_left,
        })
        .collect();
    let deadline = job.deadline.expect("bounded by a safe deadline");
    let sent = Instant::now();
    let result = shared.adapter.beat(&renewals, &[], deadline);
    let done = Instant::now();
    drop(renewals);
    let mut trips = Trips::new();
    let mut deletes = std::mem::take(&mut job.deletes);
    {
        let mut state = shared.state.lock();
        apply(
            &mut state,
            &job,
            result,
            sent,
            done,
            &mut trips,
            &mut deletes,
        );
        state.orphans.clear();
        state.io_busy = false;
    }
    trip_all(trips);
    deletes
        .iter()
        .filter(|(lease, until)| shared.adapter.release_by(lease, *until).unwrap())
        .count()
}

/// The scheduler's expiry at `now_ms` (as `run_scheduler`): the holds past
/// their safe deadline leave the engine and are told. Returns the
/// confirmed-renewal count at the moment of telling, if it told any.
fn expire_round(shared: &Shared, now_ms: u64) -> Option<u64> {
    let mut trips = Trips::new();
    let told_at = {
        let mut state = shared.state.lock();
        expire(&mut state, now_ms, &mut trips);
        (!trips.is_empty()).then(|| confirmed(shared))
    };
    trip_all(trips);
    told_at
}

/// A counter of the signal's callbacks (the holder being told).
fn count_tells(signal: &AbortSignal) -> loom::sync::Arc<AtomicUsize> {
    let tells = loom::sync::Arc::new(AtomicUsize::new(0));
    let counter = tells.clone();
    signal.on_abort(move |reason| {
        assert!(reason.is_some_and(|r| r.starts_with("lease lost:")));
        counter.fetch_add(1, Ordering::SeqCst);
    });
    tells
}

/// A renewal in flight, the holder's release and the safe deadline, all at
/// once. Exactly one of release and deadline takes the hold out; no
/// renewal is confirmed after either; at most one delete succeeds; the
/// lease is gone from the backend at the end in every order (a renewal
/// that took after the hold was told is undone, one that comes after the
/// release finds nothing).
#[test]
fn release_and_deadline_racing_a_renewal_in_flight() {
    loom::model(|| {
        let (engine, adapter) = engine();
        let (id, lease, signal) = insert(&engine, &adapter, "k");
        let tells = count_tells(&signal);
        let shared = engine.shared().clone();
        let deadline_ms = shared.state.lock().entries.get(id).unwrap().safe_deadline;
        let job = collect(&shared);

        let io = {
            let shared = shared.clone();
            thread::spawn(move || io_round(&shared, job))
        };
        let scheduler = {
            let shared = shared.clone();
            thread::spawn(move || expire_round(&shared, deadline_ms))
        };
        // The holder (as Hold::release).
        let (released, confirmed_at_release, holder_deleted) = match engine.unregister(id) {
            Unregistered::Gone => (false, None, false),
            Unregistered::Removed => {
                let at = confirmed(&shared);
                (true, Some(at), adapter.release(&lease).unwrap())
            }
        };
        let undone = io.join().unwrap();
        let told_at = scheduler.join().unwrap();

        assert!(released ^ told_at.is_some(), "release or deadline, once");
        assert_eq!(tells.load(Ordering::SeqCst), usize::from(told_at.is_some()));
        assert_eq!(signal.is_aborted(), told_at.is_some());
        let end = confirmed(&shared);
        if let Some(at) = told_at.or(confirmed_at_release) {
            assert_eq!(end, at, "no renewal is confirmed after the hold left");
        }
        assert!(usize::from(holder_deleted) + undone <= 1, "one delete");
        assert!(!adapter.held("k").unwrap(), "no lease outlives its hold");
        assert_eq!(engine.len(), 0);
    });
}

/// A release while its renewal is in flight, then a new hold of the same
/// key inserted into the slab cell the released one freed: the old
/// renewal's answer never touches the new hold (ids carry a generation,
/// renewals compare the owner token), and the new lease survives.
#[test]
fn a_new_hold_in_the_freed_cell_while_the_old_renewal_is_in_flight() {
    loom::model(|| {
        let (engine, adapter) = engine();
        let (old, old_lease, old_signal) = insert(&engine, &adapter, "k");
        let shared = engine.shared().clone();
        let job = collect(&shared);
        let io = {
            let shared = shared.clone();
            thread::spawn(move || io_round(&shared, job))
        };
        assert_eq!(engine.unregister(old), Unregistered::Removed);
        assert!(adapter.release(&old_lease).unwrap());
        let (new, new_lease, new_signal) = insert(&engine, &adapter, "k");
        assert_eq!(new as u32, old as u32, "the freed cell is reused");
        assert_ne!(new, old);
        let before = {
            let state = shared.state.lock();
            let e = state.entries.get(new).unwrap();
            (e.safe_deadline, e.next_renew)
        };
        assert_eq!(io.join().unwrap(), 0, "nothing to undo");
        let state = shared.state.lock();
        let e = state.entries.get(new).expect("the new hold stays");
        assert_eq!((e.safe_deadline, e.next_renew), before);
        assert!(!e.in_flight);
        drop(state);
        assert!(!old_signal.is_aborted() && !new_signal.is_aborted());
        assert!(adapter.held("k").unwrap(), "the new lease survives");
        assert!(adapter.release(&new_lease).unwrap());
    });
}

/// Fork while another thread holds the engine's state mutex: the child's
/// engine is built without touching the parent's mutex (a thread that
/// holds it and never unlocks stands for the parent thread that does not
/// exist in the child; were the child to lock it, loom would report the
/// deadlock), and it inserts and releases holds of its own.
#[test]
fn fork_while_the_state_mutex_is_held() {
    loom::model(|| {
        let (engine, adapter) = engine();
        let (id, _lease, _signal) = insert(&engine, &adapter, "k");
        let parent = engine.shared().clone();
        let holder = {
            let parent = parent.clone();
            thread::spawn(move || std::mem::forget(parent.state.lock()))
        };
        crate::runtime::fork::pretend_fork();
        let child = engine.shared().clone();
        assert!(!Arc::ptr_eq(&parent, &child), "a child has its own engine");
        {
            let mut state = child.state.lock();
            assert_eq!(state.entries.len, 0, "a child starts empty");
            state.scheduler_running = true;
            state.io_running = true;
        }
        assert_eq!(engine.unregister(id), Unregistered::Gone);
        let (mine, lease, _) = insert(&engine, &adapter, "k2");
        assert_eq!(engine.len(), 1);
        assert_eq!(engine.unregister(mine), Unregistered::Removed);
        assert!(adapter.release(&lease).unwrap());
        holder.join().unwrap();
    });
}

/// The scheduler going to sleep (as `run_scheduler`: collect what is due,
/// plan its wake, record the plan and wait, all in one critical section)
/// races a register whose renewal is due before that plan: the scheduler
/// either sees the entry before it plans (and collects its renewal), or
/// the register sees the recorded plan and notifies it. A register that
/// did not notify would leave the scheduler waiting for its planned wake,
/// which under loom never comes: loom reports the deadlock. Either way
/// the renewal is collected in time (on the scheduler's first look after
/// the register). Meanwhile an older hold due seconds later is released
/// without a notify.
#[test]
fn a_register_due_before_the_planned_wake_races_the_scheduler_going_to_sleep() {
    loom::model(|| {
        let (engine, adapter) = engine();
        // Renewal due in 10 s: the scheduler plans a tick from now.
        let (old, old_lease, _) = insert_sent(&engine, &adapter, "a", Instant::now());
        let shared = engine.shared().clone();
        let scheduler = {
            let shared = shared.clone();
            thread::spawn(move || {
                let mut idle_since = None;
                let mut state = shared.state.lock();
                loop {
                    let mut trips = Trips::new();
                    if let Some(job) = collect_due(&mut state, Instant::now(), &mut trips) {
                        assert!(trips.is_empty());
                        return job.renew_ids;
                    }
                    let wake_at = plan(&mut state, Instant::now(), &mut idle_since)
                        .expect("not idle: it has holds");
                    assert!(wake_at.is_some(), "a tick at the latest");
                    state = sleep(&shared, state, wake_at);
                }
            })
        };
        let (new, new_lease, new_signal) = insert(&engine, &adapter, "b");
        assert_eq!(engine.unregister(old), Unregistered::Removed);
        assert!(adapter.release(&old_lease).unwrap());
        let renewing = scheduler.join().unwrap();
        assert_eq!(renewing, vec![new], "the new hold's renewal is collected");
        assert!(!new_signal.is_aborted());
        assert_eq!(engine.unregister(new), Unregistered::Removed);
        assert!(adapter.release(&new_lease).unwrap());
    });
}
