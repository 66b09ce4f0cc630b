//! One listing shared among the operator's requests: the page polls
//! `GET /api/state` every second in every open tab, Prometheus scrapes
//! `GET /metrics`, and each used to list the backend on its own. Here the
//! requests for the same prefix on the same backend share one
//! [`Locks::list`] that started at most [`FRESH`] ago, and requests that
//! arrive while one is in flight wait for it (single flight). An action
//! through the interface ([`forget`]) drops what is kept for its backend,
//! so the next refresh shows the action's effect.
//!
//! Keyed by the backend (the `Arc` of the handle's adapter, held weakly:
//! the `Weak` keeps the allocation, so its address is not reused while an
//! entry names it) and the prefix. Every call first drops the entries that
//! are stale or whose backend is gone, so what is kept is at most the
//! listings of the last [`FRESH`].

use crate::contract::adapter::Adapter;
use crate::contract::info::Listing;
use crate::locks::Locks;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

/// How old (from the start of its read) a shared listing may be: just
/// under the page's one-second refresh, so one tab lists at every refresh
/// (what it shows is as fresh as without sharing) while other tabs, a
/// scrape and a burst of requests within that time share its read.
pub const FRESH: Duration = Duration::from_millis(900);

type Outcome = Result<Arc<Listing>, String>;

/// A listing being read: its readers wait on `done`.
#[derive(Default)]
struct Flight {
    result: Mutex<Option<Outcome>>,
    done: Condvar,
}

enum State {
    Reading(Arc<Flight>),
    Ready(Instant, Arc<Listing>),
}

struct Entry {
    backend: Weak<dyn Adapter>,
    state: State,
}

type Table = HashMap<(usize, String), Entry>;

fn table() -> MutexGuard<'static, Table> {
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    TABLE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn backend_id(locks: &Locks) -> usize {
    Arc::as_ptr(locks.adapter()).cast::<()>() as usize
}

fn alive(e: &Entry, id: usize) -> bool {
    e.backend.strong_count() > 0 && e.backend.as_ptr().cast::<()>() as usize == id
}

/// Ends a flight however its reader ends (a panic included): the result
/// goes to every waiter, and only a success is kept (and only while the
/// entry is still this flight: [`forget`] may have dropped it).
struct Landing {
    key: (usize, String),
    flight: Arc<Flight>,
    result: Option<Outcome>,
    started: Instant,
}

impl Drop for Landing {
    fn drop(&mut self) {
        let result = self
            .result
            .take()
            .unwrap_or_else(|| Err("the listing failed".into()));
        {
            let mut t = table();
            let ours = matches!(
                t.get(&self.key),
                Some(Entry { state: State::Reading(f), .. }) if Arc::ptr_eq(f, &self.flight)
            );
            if ours {
                match &result {
                    Ok(listing) => {
                        if let Some(e) = t.get_mut(&self.key) {
                            e.state = State::Ready(self.started, listing.clone());
                        }
                    }
                    Err(_) => {
                        t.remove(&self.key);
                    }
                }
            }
        }
        *self.flight.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
        self.flight.done.notify_all();
    }
}

/// The listing under `prefix`, shared (see the module header).
///
/// # Errors
/// The backend's error, as text (each waiter of a failed read gets it).
pub(crate) fn list(locks: &Locks, prefix: &str) -> Outcome {
    let id = backend_id(locks);
    let key = (id, prefix.to_owned());
    let flight = {
        let mut t = table();
        t.retain(|_, e| {
            e.backend.strong_count() > 0
                && match &e.state {
                    State::Reading(_) => true,
                    State::Ready(at, _) => at.elapsed() <= FRESH,
                }
        });
        match t.get(&key) {
            Some(e) if alive(e, id) => match &e.state {
                State::Ready(_, listing) => return Ok(listing.clone()),
                State::Reading(f) => Err(f.clone()),
            },
            _ => {
                let flight = Arc::new(Flight::default());
                t.insert(
                    key.clone(),
                    Entry {
                        backend: Arc::downgrade(locks.adapter()),
                        state: State::Reading(flight.clone()),
                    },
                );
                Ok(flight)
            }
        }
    };
    match flight {
        // Another request is reading it: wait for that.
        Err(f) => {
            let mut r = f.result.lock().unwrap_or_else(|p| p.into_inner());
            while r.is_none() {
                r = f.done.wait(r).unwrap_or_else(|p| p.into_inner());
            }
            r.clone()
                .unwrap_or_else(|| Err("the listing failed".into()))
        }
        // This request reads it.
        Ok(flight) => {
            let mut landing = Landing {
                key,
                flight,
                result: None,
                started: Instant::now(),
            };
            let result = locks.list(prefix).map(Arc::new).map_err(|e| e.to_string());
            landing.result = Some(result.clone());
            result
        }
    }
}

/// Drops every listing kept for `locks`'s backend (after an action).
pub(crate) fn forget(locks: &Locks) {
    let id = backend_id(locks);
    table().retain(|(i, _), _| *i != id);
}
