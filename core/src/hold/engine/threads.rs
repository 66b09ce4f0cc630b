//! The scheduler thread (collects what is due) and the I/O thread (one
//! beat per batch), and how a beat's results are applied.

use super::clocks::{suspended_ns, ClockReading};
use super::slab::Entry;
use super::slab::Guard;
use super::state::lost_hold;
use super::state::renewal_failed;
use super::state::stopped;
use super::state::trip_all;
use super::state::Job;
use super::state::Shared;
use super::state::Sleep;
use super::state::State;
use super::state::Trips;
use super::status::dur;
use super::status::epoch;
use super::status::instant;
use super::status::ms;
use super::status::ns;
use super::status::Ms;
use super::status::MAX_TICK;
use super::status::SUBSCRIBE_AFTER;
use super::timers::Kind;
use crate::contract::adapter::{Lease, Renewal, Renewed};
use crate::error::{Error, Result};
use crate::runtime::sync::MutexGuard;
use crate::runtime::IDLE_EXIT;
use crate::stats::{bump, Event, EventKind, LostCause};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

pub(crate) fn ensure_threads(shared: &Arc<Shared>, state: &mut State) -> Result<()> {
    let spawn = |name: &str, body: fn(Arc<Shared>), shared: Arc<Shared>| {
        crate::runtime::thread::spawn(name, move || body(shared))
            .map(drop)
            .map_err(|e| Error::System(format!("cannot start the {name} thread: {e}")))
    };
    if !state.io_running {
        spawn("mistri-heartbeat-io", run_io, shared.clone())?;
        state.io_running = true;
    }
    if !state.scheduler_running {
        spawn("mistri-heartbeat", run_scheduler, shared.clone())?;
        state.scheduler_running = true;
    }
    Ok(())
}

/// Removes the entries whose safe deadline has passed; their trips.
pub(crate) fn expire(state: &mut State, now: Ms, trips: &mut Trips) {
    while state.sched.deadlines.first().is_some_and(|at| at <= now) {
        let Some((_, list)) = state.sched.deadlines.due.first_key_value() else {
            break;
        };
        let index = list[0];
        let id = state.entries.id_of(index);
        let Some(e) = state.remove_entry(id) else {
            break;
        };
        if e.in_flight {
            state.orphans.insert(id);
        }
        match e.guard.as_deref() {
            // Told (and counted) when the work was found stalled.
            Some(Guard {
                stopped: Some(LostCause::Stalled),
                ..
            }) => continue,
            Some(
                g @ Guard {
                    stopped: Some(cause),
                    ..
                },
            ) => {
                let reason = format!(
                    "lease lost: max_hold reached: the hold of {:?} is not renewed past {:.3} s \
                     after its acquire; it may expire within {:.3} s",
                    e.lease().key(),
                    g.renew_until
                        .map_or(0.0, |u| (u - g.acquired).as_secs_f64()),
                    dur(e.margin).as_secs_f64(),
                );
                e.status.lost.store(true, Ordering::SeqCst);
                lost_hold(&state.stats, &e, *cause, &reason);
                trips.push((e.signal, reason));
                continue;
            }
            _ => {}
        }
        let why = match &e.last_error {
            Some(err) => format!("; last error: {err}"),
            None => String::new(),
        };
        let reason = format!(
            "lease lost: no renewal of {:?} was confirmed before its safe deadline (ttl {:.3} s, \
             safety margin {:.3} s); it may expire within {:.3} s{why}",
            e.lease().key(),
            dur(e.ttl).as_secs_f64(),
            dur(e.margin).as_secs_f64(),
            dur(e.margin).as_secs_f64(),
        );
        e.status.lost.store(true, Ordering::SeqCst);
        lost_hold(&state.stats, &e, LostCause::Deadline, &reason);
        trips.push((e.signal, reason));
    }
}

/// Whether the hung-holder guard forbids renewing `e` at `now`: its work
/// stopped calling `touch` ([`LostCause::Stalled`]), or the renewed lease
/// would outlive `max_hold` ([`LostCause::MaxHold`]).
pub(crate) fn guard_stops(e: &Entry, now: Instant) -> Option<LostCause> {
    let g = e.guard.as_deref()?;
    if let Some(timeout) = g.progress_timeout {
        if now.saturating_duration_since(e.status.touched()) >= timeout {
            return Some(LostCause::Stalled);
        }
    }
    match g.renew_until {
        Some(until) if now.checked_add(dur(e.ttl)).is_none_or(|end| end > until) => {
            Some(LostCause::MaxHold)
        }
        _ => None,
    }
}

