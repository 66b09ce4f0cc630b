//! Options set by name (issue 40): the one parser every face passes its
//! keyword arguments through, with the same refusals in the same words.

use mistri_locks::{HoldOptions, Locks, OptionValue};
use std::time::Duration;

fn set(pairs: Vec<(&str, OptionValue)>) -> mistri_locks::Result<HoldOptions> {
    let mut o = HoldOptions::default();
    for (name, value) in pairs {
        o.set(name, value)?;
    }
    o.validate()?;
    Ok(o)
}

#[test]
fn hold_options_by_name_build_the_same_hold() {
    let o = set(vec![
        ("ttl", OptionValue::Float(2.5)),
        ("heartbeat", OptionValue::Int(1)),
        ("stop_key", OptionValue::Text("job:1:stop".into())),
        ("label", OptionValue::Text("worker 7".into())),
        ("limit", OptionValue::Int(3)),
        ("wait", OptionValue::Float(f64::INFINITY)),
        ("max_hold", OptionValue::Int(60)),
        ("label", OptionValue::None),
    ])
    .unwrap();
    assert_eq!(o.ttl, Duration::from_millis(2500));
    assert_eq!(o.heartbeat, Duration::from_secs(1));
    assert_eq!(o.stop_key.as_deref(), Some("job:1:stop"));
    assert_eq!(o.label.as_deref(), Some("worker 7"), "None leaves it");
    assert_eq!(
        (o.limit, o.wait, o.max_hold),
        (3, Some(Duration::MAX), Some(Duration::from_secs(60)))
    );
    let locks = Locks::memory();
    let hold = locks.hold("by-name", o).unwrap().expect("free");
    assert_eq!(
        locks.info("by-name").unwrap().unwrap().holders[0].label,
        "worker 7"
    );
    hold.release().unwrap();
}

#[test]
fn hold_options_by_name_refuse_with_the_nearest_name() {
    for (name, value, says) in [
        (
            "tll",
            OptionValue::Int(1),
            "unknown hold option \"tll\"; did you mean \"ttl\"?",
        ),
        (
            "stopkey",
            OptionValue::Text("x".into()),
            "did you mean \"stop_key\"?",
        ),
        (
            "signal",
            OptionValue::Bool(true),
            "unknown hold option \"signal\"",
        ),
        ("ttl", OptionValue::Float(-1.0), "ttl"),
        (
            "ttl",
            OptionValue::Text("3".into()),
            "ttl must be a number of seconds, got \"3\"",
        ),
        ("limit", OptionValue::Int(0), "limit"),
        (
            "limit",
            OptionValue::Int(-2),
            "limit must be an integer >= 1, got -2",
        ),
        ("stop_key", OptionValue::Text(String::new()), "stop_key"),
        ("label", OptionValue::Int(3), "label must be text, got 3"),
        ("wait", OptionValue::Float(f64::NAN), "wait"),
    ] {
        // A value of the wrong kind is its own kind of error (a face's
        // TypeError); any other refusal an invalid argument.
        let wrong_kind = matches!(
            (name, &value),
            ("ttl", OptionValue::Text(_)) | ("label", OptionValue::Int(_))
        );
        let e = set(vec![(name, value)]).unwrap_err();
        if wrong_kind {
            assert!(
                matches!(e, mistri_locks::Error::WrongType(_)),
                "{name}: {e}"
            );
        } else {
            assert!(
                matches!(e, mistri_locks::Error::InvalidArgument(_)),
                "{name}: {e}"
            );
        }
        assert!(e.to_string().contains(says), "{name}: {e}");
    }
}
