//! Options given by name: the value a face read from its host language
//! ([`OptionValue`]) and the nearest known name to an unknown one
//! ([`nearest`]), for the "did you mean" of every option error.

use crate::error::{Error, Result};
use std::fmt;

/// One option's value as a face read it (a Python keyword, a Ruby keyword
/// Hash entry, a C setter's argument). The option's setter says which
/// kinds it takes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum OptionValue {
    /// Not given (`None`, `nil`, NULL): the default.
    None,
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float (seconds are floats in every face).
    Float(f64),
    /// Text.
    Text(String),
}

impl fmt::Display for OptionValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionValue::None => f.write_str("nothing"),
            OptionValue::Bool(b) => write!(f, "{b}"),
            OptionValue::Int(n) => write!(f, "{n}"),
            OptionValue::Float(x) => write!(f, "{x}"),
            OptionValue::Text(t) => write!(f, "{t:?}"),
        }
    }
}

impl OptionValue {
    /// Seconds, from an integer or a float (a bool is not a number).
    ///
    /// # Errors
    /// [`Error::WrongType`] naming option `name`.
    pub fn seconds(&self, name: &str) -> Result<f64> {
        match self {
            // An i64 of seconds fits an f64 far beyond any useful duration.
            #[allow(clippy::cast_precision_loss)]
            OptionValue::Int(n) => Ok(*n as f64),
            OptionValue::Float(x) => Ok(*x),
            other => Err(Error::WrongType(format!(
                "{name} must be a number of seconds, got {other}"
            ))),
        }
    }

    /// An integer (a float with no fraction is not one: say `3`, not `3.0`).
    ///
    /// # Errors
    /// [`Error::WrongType`] naming option `name`.
    pub fn integer(&self, name: &str) -> Result<i64> {
        match self {
            OptionValue::Int(n) => Ok(*n),
            other => Err(Error::WrongType(format!(
                "{name} must be an integer, got {other}"
            ))),
        }
    }
}

/// The known name closest to `given`: the same name in another case, else
/// the closest within two edits (one for a name of up to four letters).
/// `None` when nothing is that close. Every "did you mean" of the core
/// (URL options, hold and job options) asks it.
pub fn nearest<'a>(given: &str, known: &[&'a str]) -> Option<&'a str> {
    let lower = given.to_ascii_lowercase();
    if let Some(same) = known.iter().find(|k| k.eq_ignore_ascii_case(given)) {
        return Some(same);
    }
    let allowed = if given.chars().count() <= 4 { 1 } else { 2 };
    known
        .iter()
        .map(|k| (distance(&lower, k), *k))
        .filter(|(d, _)| *d <= allowed)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance, by characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_names() {
        let known = ["min_replicas", "timeout", "eviction", "ttl"];
        assert_eq!(nearest("min_replica", &known), Some("min_replicas"));
        assert_eq!(nearest("minreplicas", &known), Some("min_replicas"));
        assert_eq!(nearest("MIN_REPLICAS", &known), Some("min_replicas"));
        assert_eq!(nearest("tll", &known), Some("ttl"));
        assert_eq!(nearest("bogus", &known), None);
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn values_say_what_they_are() {
        assert_eq!(OptionValue::Int(3).seconds("ttl").unwrap(), 3.0);
        let e = OptionValue::Bool(true).seconds("ttl").unwrap_err();
        assert_eq!(e.message(), "ttl must be a number of seconds, got true");
        let e = OptionValue::Float(3.0).integer("limit").unwrap_err();
        assert_eq!(e.message(), "limit must be an integer, got 3");
    }
}
