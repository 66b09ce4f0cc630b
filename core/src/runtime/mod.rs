//! What every layer leans on: the fork generation and values that reset in
//! a forked child ([`fork::ForkLocal`]), and locks that a fork cannot leave
//! held, and owner tokens ([`token::mint_token`]).

pub(crate) mod fork;
pub(crate) mod sync;
pub(crate) mod token;
