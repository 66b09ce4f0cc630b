//! The rules of a job's lease, written once for every job face (Ruby's
//! ActiveJob and Sidekiq, Python's Celery, RQ and Dramatiq, C, the CLI):
//!
//! - [`stop_key`]: the flag that stops job `id`, `job:<id>:stop` — part of
//!   the protocol (docs/PROTOCOL.md, "Jobs"), the same string in every
//!   language;
//! - [`JobOptions`]: a job's lease options read by name
//!   ([`JobOptionsBuilder::set`]), with their checks and defaults (the
//!   heartbeat `min(HEARTBEAT, ttl / 3)`, the retry backoff);
//! - [`OnConflict`]: one vocabulary for what a job does when its lease is
//!   held elsewhere, stopped or lost; each face spells it in its own idiom
//!   (docs/JOBS.md has the table);
//! - the interruption of a running job is [`crate::Hold::interruption`].
//!
//! A face keeps only what is its host's: how a key is computed from the
//! job's arguments (a template, a lambda), how a retry is scheduled (the
//! framework's own retry or delay), and the names of its exceptions.

use crate::args::check_key;
use crate::error::{Error, Result};
use crate::hold::{HEARTBEAT, LEASE_TTL};
use crate::options::{nearest, OptionValue};
use std::time::Duration;

/// The stop flag of job `job_id`: `job:<job_id>:stop`. Raising it (from
/// any face, `mistri-locks stop job:<id>:stop`, or the operator's page)
/// stops that job at its next checkpoint, or before it starts.
///
/// # Errors
/// [`Error::InvalidArgument`] for an empty id, or one that makes the key
/// longer than a key may be.
pub fn stop_key(job_id: &str) -> Result<String> {
    if job_id.is_empty() {
        return Err(Error::InvalidArgument("a job id must not be empty".into()));
    }
    let key = format!("job:{job_id}:stop");
    check_key("job id", &key)?;
    Ok(key)
}

/// What a job does when its lease is held elsewhere (`on_conflict`), when
/// it was stopped (`on_stopped`) or when its lease was lost (`on_lost`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnConflict {
    /// Run the job again later, after [`JobOptions::backoff_for`], at most
    /// [`JobOptions::attempts`] times in all.
    Retry,
    /// Drop this run: the job ends as done (Ruby spells it `:discard`).
    Skip,
    /// Fail this run with the face's conflict error.
    Raise,
}

impl OnConflict {
    /// Every policy, in the order of the docs' table.
    pub const ALL: [OnConflict; 3] = [OnConflict::Retry, OnConflict::Skip, OnConflict::Raise];

    /// The core's name: `retry`, `skip` or `raise`.
    pub fn name(self) -> &'static str {
        match self {
            OnConflict::Retry => "retry",
            OnConflict::Skip => "skip",
            OnConflict::Raise => "raise",
        }
    }

    /// The policy a face's spelling names: `retry`, `skip` (or `discard`,
    /// Ruby's word for it), `raise`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the known spellings.
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "retry" => Ok(OnConflict::Retry),
            "skip" | "discard" => Ok(OnConflict::Skip),
            "raise" => Ok(OnConflict::Raise),
            _ => Err(Error::InvalidArgument(format!(
                "{name:?} is not a conflict policy: expected \"retry\", \"skip\" (or \"discard\") or \"raise\""
            ))),
        }
    }
}

