//! The one key formatter: every Redis key and channel of the protocol is
//! `NS:kind:{KEY}` (the braces literal: a Cluster hash tag, so every key
//! of one lease shares a slot), a line's channel `NS:next:{KEY}:LINE`.
//! [`super::resp`] writes the same bytes straight into a command buffer
//! on the hot paths (checked against this in its tests).

/// `NS:kind:{KEY}`.
pub(crate) fn key_of(ns: &str, kind: &str, key: &str) -> String {
    format!("{ns}:{kind}:{{{key}}}")
}

/// The channel of the waiting line `line` of `key`: `NS:next:{KEY}:LINE`.
pub(crate) fn line_channel(ns: &str, key: &str, line: &str) -> String {
    format!("{}:{line}", key_of(ns, "next", key))
}