/// How early a renewal may go: half its interval (module header, "Timers").
pub(crate) fn renew_early(e: &Entry) -> Ms {
    e.renew_every / 2 / 1_000_000
}

/// How early a flag read may go: half its tick (a pending subscription:
/// not early, so a hold shorter than [`super::SUBSCRIBE_AFTER`] never
/// subscribes).
pub(crate) fn check_early(e: &Entry) -> Ms {
    if e.subscribe_pending {
        return 0;
    }
    e.tick / 2 / 1_000_000
}

/// The due work, as a job bounded by the earliest safe deadline: nothing
/// unless some renewal or read is due (or a delete is queued), then all
/// that is ready (module header, "Timers").
pub(crate) fn collect_due(state: &mut State, now: Instant, trips: &mut Trips) -> Option<Job> {
    let now_ms = ms(now);
    let due = state.sched.renew_due.first().is_some_and(|at| at <= now_ms)
        || state.sched.check_due.first().is_some_and(|at| at <= now_ms);
    let settings = state.settings_due.is_some_and(|at| at <= now_ms);
    if !due && !settings && state.deletes.is_empty() {
        return None;
    }
    let mut job = Job::default();
    if settings {
        // Armed again when the I/O thread has the verdict.
        state.settings_due = None;
        job.check_settings = state.entries.len > 0;
    }
    if due {
        let State {
            entries,
            sched,
            stats,
            ..
        } = state;
        for index in sched.renew_due.take_ready(entries, now_ms, renew_early) {
            let id = entries.id_of(index);
            let e = entries.at(index);
            if let Some(cause) = guard_stops(e, now) {
                // No renewal from now on: the renew timer is not armed again.
                if let Some(g) = e.guard.as_deref_mut() {
                    g.stopped = Some(cause);
                }
                if cause == LostCause::Stalled {
                    let reason = format!(
                        "work stalled: no touch() on the hold of {:?} for {:.3} s \
                         (progress_timeout); renewals stopped, the lease lapses within its ttl",
                        e.lease().key(),
                        e.guard
                            .as_deref()
                            .and_then(|g| g.progress_timeout)
                            .unwrap_or_default()
                            .as_secs_f64(),
                    );
                    e.status.lost.store(true, Ordering::SeqCst);
                    lost_hold(stats, e, cause, &reason);
                    trips.push((e.signal.clone(), reason));
                }
                continue;
            }
            e.in_flight = true;
            e.status.renewing();
            job.renew_ids.push(id);
            job.renewals.push((
                e.status.clone(),
                dur(e.ttl),
                dur(e.margin.saturating_add(e.rtt)),
            ));
        }
        let mut subscribe = Vec::new();
        for index in sched.check_due.take_ready(entries, now_ms, check_early) {
            let id = entries.id_of(index);
            let e = entries.at(index);
            let Some(stop_key) = &e.stop_key else {
                continue;
            };
            if e.subscribe_pending {
                // Old enough: its key is asked of the listener, whose
                // confirmation makes the read (SUBSCRIBE_AFTER).
                e.subscribe_pending = false;
                subscribe.push((id, stop_key.clone(), ms(now + dur(e.tick)), e.recheck));
                if !e.recheck {
                    continue;
                }
            }
            job.check_ids.push(id);
            job.checks.push(stop_key.clone());
            e.recheck = false;
        }
        for (id, key, next, reading) in subscribe {
            state.subscribe(&key);
            if !reading {
                state.schedule(Kind::Check, id, next);
            }
        }
    }
    job.deletes = std::mem::take(&mut state.deletes);
    if job.renew_ids.is_empty()
        && job.check_ids.is_empty()
        && job.deletes.is_empty()
        && !job.check_settings
    {
        return None;
    }
    job.deadline = state.sched.deadlines.first().map(instant);
    job.collected = Some(now);
    Some(job)
}

