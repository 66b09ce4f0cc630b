//! The engine's holds: a slab of entries whose ids carry a generation.

use super::status::HoldStatus;
use super::status::Ms;
use crate::contract::adapter::Lease;
use crate::signal::AbortSignal;
use crate::stats::LostCause;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Not in a timer queue.
pub(crate) const NOWHERE: u32 = u32::MAX;

/// One hold in the engine. Kept small (about 140 bytes): an engine may
/// renew 100,000 of them. Times are schedule milliseconds, durations
/// nanoseconds.
pub(crate) struct Entry {
    /// The lease (shared with the batches that renew it) and its status.
    pub(crate) status: Arc<HoldStatus>,
    pub(crate) signal: AbortSignal,
    /// Shared with the stop-key index.
    pub(crate) stop_key: Option<Arc<str>>,
    pub(crate) last_error: Option<Box<str>>,
    /// The hung-holder guard, for the holds that asked for one.
    pub(crate) guard: Option<Box<Guard>>,
    pub(crate) ttl: u64,
    pub(crate) margin: u64,
    pub(crate) renew_every: u64,
    pub(crate) tick: u64,
    /// Round trip of the last confirmed renewal (or the acquire).
    pub(crate) rtt: u64,
    pub(crate) next_renew: Ms,
    pub(crate) safe_deadline: Ms,
    pub(crate) next_check: Ms,
    /// Positions in the renew, check and deadline queues ([`NOWHERE`]: not
    /// queued; a hold whose renewals the guard stopped has no renew timer,
    /// one without a stop key no check timer).
    pub(crate) renew_pos: u32,
    pub(crate) check_pos: u32,
    pub(crate) deadline_pos: u32,
    /// Asked to read the stop flag again (push) while a read of it may be
    /// in flight: that read's answer must not push the next one a tick away.
    pub(crate) recheck: bool,
    /// A renewal of it is with the I/O thread.
    pub(crate) in_flight: bool,
    /// Its stop key's subscription is not asked for yet: its check timer
    /// is the moment to ask ([`super::SUBSCRIBE_AFTER`]), not a read.
    pub(crate) subscribe_pending: bool,
}

/// The hung-holder guard of one hold.
pub(crate) struct Guard {
    /// No renewal may make the lease outlive this.
    pub(crate) renew_until: Option<Instant>,
    /// The longest time without a touch.
    pub(crate) progress_timeout: Option<Duration>,
    /// Renewals stopped by the guard (the hold waits for its safe deadline).
    pub(crate) stopped: Option<LostCause>,
    /// When the acquire was sent.
    pub(crate) acquired: Instant,
}

impl Entry {
    pub(crate) fn lease(&self) -> &Lease {
        &self.status.lease
    }
}

/// The engine's holds: a slab. An id is `generation << 32 | index`, so an id
/// kept after its hold left never finds the hold that reuses the cell.
#[derive(Default)]
pub(crate) struct Slab {
    pub(crate) cells: Vec<Cell>,
    pub(crate) free: Vec<u32>,
    pub(crate) len: usize,
}

pub(crate) struct Cell {
    pub(crate) generation: u32,
    pub(crate) entry: Option<Entry>,
}

pub(crate) fn index_of(id: u64) -> u32 {
    id as u32
}

impl Slab {
    pub(crate) fn insert(&mut self, entry: Entry) -> u64 {
        self.len += 1;
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.cells.push(Cell {
                    generation: 0,
                    entry: None,
                });
                u32::try_from(self.cells.len() - 1).expect("fewer than 2^32 holds")
            }
        };
        let cell = &mut self.cells[index as usize];
        cell.entry = Some(entry);
        (u64::from(cell.generation) << 32) | u64::from(index)
    }

    pub(crate) fn get(&self, id: u64) -> Option<&Entry> {
        let cell = self.cells.get(index_of(id) as usize)?;
        (u64::from(cell.generation) == id >> 32)
            .then_some(cell.entry.as_ref())
            .flatten()
    }

    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut Entry> {
        let cell = self.cells.get_mut(index_of(id) as usize)?;
        (u64::from(cell.generation) == id >> 32)
            .then_some(cell.entry.as_mut())
            .flatten()
    }

    /// The entry in cell `index` (timers name cells: their entries are
    /// always live, see [`Schedule`]).
    pub(crate) fn at(&mut self, index: u32) -> &mut Entry {
        self.cells[index as usize]
            .entry
            .as_mut()
            .expect("a timer names a live entry")
    }

    pub(crate) fn id_of(&self, index: u32) -> u64 {
        (u64::from(self.cells[index as usize].generation) << 32) | u64::from(index)
    }

    pub(crate) fn remove(&mut self, id: u64) -> Option<Entry> {
        let index = index_of(id);
        let cell = self.cells.get_mut(index as usize)?;
        if u64::from(cell.generation) != id >> 32 {
            return None;
        }
        let entry = cell.entry.take()?;
        cell.generation = cell.generation.wrapping_add(1);
        self.free.push(index);
        self.len -= 1;
        Some(entry)
    }

    /// Every entry (a settings risk is told to each hold).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.cells.iter().filter_map(|c| c.entry.as_ref())
    }

    /// Every entry with its id.
    pub(crate) fn iter_ids(&self) -> impl Iterator<Item = (u64, &Entry)> {
        self.cells.iter().enumerate().filter_map(|(i, s)| {
            let id = (u64::from(s.generation) << 32) | i as u64;
            s.entry.as_ref().map(|e| (id, e))
        })
    }

    #[cfg(test)]
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut Entry)> {
        self.cells.iter_mut().enumerate().filter_map(|(i, s)| {
            let id = (u64::from(s.generation) << 32) | i as u64;
            s.entry.as_mut().map(|e| (id, e))
        })
    }
}
