//! What every layer leans on: the fork generation and values that reset in
//! a forked child ([`fork::ForkLocal`]), and locks that a fork cannot leave
//! held.

pub(crate) mod fork;
pub(crate) mod sync;
