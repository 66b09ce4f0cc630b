//! The events of a hold: what happened ([`EventKind`]), why a hold was lost
//! ([`LostCause`]) and one [`Event`]. The engine makes them, a `Locks`'s
//! stats count them and run its hooks (`crate::stats`), and the notifier and
//! host delivery (`super::notify`, `super::delivery`) carry them to user
//! code; they live here, in the signal layer, so that delivery needs
//! nothing from the stats above it. The definitions of each kind are in
//! `stats.rs`'s header.

/// What happened to a hold (see the module header for each definition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventKind {
    /// A hold took its lease.
    Acquired,
    /// A hold's acquire found the lease held elsewhere.
    Refused,
    /// A renewal was confirmed after failed attempts.
    RenewedLate,
    /// The first failed renewal attempt since the last confirmed one.
    AtRisk,
    /// The hold is lost.
    Lost,
    /// The hold's stop flag was seen.
    Stopped,
    /// The hold was released.
    Released,
}

impl EventKind {
    /// Every kind, in a stable order.
    pub const ALL: [EventKind; 7] = [
        EventKind::Acquired,
        EventKind::Refused,
        EventKind::RenewedLate,
        EventKind::AtRisk,
        EventKind::Lost,
        EventKind::Stopped,
        EventKind::Released,
    ];

    /// The kind's name in every face: `acquired`, `refused`,
    /// `renewed_late`, `at_risk`, `lost`, `stopped`, `released`.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Acquired => "acquired",
            EventKind::Refused => "refused",
            EventKind::RenewedLate => "renewed_late",
            EventKind::AtRisk => "at_risk",
            EventKind::Lost => "lost",
            EventKind::Stopped => "stopped",
            EventKind::Released => "released",
        }
    }

    /// The kind named `name` ([`EventKind::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Why a hold was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostCause {
    /// A renewal found the lease gone or someone else's (expired, taken,
    /// broken).
    NotHeld,
    /// A renewal reached the backend with less than the safety margin of
    /// the lease's life left, and was refused.
    TooLate,
    /// No renewal was confirmed before the hold's safe deadline.
    Deadline,
    /// The hung-holder guard's `max_hold` ended the renewals; the hold was
    /// told at its safe deadline.
    MaxHold,
    /// The hung-holder guard's progress timeout passed without a `touch`:
    /// renewals stopped and the hold was told at once.
    Stalled,
}

impl LostCause {
    /// The cause's name in every face: `not_held`, `too_late`, `deadline`,
    /// `max_hold`, `stalled`.
    pub fn name(self) -> &'static str {
        match self {
            LostCause::NotHeld => "not_held",
            LostCause::TooLate => "too_late",
            LostCause::Deadline => "deadline",
            LostCause::MaxHold => "max_hold",
            LostCause::Stalled => "stalled",
        }
    }

    /// The cause named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            LostCause::NotHeld,
            LostCause::TooLate,
            LostCause::Deadline,
            LostCause::MaxHold,
            LostCause::Stalled,
        ]
        .into_iter()
        .find(|c| c.name() == name)
    }
}

/// One event of a hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The hold's key.
    pub key: String,
    /// The hold's fencing number (0 for `refused`).
    pub fence: u64,
    /// `lost`, `stopped`: the signal's reason; `at_risk`: the error.
    pub reason: Option<String>,
    /// `lost` only: why.
    pub cause: Option<LostCause>,
}

impl Event {
    pub(crate) fn new(kind: EventKind, key: &str, fence: u64) -> Self {
        Event {
            kind,
            key: key.to_owned(),
            fence,
            reason: None,
            cause: None,
        }
    }
}