/// The lease options of a job, checked, with every default applied. Built
/// by [`JobOptions::builder`] from options given by name.
#[derive(Debug, Clone, PartialEq)]
pub struct JobOptions {
    /// The lease's ttl (default [`LEASE_TTL`]).
    pub ttl: Duration,
    /// The longest wait between renewals (default `min(HEARTBEAT, ttl / 3)`).
    pub heartbeat: Duration,
    /// How many runs may hold the key at once (default 1).
    pub limit: u32,
    /// How long a run waits in line for a busy key before the conflict
    /// policy applies (default zero: it does not wait; `None`: no limit).
    pub wait: Option<Duration>,
    /// Runs in all before a retried job gives up (default 20).
    pub attempts: u32,
    /// A fixed delay before each retry (default: none, the exponential
    /// backoff of [`JobOptions::backoff_for`]).
    pub backoff: Option<Duration>,
    /// When the lease is held elsewhere (the face's default; the core's is
    /// [`OnConflict::Retry`]).
    pub on_conflict: OnConflict,
    /// When the job was stopped (default [`OnConflict::Skip`]: a stopped
    /// job is done).
    pub on_stopped: OnConflict,
    /// When the lease was lost (default [`OnConflict::Retry`]: the work may
    /// not have finished).
    pub on_lost: OnConflict,
}

impl Default for JobOptions {
    fn default() -> Self {
        JobOptions {
            ttl: LEASE_TTL,
            heartbeat: HEARTBEAT.min(LEASE_TTL / 3),
            limit: 1,
            wait: Some(Duration::ZERO),
            attempts: 20,
            backoff: None,
            on_conflict: OnConflict::Retry,
            on_stopped: OnConflict::Skip,
            on_lost: OnConflict::Retry,
        }
    }
}

impl JobOptions {
    /// The names [`JobOptionsBuilder::set`] takes.
    pub const NAMES: [&'static str; 9] = [
        "ttl",
        "heartbeat",
        "limit",
        "wait",
        "attempts",
        "backoff",
        "on_conflict",
        "on_stopped",
        "on_lost",
    ];

    /// A builder with every default.
    pub fn builder() -> JobOptionsBuilder {
        JobOptionsBuilder::default()
    }

    /// The delay before retry `attempt` (1, 2, …) when no fixed
    /// [`JobOptions::backoff`] is set: `min(ttl / 4 × 2^(attempt − 1), ttl)`,
    /// times `0.75 + jitter / 2` for a `jitter` in `[0, 1]` (the face draws
    /// it: ±25 % spreads the retries of jobs that conflicted together). A
    /// conflict lasts at least as long as the other run holds the key; the
    /// ttl caps it, so a crashed holder's key is retried soon after it
    /// frees.
    pub fn backoff_for(&self, attempt: u32, jitter: f64) -> Duration {
        if let Some(fixed) = self.backoff {
            return fixed;
        }
        let doublings = attempt.saturating_sub(1).min(30);
        let base = (self.ttl / 4)
            .checked_mul(1u32 << doublings)
            .unwrap_or(self.ttl)
            .min(self.ttl);
        let jitter = if jitter.is_finite() {
            jitter.clamp(0.0, 1.0)
        } else {
            0.5
        };
        base.mul_f64(0.75 + jitter / 2.0)
    }

    /// Whether a job that has run `attempts` times may run again.
    pub fn may_retry(&self, attempts: u32) -> bool {
        attempts < self.attempts
    }
}

/// Reads a job's options by name, then checks them together
/// ([`JobOptionsBuilder::build`]). Faces pass their keyword arguments
/// through it, so every face refuses the same things with the same words.
#[derive(Debug, Clone, Default)]
pub struct JobOptionsBuilder {
    ttl: Option<f64>,
    heartbeat: Option<f64>,
    limit: Option<i64>,
    wait: Option<f64>,
    attempts: Option<i64>,
    backoff: Option<f64>,
    on_conflict: Option<OnConflict>,
    on_stopped: Option<OnConflict>,
    on_lost: Option<OnConflict>,
}

