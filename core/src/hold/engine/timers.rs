//! The engine's three timer queues (renew, check, deadline), keyed by
//! schedule millisecond.

use super::slab::Entry;
use super::slab::Slab;
use super::slab::NOWHERE;
use super::status::Ms;
use std::collections::BTreeMap;

/// Which of an entry's timers a [`Timers`] queue holds.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Renew,
    Check,
    Deadline,
}

impl Kind {
    pub(crate) fn pos(self, e: &mut Entry) -> &mut u32 {
        match self {
            Kind::Renew => &mut e.renew_pos,
            Kind::Check => &mut e.check_pos,
            Kind::Deadline => &mut e.deadline_pos,
        }
    }

    pub(crate) fn at(self, e: &Entry) -> Ms {
        match self {
            Kind::Renew => e.next_renew,
            Kind::Check => e.next_check,
            Kind::Deadline => e.safe_deadline,
        }
    }
}

/// One timer queue: the cells due at each millisecond, earliest first
/// (module header, "Timers"). Holds renewed by one batch share their next
/// due time, so the map has a few keys however many holds there are, and
/// (re)arming a timer is a push onto a list, not a heap operation.
pub(crate) struct Timers {
    pub(crate) kind: Kind,
    pub(crate) due: BTreeMap<Ms, Vec<u32>>,
}

impl Timers {
    pub(crate) fn new(kind: Kind) -> Self {
        Timers {
            kind,
            due: BTreeMap::new(),
        }
    }

    /// Queues cell `index` at its entry's time for this kind (taking it
    /// out of where it was first).
    pub(crate) fn arm(&mut self, slab: &mut Slab, index: u32) {
        self.disarm(slab, index);
        let e = slab.at(index);
        let list = self.due.entry(self.kind.at(e)).or_default();
        list.push(index);
        *self.kind.pos(e) = u32::try_from(list.len() - 1).expect("fewer than 2^32 holds");
    }

    /// Takes cell `index` out of this queue (if it is in it).
    pub(crate) fn disarm(&mut self, slab: &mut Slab, index: u32) {
        let e = slab.at(index);
        let pos = std::mem::replace(self.kind.pos(e), NOWHERE);
        if pos == NOWHERE {
            return;
        }
        let at = self.kind.at(e);
        let Some(list) = self.due.get_mut(&at) else {
            return;
        };
        list.swap_remove(pos as usize);
        if let Some(&moved) = list.get(pos as usize) {
            *self.kind.pos(slab.at(moved)) = pos;
        } else if list.is_empty() {
            self.due.remove(&at);
        }
    }

    /// The earliest due time.
    pub(crate) fn first(&self) -> Option<Ms> {
        self.due.keys().next().copied()
    }

    /// Takes out every cell that may go at `now`: its due time, less its
    /// entry's `early` allowance (ms), is at or before `now`; stops at the
    /// first due time that still has a cell that may not.
    pub(crate) fn take_ready(
        &mut self,
        slab: &mut Slab,
        now: Ms,
        early: fn(&Entry) -> Ms,
    ) -> Vec<u32> {
        let mut ready = Vec::new();
        while let Some(mut entry) = self.due.first_entry() {
            let at = *entry.key();
            let list = entry.get_mut();
            let mut i = 0;
            while i < list.len() {
                let index = list[i];
                let e = slab.at(index);
                if at.saturating_sub(early(e)) <= now {
                    list.swap_remove(i);
                    *self.kind.pos(e) = NOWHERE;
                    if let Some(&moved) = list.get(i) {
                        *self.kind.pos(slab.at(moved)) = u32::try_from(i).unwrap_or(NOWHERE);
                    }
                    ready.push(index);
                } else {
                    i += 1;
                }
            }
            if !list.is_empty() {
                break;
            }
            entry.remove();
        }
        ready
    }
}

/// The schedule of one engine's entries (module header, "Timers"): every
/// live entry is in the deadline queue; in the renew queue unless the
/// guard stopped its renewals or a renewal of it is in flight; in the
/// check queue while it watches a stop key and no read of it is in flight.
pub(crate) struct Schedule {
    pub(crate) renew_due: Timers,
    pub(crate) check_due: Timers,
    pub(crate) deadlines: Timers,
}

impl Schedule {
    /// The queue of timers of `kind`.
    pub(crate) fn of(&mut self, kind: Kind) -> &mut Timers {
        match kind {
            Kind::Renew => &mut self.renew_due,
            Kind::Check => &mut self.check_due,
            Kind::Deadline => &mut self.deadlines,
        }
    }
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            renew_due: Timers::new(Kind::Renew),
            check_due: Timers::new(Kind::Check),
            deadlines: Timers::new(Kind::Deadline),
        }
    }
}
