//! Rule 4's queue entries: which waiting lines were ahead of a wait.
//!
//! A waiting line's try that does not take the lease queues the line (or
//! refreshes its entry) in the backend's queue for the key, and a free
//! lease (or slot) goes only to the first live lines of that queue
//! (`docs/PROTOCOL.md`, "Waiting"). An entry lives [`QUEUE_ENTRY_TTL_NS`]
//! after the try that stamped it; a live line refreshes it at least every
//! [`QUEUE_REFRESH_NS`] (a try); a line leaves the queue when it acquires
//! or when its last waiter leaves without the lease.
//!
//! A line's **stint** in the queue runs from the try that queued it
//! ([`super::Record::Queued`]) until it acquires ([`super::Record::Acquired`]
//! with its id), leaves ([`super::Record::LeftQueue`]) or its entry lapses.
//! The end is judged leniently, the latest the entry may have lived: a
//! try's stamp is pushed to the end of any fault window that held it; a
//! leave that got no answer (a silent proxy, a frozen or restarted server,
//! a reset connection) ends nothing, and the entry, **stranded**, lives
//! until it lapses; a lapse is followed by [`QUEUE_REFRESH_NS`] until the
//! next line's head tries again. A stint that starts after the entry lapsed
//! queues the line again, at the back.
//!
//! For a wait that ran out, rule 4 counts the stints of the lines **ahead
//! of its own** as it counts spans where a lease may have been live: the
//! free lease was theirs to take. A line may be ahead when its queuing try
//! was invoked before the try that queued the wait's own line completed
//! (two tries that overlap in time may have reached the backend in either
//! order: a try slowed by a fault is applied some time between its
//! invocation and its answer); all lines are, if the wait's line was not
//! queued. The head of the queue, queued before every other line's try
//! began, has no line ahead: a head whose wait runs out on a free key (a
//! lost wake-up) is still unexplained.

use std::collections::HashMap;

/// `mistri_locks::QUEUE_ENTRY_TTL` in ns (the soak asserts they agree).
pub const QUEUE_ENTRY_TTL_NS: u64 = 1_500_000_000;
/// `mistri_locks::QUEUE_REFRESH` in ns (the soak asserts they agree).
pub const QUEUE_REFRESH_NS: u64 = 500_000_000;

/// What a line did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Did {
    /// A try that did not take the lease (`true`: answered).
    Tried(bool),
    /// Acquired: out of the queue.
    Acquired,
    /// Asked to leave the queue (`true`: answered).
    Left(bool),
}

/// One thing a waiting line did on a key.
pub(super) struct Event<'a> {
    pub(super) key: &'a str,
    pub(super) line: &'a str,
    pub(super) inv: u64,
    pub(super) cmp: u64,
    pub(super) did: Did,
}

/// A line's stint in a key's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stint<'a> {
    line: &'a str,
    /// The try that queued it: invoked, completed.
    start: (u64, u64),
    /// The latest its entry may have lived (module header).
    end: u64,
}

/// Every line's stints, per key.
#[derive(Default)]
pub(super) struct Stints<'a> {
    by_key: HashMap<&'a str, Vec<Stint<'a>>>,
    /// Per key and line: its tries (refused or not, and the one that
    /// acquired), invoked and completed.
    tries: HashMap<(&'a str, &'a str), Vec<(u64, u64)>>,
    /// Per key and line: its hand-offs ([`Stints::handoff`]).
    handoffs: HashMap<(&'a str, &'a str), Vec<(u64, u64)>>,
}

impl<'a> Stints<'a> {
    /// The line `line` was rung for a release, and the try the ring caused
    /// was about to go at `at`: its hand-off runs from `start` (the end of
    /// the released tenure, or the ring) to that try's completion (`at`
    /// if it is not in the history).
    pub(super) fn handoff(&mut self, key: &'a str, line: &'a str, start: u64, at: u64) {
        let end = self
            .tries
            .get(&(key, line))
            .and_then(|list| {
                list.iter()
                    .filter(|&&(inv, _)| inv >= at)
                    .min_by_key(|&&(inv, _)| inv)
            })
            .map_or(at, |&(_, cmp)| cmp);
        self.handoffs
            .entry((key, line))
            .or_default()
            .push((start, end.max(at)));
    }

