//! `MistriLocks::Hold`: a core [`Hold`] for Ruby.
//!
//! Native part: `key`, `fence`, `lost?`, `touch`, `interruption`, and the plumbing
//! `_release` (the outcome as a Symbol) and `_signal`.
//! `lib/mistri_locks/hold.rb` adds `release` (true/false, the seed's),
//! `release_outcome`, `signal`, the block form and the delivery to a
//! duck-typed `signal:` object.
//!
//! A Hold garbage-collected without `release` does no I/O in its free
//! function: it leaves the heartbeat at once and hands the delete of its
//! lease to the core engine's I/O thread (`Hold::release_in_background`).
//! A forked child's copy never touches its parent's lease.

use crate::locks::RbLocks;
use crate::nogvl::nogvl;
use crate::signal::Signal;
use crate::{args, error, waiting};
use magnus::{method, prelude::*, Error, RArray, RHash, RModule, Ruby, Symbol, Value};
use mistri_locks::job::{self, JobOptions};
use mistri_locks::{AbortSignal, Hold, HoldOptions, Interruption, Locks, ReleaseOutcome};
use std::time::Duration;

/// `MistriLocks._hold(locks, key, signal, options)` -> Hold or nil: a
/// hold on `locks`, or with nil on the core's configured slot (which still
/// checks the arguments when nothing is configured). `options` is the
/// keyword Hash of `hold`, read by name (`args::hold_options`: the core's
/// `HoldOptions::set`). `signal` is nil or a `MistriLocks::AbortSignal`
/// (duck-typed signals are the Ruby half's business). With a `wait`, waits
/// without the GVL, interruptibly (`waiting.rs`).
pub fn start(
    ruby: &Ruby,
    locks: Option<&RbLocks>,
    key: Value,
    signal: Option<&Signal>,
    options: RHash,
) -> Result<Option<RbHold>, Error> {
    let key = args::key(ruby, "key", key)?;
    let signal = signal.map(|s| s.0.clone());
    let mut opts = args::hold_options(ruby, options)?;
    opts.signal = signal.clone();
    begin(ruby, locks.map(|l| l.locks()), &key, opts, signal)
}

/// A job's hold options, built once when its class declares them (the
/// core's `JobOptions`: ttl, heartbeat, limit, wait), so a job's start
/// reads no option by name: `MistriLocks._job_options` returns it under
/// `:hold`, and `MistriLocks._job_hold` takes it.
#[magnus::wrap(class = "MistriLocks::JobHoldOptions", free_immediately, size)]
pub struct JobHoldOptions(HoldOptions);

impl JobHoldOptions {
    pub fn new(job: &JobOptions) -> Self {
        JobHoldOptions(HoldOptions {
            ttl: job.ttl,
            heartbeat: job.heartbeat,
            limit: job.limit,
            // The job's wait: zero tries once (the hold's default), none
            // waits without limit.
            wait: match job.wait {
                Some(w) if w.is_zero() => None,
                Some(w) => Some(w),
                None => Some(Duration::MAX),
            },
            ..HoldOptions::default()
        })
    }
}

/// `MistriLocks._job_hold(locks, key, job_id, job_class, options)` ->
/// Hold or nil: a job's lease in one call (the job faces' hot path). The
/// stop key is the core's `job::stop_key(job_id)`, the holder label
/// `"<locks.label> <job_class>"`; `options` is the class's
/// `JobHoldOptions`. The Hold's signal is made only if asked for
/// (`Hold#signal`).
pub fn job_start(
    ruby: &Ruby,
    locks: &RbLocks,
    key: Value,
    job_id: Value,
    job_class: Value,
    options: &JobHoldOptions,
) -> Result<Option<RbHold>, Error> {
    let key = args::key(ruby, "key", key)?;
    let job_id = args::key(ruby, "job id", job_id)?;
    let job_class = args::key(ruby, "job class", job_class)?;
    let mut opts = options.0.clone();
    opts.stop_key = Some(job::stop_key(&job_id).map_err(|e| error::to_ruby(ruby, e))?);
    opts.label = Some(format!("{} {job_class}", locks.locks().label()));
    begin(ruby, Some(locks.locks()), &key, opts, None)
}