pub(crate) fn run_scheduler(shared: Arc<Shared>) {
    let mut idle_since: Option<Instant> = None;
    let mut state = shared.state.lock();
    loop {
        let now = Instant::now();
        let mut trips = Trips::new();
        // A host suspend moves every deadline earlier (super::clocks).
        if let Some(grew) = state.suspend.observe(suspended_ns()) {
            state.suspended(grew, ms(now));
        }
        expire(&mut state, ms(now), &mut trips);
        if trips.is_empty() && !state.io_busy {
            if let Some(job) = collect_due(&mut state, now, &mut trips) {
                state.job = Some(job);
                state.io_busy = true;
                shared.io_wake.notify_one();
            }
        }
        if !trips.is_empty() {
            drop(state);
            trip_all(trips);
            shared.stats.flush();
            state = shared.state.lock();
            continue;
        }
        let Some(wake_at) = plan(&mut state, now, &mut idle_since) else {
            return;
        };
        state = sleep(&shared, state, wake_at);
    }
}

/// When the scheduler wakes next (`None` inside: only when notified);
/// `None`: it retires (idle for [`IDLE_EXIT`]; its state is reset here,
/// under the lock).
pub(crate) fn plan(
    state: &mut State,
    now: Instant,
    idle_since: &mut Option<Instant>,
) -> Option<Option<Instant>> {
    let idle = state.entries.len == 0 && !state.io_busy && state.deletes.is_empty();
    let sched = &state.sched;
    let mut wake_at = sched.deadlines.first();
    if !state.io_busy {
        let renew = sched.renew_due.first();
        let check = sched.check_due.first();
        let settings = state.settings_due;
        wake_at = [wake_at, renew, check, settings]
            .into_iter()
            .flatten()
            .min();
    }
    let mut wake_at = wake_at.map(instant);
    if state.entries.len > 0 {
        // Read the clocks at least once a tick (super::clocks).
        let tick = now + MAX_TICK;
        wake_at = Some(wake_at.map_or(tick, |at| at.min(tick)));
    }
    if idle {
        let since = *idle_since.get_or_insert(now);
        if now >= since + IDLE_EXIT {
            state.scheduler_running = false;
            // The listener closes its channel once nobody watches.
            state.watch = None;
            // The next hold starts the settings checks afresh.
            state.settings_due = None;
            state.settings_risk = None;
            return None;
        }
        // At least once a tick while idle too: a hold registered meanwhile
        // is then within a tick of its clock reading without a notify.
        wake_at = Some((since + IDLE_EXIT).min(now + MAX_TICK));
    } else {
        *idle_since = None;
    }
    // Short holds keep coming: keep pace with their subscriptions, so
    // their registers need no notify (one wake per SUBSCRIBE_AFTER).
    match state.churn_until {
        Some(until) if now < until => {
            let pace = now + SUBSCRIBE_AFTER;
            wake_at = Some(wake_at.map_or(pace, |at| at.min(pace)));
        }
        Some(_) => state.churn_until = None,
        None => {}
    }
    Some(wake_at)
}

/// The scheduler waits until `wake_at` (or a notify), its plan recorded
/// under the lock (module header, "Wakes"): who adds work due earlier
/// notifies it; nobody else needs to.
pub(crate) fn sleep<'a>(
    shared: &Shared,
    mut state: MutexGuard<'a, State>,
    wake_at: Option<Instant>,
) -> MutexGuard<'a, State> {
    state.sleep = wake_at.map_or(Sleep::Forever, Sleep::Until);
    let mut state = match wake_at {
        Some(at) => shared.wake.wait_until(state, at).0,
        None => shared.wake.wait(state),
    };
    state.sleep = Sleep::Awake;
    state.scheduler_wakes += 1;
    state
}