    /// A wait of the line `own` from `inv` to `cmp` ran out inside one of
    /// its line's hand-offs: the key was its line's to take, and the head
    /// was rung and about to (or did) try. Only a ring acted on makes a
    /// hand-off; a lost wake-up is a head that makes no try at all.
    pub(super) fn in_own_handoff(&self, key: &str, own: &str, inv: u64, cmp: u64) -> bool {
        self.handoffs
            .get(&(key, own))
            .is_some_and(|list| list.iter().any(|&(s, e)| s <= inv && e >= cmp))
    }

    /// A try of the line `own` was in flight (invoked, not answered) from
    /// before `inv` until after `cmp`: a wait of that line from `inv` to
    /// `cmp` ran out while its line's head was busy asking the backend
    /// (slowed by a fault, say). Only a line's head tries, and the other
    /// waiters of the line wait for it whatever the key's state: a lost
    /// wake-up, by contrast, is a head that makes no try at all.
    pub(super) fn own_try_in_flight(&self, key: &str, own: &str, inv: u64, cmp: u64) -> bool {
        self.tries.get(&(key, own)).is_some_and(|list| {
            list.iter()
                .any(|&(t_inv, t_cmp)| t_inv <= inv && t_cmp >= cmp)
        })
    }

    /// The spans of the stints on `key` of the lines ahead of `own`'s
    /// stint during a wait from `inv` to `cmp` (module header).
    pub(super) fn ahead_of(&self, key: &str, own: &str, inv: u64, cmp: u64) -> Vec<(u64, u64)> {
        let Some(list) = self.by_key.get(key) else {
            return Vec::new();
        };
        // When the wait's own line was queued, at the latest: the
        // completion of the try that queued it (the wait's end if it was
        // not queued).
        let queued = list
            .iter()
            .filter(|s| !own.is_empty() && s.line == own && s.start.0 <= cmp && s.end >= inv)
            .map(|s| s.start.1)
            .max()
            .unwrap_or(cmp);
        list.iter()
            .filter(|s| s.line != own && s.start.0 < queued)
            .map(|s| (s.start.0, s.end))
            .collect()
    }
}

