//! Stop the holders of a key, and stop a job by its id: the one
//! implementation behind `mistri-locks stop --holder-of`, the operator's
//! Stop, and every face's `stop_holders` / `stop_job`.

use super::Locks;
use crate::error::Result;
use crate::job;
use std::time::Duration;

/// What [`Locks::stop_holders`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopOutcome {
    /// These stop flags were raised (each once, however many holders
    /// watch it), in the order of the holders.
    Raised(Vec<String>),
    /// Nobody holds the key.
    NotHeld,
    /// The key is held, but no holder watches a stop key (a plain lease
    /// can only be broken).
    NoStopKey,
    /// A holder watches `stop_key`, which lies outside the prefix the
    /// caller may act on: nothing was raised.
    Outside {
        /// The stop key outside the prefix.
        stop_key: String,
    },
}

impl Locks {
    /// Raises, for `ttl`, the stop key of every holder of `key` that
    /// watches one (an N-holder lease has several). Reads the holders'
    /// descriptions ([`Locks::info`]) first: what a holder watches is
    /// what it said when it took the lease.
    ///
    /// # Errors
    /// The backend's errors; [`crate::Error::InvalidArgument`] for a bad key.
    pub fn stop_holders(&self, key: &str, ttl: Duration) -> Result<StopOutcome> {
        self.stop_holders_within(key, "", ttl)
    }

    /// [`Locks::stop_holders`] for a caller that may act only on keys
    /// under `prefix` (the operator's page served with a prefix): when a
    /// holder's stop key lies outside it, nothing is raised and the
    /// outcome names that key.
    ///
    /// # Errors
    /// As [`Locks::stop_holders`].
    pub fn stop_holders_within(
        &self,
        key: &str,
        prefix: &str,
        ttl: Duration,
    ) -> Result<StopOutcome> {
        let Some(info) = self.info(key)? else {
            return Ok(StopOutcome::NotHeld);
        };
        let mut stops: Vec<String> = Vec::new();
        for h in &info.holders {
            if let Some(stop) = h.stop_key.as_deref() {
                if !stop.starts_with(prefix) {
                    return Ok(StopOutcome::Outside {
                        stop_key: stop.to_owned(),
                    });
                }
                if !stops.iter().any(|s| s == stop) {
                    stops.push(stop.to_owned());
                }
            }
        }
        if stops.is_empty() {
            return Ok(StopOutcome::NoStopKey);
        }
        for stop in &stops {
            self.set_flag(stop, ttl)?;
        }
        Ok(StopOutcome::Raised(stops))
    }

    /// Raises the stop flag of job `job_id` ([`job::stop_key`]) for `ttl`:
    /// the job stops at its next checkpoint, or as soon as it starts.
    /// Returns the flag's key.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for an empty id; the backend's errors.
    pub fn stop_job(&self, job_id: &str, ttl: Duration) -> Result<String> {
        let key = job::stop_key(job_id)?;
        self.set_flag(&key, ttl)?;
        Ok(key)
    }
}