pub(crate) fn run_io(shared: Arc<Shared>) {
    loop {
        let mut job = {
            let mut state = shared.state.lock();
            let idle_until = Instant::now() + IDLE_EXIT;
            loop {
                if let Some(job) = state.job.take() {
                    break job;
                }
                let (guard, timed_out) = shared.io_wake.wait_until(state, idle_until);
                state = guard;
                if timed_out && state.job.is_none() {
                    state.io_running = false;
                    return;
                }
            }
        };
        // Bounded by the earliest safe deadline of the engine's holds, and
        // by the adapter's own I/O timeout (none for in-process adapters).
        let cap = shared.adapter.io_timeout();
        let mut deadline = job.deadline.unwrap_or_else(|| Instant::now() + MAX_TICK);
        if !cap.is_zero() {
            deadline = deadline.min(Instant::now() + cap);
        }
        let renewals: Vec<Renewal<'_>> = job
            .renewals
            .iter()
            .map(|(status, ttl, min_left)| Renewal {
                lease: &status.lease,
                ttl: *ttl,
                min_left: *min_left,
            })
            .collect();
        let checks: Vec<&str> = job.checks.iter().map(|k| &**k).collect();
        job.offset_sent = Some(suspended_ns());
        let sent = Instant::now();
        let beating = !(renewals.is_empty() && checks.is_empty());
        let result = if !beating {
            Ok(Default::default())
        } else {
            bump(&shared.stats.renewals_sent, renewals.len() as u64);
            shared.adapter.beat(&renewals, &checks, deadline)
        };
        let done = Instant::now();
        let server_clock = result.as_ref().ok().and_then(|b| b.server_clock);
        let offset_done = suspended_ns();
        if beating {
            shared.stats.beat(done - sent, result.is_ok());
        }
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
            if let (Some(server), Some(offset_sent)) = (server_clock, job.offset_sent) {
                // This host's clock: monotonic + suspended (super::clocks).
                let host = |t: Instant, offset: u64| {
                    ns(t.saturating_duration_since(epoch())).saturating_add(offset)
                };
                state.server_clock_read(ClockReading {
                    sent: host(sent, offset_sent),
                    done: host(done, offset_done),
                    server,
                });
            }
            state.orphans.clear();
            state.io_busy = false;
            shared.wake.notify_one();
        }
        trip_all(trips);
        if job.check_settings {
            check_settings(&shared, &job);
        }
        shared.stats.flush();
        for (lease, until) in deletes {
            // Best effort, bounded by the lease's own end (waiting longer
            // is pointless), by the adapter's timeout, and by the earliest
            // safe deadline of the engine's holds (a delete must not keep
            // their renewals waiting); a lease that can't be deleted
            // expires at its ttl.
            let mut by = until;
            if let Some(first) = shared.state.lock().sched.deadlines.first() {
                by = by.min(instant(first));
            }
            if shared
                .adapter
                .release_by(&lease, by)
                .is_ok_and(|deleted| deleted)
            {
                // Waiters of this process hear it at once ([`crate::waiting`]).
                crate::waiting::lines::released(&shared.adapter, &lease);
            }
        }
    }
}

/// The settings check a job carries: one call of the adapter, bounded as
/// a beat is (the earliest safe deadline, the adapter's I/O timeout), its
/// verdict applied under the lock.
fn check_settings(shared: &Shared, job: &Job) {
    let Some(every) = shared.settings_every else {
        return;
    };
    let cap = shared.adapter.io_timeout();
    let now = Instant::now();
    let mut deadline = job.deadline.unwrap_or(now + MAX_TICK);
    if !cap.is_zero() {
        deadline = deadline.min(now + cap);
    }
    let verdict = shared.adapter.check_settings(deadline);
    let mut state = shared.state.lock();
    state.settings_checked(verdict, Instant::now(), every);
    shared.wake.notify_one();
}

