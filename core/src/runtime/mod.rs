//! What every layer leans on: the fork generation and values that reset in
//! a forked child ([`fork::ForkLocal`]), and locks that a fork cannot leave
//! held, the idle-connection pool of the network backends
//! ([`pool::IdlePool`]), owner tokens ([`token::mint_token`]), the one way a library
//! thread starts ([`thread::spawn`], deaf to host signals) and the one
//! retry of a call a signal cut short ([`eintr::retry`]), and the host's
//! clocks read directly ([`clock::clock_ns`]).

use std::time::Duration;

/// How long an idle library thread (a heartbeat engine's, the notifier)
/// lingers before exiting; a new one starts with the next work.
pub const IDLE_EXIT: Duration = Duration::from_secs(2);

pub(crate) mod clock;
pub(crate) mod eintr;
pub(crate) mod fork;
pub(crate) mod pool;
pub(crate) mod sync;
pub(crate) mod thread;
pub(crate) mod token;
