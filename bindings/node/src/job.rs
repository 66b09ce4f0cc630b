//! The core's job rules for the BullMQ face (`lib/bullmq.cjs`): a job's
//! lease options read by name and checked by [`JobOptions::builder`], with
//! every default applied, and the retry backoff
//! ([`JobOptions::backoff_for`]). The face keeps only BullMQ's idiom (the
//! key from the job, the delay through `job.moveToDelayed`).

use crate::convert::{self, Opt};
use crate::js_error;
use mistri_locks::job::JobOptions;
use napi::bindgen_prelude::*;
use napi_derive::napi;

/// A job's lease options, checked, every default applied (seconds; `wait`
/// Infinity: no limit; `backoff` null: the exponential backoff).
#[napi(object)]
pub struct CheckedJobOptions {
    pub ttl: f64,
    pub heartbeat: f64,
    pub limit: u32,
    pub wait: f64,
    pub attempts: u32,
    pub backoff: Option<f64>,
    /// `retry`, `skip` or `raise` (the core's names).
    pub on_conflict: String,
    pub on_stopped: String,
    pub on_lost: String,
}

fn build(options: &[Opt]) -> mistri_locks::Result<JobOptions> {
    let mut builder = JobOptions::builder();
    for o in options {
        builder.set(&o.name, convert::value(o))?;
    }
    builder.build()
}

/// `jobOptions([{name, number|text|flag}, …])`: the options by the core's
/// names (`on_conflict`, …), checked together; an unknown name or a bad
/// value throws in the core's words.
#[napi]
pub fn job_options(options: Vec<Opt>) -> Result<CheckedJobOptions> {
    let o = build(&options).map_err(|e| js_error(&e))?;
    Ok(CheckedJobOptions {
        ttl: o.ttl.as_secs_f64(),
        heartbeat: o.heartbeat.as_secs_f64(),
        limit: o.limit,
        wait: o.wait.map_or(f64::INFINITY, |w| w.as_secs_f64()),
        attempts: o.attempts,
        backoff: o.backoff.map(|b| b.as_secs_f64()),
        on_conflict: o.on_conflict.name().to_owned(),
        on_stopped: o.on_stopped.name().to_owned(),
        on_lost: o.on_lost.name().to_owned(),
    })
}

/// `jobBackoff(options, attempt, jitter)`: seconds before retry `attempt`
/// (1, 2, …) of a job with these options; `jitter` in [0, 1] (the face
/// draws it).
#[napi]
pub fn job_backoff(options: Vec<Opt>, attempt: u32, jitter: f64) -> Result<f64> {
    let o = build(&options).map_err(|e| js_error(&e))?;
    Ok(o.backoff_for(attempt, jitter).as_secs_f64())
}
