//! Errors of the core. One enum, one variant per kind of trouble, so every
//! face (C status codes, Python and Ruby exception classes) maps it in one
//! exhaustive `match`.

use std::fmt;

/// What went wrong. Messages say what was wrong with which value; they never
/// contain a Redis password.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A caller passed a value the contract forbids: an empty key, a
    /// non-finite, zero or negative duration, a namespace with braces.
    InvalidArgument(String),
    /// A value of the wrong kind for its option: text where seconds are
    /// due, a float for an integer, a number or a bool for text. Faces
    /// with a type error (Python, Ruby, Node) raise it; C reports
    /// `MISTRI_INVALID_ARGUMENT`, as for any other bad argument. A value of
    /// the right kind but out of range is [`Error::InvalidArgument`].
    WrongType(String),
    /// The adapter could not be set up as asked: an unparsable URL, a TLS
    /// setup failure, an authentication refusal.
    Config(String),
    /// The backend could not be reached or stopped answering: connection
    /// refused, reset, timed out.
    Connection(String),
    /// The backend answered, but with an error.
    Backend(String),
    /// The operating system refused something we need (e.g. a thread).
    System(String),
}

impl Error {
    /// Whether the caller passed a bad argument: [`Error::InvalidArgument`]
    /// or [`Error::WrongType`] (the kinds C reports as
    /// `MISTRI_INVALID_ARGUMENT` and the CLI as a usage error).
    pub fn is_bad_argument(&self) -> bool {
        matches!(self, Error::InvalidArgument(_) | Error::WrongType(_))
    }

    /// The message without the kind prefix.
    pub fn message(&self) -> &str {
        match self {
            Error::InvalidArgument(m)
            | Error::WrongType(m)
            | Error::Config(m)
            | Error::Connection(m)
            | Error::Backend(m)
            | Error::System(m) => m,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Error::InvalidArgument(_) => "invalid argument",
            Error::WrongType(_) => "wrong type",
            Error::Config(_) => "configuration error",
            Error::Connection(_) => "connection error",
            Error::Backend(_) => "backend error",
            Error::System(_) => "system error",
        };
        write!(f, "{kind}: {}", self.message())
    }
}

impl std::error::Error for Error {}

/// The result type of every fallible core operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;