impl JobOptionsBuilder {
    /// Sets option `name` (one of [`JobOptions::NAMES`]). A `None` value
    /// leaves the default.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`]: an unknown name (naming the nearest
    /// known one) or a policy name not known; [`Error::WrongType`]: a value
    /// of the wrong kind.
    pub fn set(&mut self, name: &str, value: OptionValue) -> Result<&mut Self> {
        if value == OptionValue::None {
            if !JobOptions::NAMES.contains(&name) {
                return Err(unknown(name));
            }
            return Ok(self);
        }
        match name {
            "ttl" => self.ttl = Some(value.seconds(name)?),
            "heartbeat" => self.heartbeat = Some(value.seconds(name)?),
            "wait" => self.wait = Some(value.seconds(name)?),
            "backoff" => self.backoff = Some(value.seconds(name)?),
            "limit" => self.limit = Some(value.integer(name)?),
            "attempts" => self.attempts = Some(value.integer(name)?),
            "on_conflict" => self.on_conflict = Some(policy(name, &value)?),
            "on_stopped" => self.on_stopped = Some(policy(name, &value)?),
            "on_lost" => self.on_lost = Some(policy(name, &value)?),
            _ => return Err(unknown(name)),
        }
        Ok(self)
    }

    /// The options, checked: ttl and heartbeat finite and > 0, limit and
    /// attempts ≥ 1, wait and backoff ≥ 0 (wait: infinity waits with no
    /// limit).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the option and the value.
    pub fn build(&self) -> Result<JobOptions> {
        let d = JobOptions::default();
        let ttl = match self.ttl {
            Some(s) => positive("ttl", s)?,
            None => d.ttl,
        };
        let heartbeat = match self.heartbeat {
            Some(s) => positive("heartbeat", s)?,
            None => HEARTBEAT.min(ttl / 3),
        };
        let wait = match self.wait {
            Some(s) if s == f64::INFINITY => None,
            Some(s) => Some(not_negative("wait", s)?),
            None => d.wait,
        };
        let backoff = match self.backoff {
            Some(s) => Some(not_negative("backoff", s)?),
            None => None,
        };
        Ok(JobOptions {
            ttl,
            heartbeat,
            limit: at_least_one("limit", self.limit, d.limit)?,
            wait,
            attempts: at_least_one("attempts", self.attempts, d.attempts)?,
            backoff,
            on_conflict: self.on_conflict.unwrap_or(d.on_conflict),
            on_stopped: self.on_stopped.unwrap_or(d.on_stopped),
            on_lost: self.on_lost.unwrap_or(d.on_lost),
        })
    }
}

fn unknown(name: &str) -> Error {
    let hint = nearest(name, &JobOptions::NAMES)
        .map(|n| format!("; did you mean {n:?}?"))
        .unwrap_or_default();
    Error::InvalidArgument(format!(
        "unknown job option {name:?}{hint} (known: {})",
        JobOptions::NAMES.join(", ")
    ))
}

fn policy(name: &str, value: &OptionValue) -> Result<OnConflict> {
    match value {
        OptionValue::Text(t) => OnConflict::from_name(t)
            .map_err(|e| Error::InvalidArgument(format!("{name}: {}", e.message()))),
        other => Err(Error::WrongType(format!(
            "{name} must be \"retry\", \"skip\" or \"raise\", got {other}"
        ))),
    }
}

fn positive(name: &str, secs: f64) -> Result<Duration> {
    if !secs.is_finite() || secs <= 0.0 {
        return Err(Error::InvalidArgument(format!(
            "{name} must be a finite number of seconds > 0, got {secs}"
        )));
    }
    Duration::try_from_secs_f64(secs)
        .map_err(|_| Error::InvalidArgument(format!("{name} is too large: {secs} s")))
}

fn not_negative(name: &str, secs: f64) -> Result<Duration> {
    if secs.is_nan() || secs < 0.0 {
        return Err(Error::InvalidArgument(format!(
            "{name} must be seconds >= 0, got {secs}"
        )));
    }
    Duration::try_from_secs_f64(secs)
        .map_err(|_| Error::InvalidArgument(format!("{name} is too large: {secs} s")))
}