/// The stints of the lines in `events`; `faults`: the fault windows,
/// settled.
pub(super) fn stints<'a>(events: &[Event<'a>], faults: &[(u64, u64)]) -> Stints<'a> {
    let mut by_line: HashMap<(&str, &str), Vec<&Event<'a>>> = HashMap::new();
    let mut out = Stints::default();
    for e in events.iter().filter(|e| !e.line.is_empty()) {
        by_line.entry((e.key, e.line)).or_default().push(e);
        if matches!(e.did, Did::Tried(_) | Did::Acquired) {
            out.tries
                .entry((e.key, e.line))
                .or_default()
                .push((e.inv, e.cmp));
        }
    }
    for ((key, line), mut list) in by_line {
        list.sort_by_key(|e| (e.inv, e.cmp));
        let done = out.by_key.entry(key).or_default();
        // The open stint and the latest its entry may lapse.
        let mut open: Option<(Stint, u64)> = None;
        for e in list {
            if let Some((mut stint, lapse)) = open.filter(|&(_, lapse)| e.inv > lapse) {
                stint.end = lapse.saturating_add(QUEUE_REFRESH_NS);
                done.push(stint);
                open = None;
            }
            match (e.did, open.as_mut()) {
                (Did::Tried(_), open_now) => {
                    let lapse = super::pushed_past_faults(e.inv, e.cmp, faults)
                        .saturating_add(QUEUE_ENTRY_TTL_NS);
                    match open_now {
                        Some((_, was)) => *was = (*was).max(lapse),
                        None => {
                            let start = (e.inv, e.cmp);
                            open = Some((
                                Stint {
                                    line,
                                    start,
                                    end: 0,
                                },
                                lapse,
                            ));
                        }
                    }
                }
                (Did::Acquired | Did::Left(true), Some((stint, _))) => {
                    stint.end = e.cmp;
                    done.push(*stint);
                    open = None;
                }
                (Did::Left(false), Some((stint, lapse))) => {
                    stint.end = e.cmp.max(lapse.saturating_add(QUEUE_REFRESH_NS));
                    done.push(*stint);
                    open = None;
                }
                (_, None) => {}
            }
        }
        if let Some((mut stint, lapse)) = open {
            stint.end = lapse.saturating_add(QUEUE_REFRESH_NS);
            done.push(stint);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn e(line: &'static str, inv: u64, cmp: u64, did: Did) -> Event<'static> {
        Event {
            key: "k",
            line,
            inv: inv * MS,
            cmp: cmp * MS,
            did,
        }
    }

    #[test]
    fn a_wait_counts_the_lines_ahead_of_its_own_only() {
        // A queued first, then B; A leaves at 400, B acquires at 500.
        let events = [
            e("A", 100, 101, Did::Tried(true)),
            e("B", 200, 201, Did::Tried(true)),
            e("A", 400, 410, Did::Left(true)),
            e("B", 490, 500, Did::Acquired),
        ];
        let s = stints(&events, &[]);
        assert_eq!(
            s.ahead_of("k", "B", 300 * MS, 350 * MS),
            vec![(100 * MS, 410 * MS)]
        );
        assert!(
            s.ahead_of("k", "A", 300 * MS, 350 * MS).is_empty(),
            "A heads the queue"
        );
        // A line not queued yet is behind every line.
        assert_eq!(s.ahead_of("k", "C", 300 * MS, 350 * MS).len(), 2);
    }

    #[test]
    fn tries_that_overlap_may_have_queued_in_either_order() {
        // A's try, slowed by a fault, was invoked before B's and answered
        // after it: the backend may have queued A first.
        let events = [
            e("A", 100, 400, Did::Tried(true)),
            e("B", 200, 201, Did::Tried(true)),
            e("C", 300, 301, Did::Tried(true)),
        ];
        let s = stints(&events, &[]);
        let a_until = 400 * MS + QUEUE_ENTRY_TTL_NS + QUEUE_REFRESH_NS;
        assert_eq!(
            s.ahead_of("k", "B", 250 * MS, 350 * MS),
            vec![(100 * MS, a_until)]
        );
        // B's try was answered before C's began: C is behind B, B is not
        // behind C.
        assert_eq!(s.ahead_of("k", "C", 350 * MS, 360 * MS).len(), 2);
        assert!(!s
            .ahead_of("k", "B", 350 * MS, 360 * MS)
            .iter()
            .any(|&(start, _)| start == 300 * MS));
    }

    #[test]
    fn an_entry_left_behind_lives_until_it_lapses() {
        // A's leave got no answer: its entry lapses a ttl after its try.
        let events = [
            e("A", 100, 101, Did::Tried(true)),
            e("A", 300, 800, Did::Left(false)),
            e("B", 200, 201, Did::Tried(true)),
        ];
        let s = stints(&events, &[]);
        let until = 101 * MS + QUEUE_ENTRY_TTL_NS + QUEUE_REFRESH_NS;
        assert_eq!(
            s.ahead_of("k", "B", 900 * MS, 950 * MS),
            vec![(100 * MS, until)]
        );
    }

    #[test]
    fn a_line_whose_entry_lapsed_queues_again_at_the_back() {
        let late = 101 + QUEUE_ENTRY_TTL_NS / MS + 10;
        let events = [
            e("A", 100, 101, Did::Tried(true)),
            e("B", 200, 201, Did::Tried(true)),
            e("A", late, late + 1, Did::Tried(true)),
        ];
        let s = stints(&events, &[]);
        let b_until = 201 * MS + QUEUE_ENTRY_TTL_NS + QUEUE_REFRESH_NS;
        assert_eq!(
            s.ahead_of("k", "A", late * MS, (late + 5) * MS),
            vec![(200 * MS, b_until)]
        );
    }

    #[test]
    fn a_wait_inside_its_own_lines_try_waited_for_it() {
        // Line A's head sent a try at 100, answered at 500 (a slowed
        // proxy); another waiter of A waited from 200 to 300.
        let events = [e("A", 100, 500, Did::Tried(true))];
        let s = stints(&events, &[]);
        assert!(s.own_try_in_flight("k", "A", 200 * MS, 300 * MS));
        // Not for a wait that outlasts the try, nor for another line.
        assert!(!s.own_try_in_flight("k", "A", 200 * MS, 600 * MS));
        assert!(!s.own_try_in_flight("k", "B", 200 * MS, 300 * MS));
    }

    #[test]
    fn a_try_held_by_a_fault_stamps_its_entry_when_the_fault_ends() {
        let events = [e("A", 100, 600, Did::Tried(false))];
        let s = stints(&events, &[(50 * MS, 2000 * MS)]);
        let until = 2000 * MS + QUEUE_ENTRY_TTL_NS + QUEUE_REFRESH_NS;
        assert_eq!(
            s.ahead_of("k", "B", 2500 * MS, 2600 * MS),
            vec![(100 * MS, until)]
        );
    }
}