pub(crate) fn apply(
    state: &mut State,
    job: &Job,
    result: Result<crate::contract::adapter::Beat>,
    sent: Instant,
    done: Instant,
    trips: &mut Trips,
    deletes: &mut Vec<(Lease, Instant)>,
) {
    let beat = match result {
        Ok(beat) => beat,
        Err(err) => {
            let text: Box<str> = err.to_string().into();
            for &id in &job.renew_ids {
                if let Some(e) = state.entries.get_mut(id) {
                    renewal_failed(&state.stats, e, &text);
                    e.in_flight = false;
                    e.last_error = Some(text.clone());
                    let at = ms(done + dur(e.tick));
                    state.schedule(Kind::Renew, id, at);
                }
            }
            for &id in &job.check_ids {
                if let Some(e) = state.entries.get_mut(id) {
                    if e.stop_key.is_some() {
                        let at = ms(if e.recheck { done } else { done + dur(e.tick) });
                        state.schedule(Kind::Check, id, at);
                    }
                }
            }
            return;
        }
    };
    for (i, &id) in job.renew_ids.iter().enumerate() {
        let answer = beat.renewals.get(i).map_or_else(
            || {
                Err(Error::Backend(
                    "the backend sent fewer answers than renewals".into(),
                ))
            },
            |r| match r {
                Ok(v) => Ok(*v),
                Err(e) => Err(Error::Backend(e.to_string())),
            },
        );
        let (status, ttl, _) = &job.renewals[i];
        if answer.as_ref().is_ok_and(|r| *r == Renewed::Yes) {
            // Also for a hold released meanwhile: its release is bounded by
            // this (module header of crate::hold).
            status.renewed(done + *ttl);
        }
        let Some(e) = state.entries.get_mut(id) else {
            // Released (its holder deletes it) or lost by deadline while
            // this renewal was in flight: if the renewal took, undo it.
            if answer.as_ref().is_ok_and(|r| *r == Renewed::Yes) && state.orphans.contains(&id) {
                deletes.push((status.lease.clone(), done + *ttl));
            }
            continue;
        };
        e.in_flight = false;
        let answer_kind = answer.as_ref().ok().copied();
        let lost = match answer {
            Ok(Renewed::Yes) => {
                bump(&state.stats.renewals_confirmed, 1);
                // What was left to the deadline this renewal replaces.
                let left = instant(e.safe_deadline).saturating_duration_since(done);
                state.stats.margin(left, done);
                if e.last_error.is_some() {
                    bump(&state.stats.renewals_late, 1);
                    state.stats.emit(|| {
                        Event::new(EventKind::RenewedLate, e.lease().key(), e.lease().fence())
                    });
                }
                let ttl = dur(e.ttl);
                // Expressed at the suspend the scheduler accounted for
                // (super::clocks): a suspend in flight counts once.
                let moved = job.offset_sent.map_or(0, |at| state.suspend.since(at));
                let end = match u64::try_from(moved) {
                    Ok(early) => (sent + ttl).checked_sub(dur(early)),
                    Err(_) => Some(sent + ttl + dur(u64::try_from(-moved).unwrap_or(0))),
                };
                let deadline = ms(end
                    .and_then(|end| end.checked_sub(dur(e.margin)))
                    .unwrap_or(sent));
                e.rtt = ns(done.saturating_duration_since(sent));
                e.last_error = None;
                let next = ms(job.collected.unwrap_or(sent) + dur(e.renew_every));
                if deadline > e.safe_deadline {
                    state.schedule(Kind::Deadline, id, deadline);
                }
                state.schedule(Kind::Renew, id, next);
                None
            }
            Ok(Renewed::NotHeld) => Some(format!(
                "lease lost: {:?} is no longer held by this holder (it expired, was taken or was broken)",
                e.lease().key()
            )),
            Ok(Renewed::TooLate) => Some(format!(
                "lease lost: the renewal of {:?} reached the backend with less than the safety margin \
                 of its life left, and was refused",
                e.lease().key()
            )),
            Err(err) => {
                let text = err.to_string();
                renewal_failed(&state.stats, e, &text);
                e.last_error = Some(text.into());
                let at = ms(done + dur(e.tick));
                state.schedule(Kind::Renew, id, at);
                None
            }
        };
        if let Some(reason) = lost {
            if let Some(e) = state.remove_entry(id) {
                let cause = match answer_kind {
                    Some(Renewed::TooLate) => LostCause::TooLate,
                    _ => LostCause::NotHeld,
                };
                lost_hold(&state.stats, &e, cause, &reason);
                e.status.lost.store(true, Ordering::SeqCst);
                trips.push((e.signal, reason));
            }
        }
    }
    for (i, &id) in job.check_ids.iter().enumerate() {
        let Some(e) = state.entries.get_mut(id) else {
            continue;
        };
        match beat.flags.get(i) {
            Some(Ok(true)) => {
                // None: a push already stopped it (and trips it with the key).
                let Some(key) = e.stop_key.take() else {
                    continue;
                };
                let reason = format!("stop flag {key:?} raised");
                stopped(&state.stats, &e.status, &reason);
                trips.push((e.signal.clone(), reason));
                state.unwatch(&key, id);
                state.disarm(Kind::Check, id);
                continue;
            }
            _ if e.stop_key.is_none() => continue,
            Some(Ok(false)) if !e.recheck => {
                let at = ms(job.collected.unwrap_or(sent) + dur(e.tick));
                state.schedule(Kind::Check, id, at);
            }
            _ if e.recheck => state.schedule(Kind::Check, id, ms(done)),
            _ => {
                let at = ms(done + dur(e.tick));
                state.schedule(Kind::Check, id, at);
            }
        }
    }
}