/// Starts a hold: one try without the GVL (a round trip, bounded by the
/// core: no unblock function), or a wait driven interruptibly.
fn begin(
    ruby: &Ruby,
    locks: Option<&Locks>,
    key: &str,
    opts: HoldOptions,
    signal: Option<AbortSignal>,
) -> Result<Option<RbHold>, Error> {
    let started =
        mistri_locks::start_hold(locks, key, opts).map_err(|e| error::to_ruby(ruby, e))?;
    let Some(waiting) = started else {
        return Ok(None); // nothing configured
    };
    let hold = if waiting.waits() {
        let signals: Vec<_> = signal.iter().collect();
        waiting::drive(ruby, waiting, &signals)?
    } else {
        nogvl(ruby, || waiting.wait())?.map_err(|e| error::to_ruby(ruby, e))?
    };
    Ok(hold.map(RbHold::new))
}

#[magnus::wrap(class = "MistriLocks::Hold", free_immediately, size)]
pub struct RbHold {
    hold: Hold,
}

impl RbHold {
    pub fn new(hold: Hold) -> Self {
        RbHold { hold }
    }

    fn key(&self) -> String {
        self.hold.key().to_owned()
    }

    fn fence(&self) -> u64 {
        self.hold.fence()
    }

    fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// `touch`: progress for `progress_timeout:` (cheap; keeps the GVL).
    fn touch(&self) {
        self.hold.touch();
    }

    /// `_release` -> what the release did, as a Symbol: `:released` (this
    /// call deleted the lease), `:not_held` (it had gone by the delete),
    /// `:lost` (the hold was lost before), `:already_released`,
    /// `:other_process` (a forked child's copy: the parent's lease is left
    /// alone), or `:expired` (no answer before the lease's end: it has
    /// lapsed). `Hold#release` is `release_outcome == :released`.
    fn release(ruby: &Ruby, rb_self: &Self) -> Result<Symbol, Error> {
        let hold = &rb_self.hold;
        // May do a round trip: without the GVL (no unblock function: the
        // core bounds it).
        let outcome = nogvl(ruby, || hold.release())?;
        let name = match outcome.map_err(|e| error::to_ruby(ruby, e))? {
            ReleaseOutcome::Released => "released",
            ReleaseOutcome::NotHeld => "not_held",
            ReleaseOutcome::Lost => "lost",
            ReleaseOutcome::AlreadyReleased => "already_released",
            ReleaseOutcome::OtherProcess => "other_process",
            ReleaseOutcome::Expired => "expired",
        };
        Ok(ruby.to_symbol(name))
    }

    /// `interruption` -> nil while the work may go on, else why it should
    /// stop (the core's `Hold::interruption`, typed; no reason text read):
    /// `[:stopped, flag]` (the stop flag's key, or nil when the caller's own
    /// signal was aborted) or `[:lost, cause]` (`:not_held`, `:too_late`,
    /// `:deadline`, `:max_hold`, `:stalled`, or nil for a forked child's
    /// copy).
    fn interruption(ruby: &Ruby, rb_self: &Self) -> Result<Option<RArray>, Error> {
        let Some(why) = rb_self.hold.interruption() else {
            return Ok(None);
        };
        let detail: Option<Value> = match &why {
            Interruption::Stopped { flag } => flag.as_deref().map(|f| ruby.str_new(f).as_value()),
            Interruption::Lost { cause } => cause.map(|c| ruby.to_symbol(c.name()).as_value()),
            _ => None,
        };
        let pair = ruby.ary_new_capa(2);
        pair.push(ruby.to_symbol(why.name()))?;
        pair.push(detail)?;
        Ok(Some(pair))
    }

    /// `_signal`: a new Ruby object around the hold's core signal.
    fn signal(&self) -> Signal {
        Signal(self.hold.signal().clone())
    }
}

impl Drop for RbHold {
    fn drop(&mut self) {
        // Runs inside Ruby's GC (free_immediately): no network round trip
        // here. After this, the core Hold's own Drop finds nothing to do.
        self.hold.release_in_background();
    }
}

pub fn init(ruby: &Ruby, module: RModule) -> Result<(), Error> {
    let class = module.define_class("Hold", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_method("key", method!(RbHold::key, 0))?;
    class.define_method("fence", method!(RbHold::fence, 0))?;
    class.define_method("lost?", method!(RbHold::is_lost, 0))?;
    class.define_method("touch", method!(RbHold::touch, 0))?;
    class.define_method("interruption", method!(RbHold::interruption, 0))?;
    class.define_private_method("_release", method!(RbHold::release, 0))?;
    class.define_private_method("_signal", method!(RbHold::signal, 0))?;
    let options = module.define_class("JobHoldOptions", ruby.class_object())?;
    options.undef_default_alloc_func();
    Ok(())
}
