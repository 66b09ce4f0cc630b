//! What every layer leans on: the fork generation and values that reset in
//! a forked child ([`fork::ForkLocal`]), and locks that a fork cannot leave
//! held, and owner tokens ([`token::mint_token`]).

use std::time::Duration;

/// How long an idle library thread (a heartbeat engine's, the notifier)
/// lingers before exiting; a new one starts with the next work.
pub const IDLE_EXIT: Duration = Duration::from_secs(2);

pub(crate) mod fork;
pub(crate) mod sync;
pub(crate) mod token;