fn at_least_one(name: &str, given: Option<i64>, default: u32) -> Result<u32> {
    match given {
        None => Ok(default),
        Some(n) => u32::try_from(n).ok().filter(|n| *n >= 1).ok_or_else(|| {
            Error::InvalidArgument(format!("{name} must be an integer >= 1, got {n}"))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(pairs: &[(&str, OptionValue)]) -> Result<JobOptions> {
        let mut b = JobOptions::builder();
        for (name, value) in pairs {
            b.set(name, value.clone())?;
        }
        b.build()
    }

    #[test]
    fn the_stop_key_is_the_protocols() {
        assert_eq!(stop_key("abc-1").unwrap(), "job:abc-1:stop");
        assert!(matches!(stop_key(""), Err(Error::InvalidArgument(_))));
        assert!(stop_key(&"x".repeat(100_000)).is_err());
    }

    #[test]
    fn defaults_and_the_derived_heartbeat() {
        let o = build(&[]).unwrap();
        assert_eq!(o, JobOptions::default());
        assert_eq!(o.heartbeat, Duration::from_secs(60));
        let o = build(&[("ttl", OptionValue::Float(9.0))]).unwrap();
        assert_eq!(
            o.heartbeat,
            Duration::from_secs(3),
            "min(HEARTBEAT, ttl / 3)"
        );
        let o = build(&[
            ("ttl", OptionValue::Int(30)),
            ("heartbeat", OptionValue::Float(2.5)),
            ("wait", OptionValue::Float(f64::INFINITY)),
            ("on_conflict", OptionValue::Text("discard".into())),
            ("limit", OptionValue::Int(3)),
        ])
        .unwrap();
        assert_eq!(o.heartbeat, Duration::from_millis(2500));
        assert_eq!(o.wait, None);
        assert_eq!(o.on_conflict, OnConflict::Skip);
        assert_eq!(o.limit, 3);
    }

    #[test]
    fn bad_options_are_refused_by_name() {
        let e = build(&[("tll", OptionValue::Int(3))])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown job option \"tll\"; did you mean \"ttl\"?"),
            "{e}"
        );
        for (name, value, says) in [
            (
                "ttl",
                OptionValue::Float(0.0),
                "ttl must be a finite number of seconds > 0",
            ),
            ("ttl", OptionValue::Float(f64::NAN), "ttl must be"),
            (
                "heartbeat",
                OptionValue::Text("1".into()),
                "heartbeat must be a number of seconds",
            ),
            (
                "limit",
                OptionValue::Int(0),
                "limit must be an integer >= 1, got 0",
            ),
            ("limit", OptionValue::Float(1.5), "limit must be an integer"),
            (
                "wait",
                OptionValue::Float(-1.0),
                "wait must be seconds >= 0",
            ),
            (
                "on_conflict",
                OptionValue::Text("later".into()),
                "\"later\" is not a conflict policy",
            ),
            (
                "attempts",
                OptionValue::Bool(true),
                "attempts must be an integer",
            ),
        ] {
            let e = build(&[(name, value)]).unwrap_err().to_string();
            assert!(e.contains(says), "{name}: {e}");
        }
    }

    #[test]
    fn backoff_doubles_from_a_quarter_ttl_up_to_the_ttl() {
        let o = build(&[("ttl", OptionValue::Int(40))]).unwrap();
        let mid = |a| o.backoff_for(a, 0.5);
        assert_eq!(mid(1), Duration::from_secs(10));
        assert_eq!(mid(2), Duration::from_secs(20));
        assert_eq!(mid(3), Duration::from_secs(40));
        assert_eq!(mid(60), Duration::from_secs(40));
        assert_eq!(o.backoff_for(1, 0.0), Duration::from_millis(7500));
        assert_eq!(o.backoff_for(1, 1.0), Duration::from_millis(12500));
        let fixed = build(&[("backoff", OptionValue::Float(0.25))]).unwrap();
        assert_eq!(fixed.backoff_for(7, 0.0), Duration::from_millis(250));
        assert!(o.may_retry(19) && !o.may_retry(20));
    }
}
