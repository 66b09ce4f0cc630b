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

/// Every option setter of the core says "wrong kind" with
/// `Error::WrongType` (a face's TypeError) and "right kind, bad value"
/// with `Error::InvalidArgument`, so no face reads the message.
#[test]
fn setters_tell_a_wrong_kind_from_a_bad_value() {
    use mistri_locks::job::JobOptions;
    use mistri_locks::operator::{OperatorOptions, OperatorRequestFields};
    use mistri_locks::{ConnectionParts, Error, OpenOptions, Result};
    use OptionValue::{Bool, Float, Int, Text};
    let kind = |r: Result<()>, what: &str| match r {
        Err(Error::WrongType(_)) => {}
        other => panic!("{what}: want WrongType, got {other:?}"),
    };
    let value = |r: Result<()>, what: &str| match r {
        Err(Error::InvalidArgument(_)) => {}
        other => panic!("{what}: want InvalidArgument, got {other:?}"),
    };
    let hold = |n: &str, v: OptionValue| HoldOptions::default().set(n, v).map(|_| ());
    kind(hold("ttl", Text("soon".into())), "hold ttl text");
    kind(hold("wait", Bool(true)), "hold wait bool");
    kind(hold("limit", Float(1.5)), "hold limit float");
    kind(hold("stop_key", Int(3)), "hold stop_key int");
    kind(hold("label", Bool(false)), "hold label bool");
    value(hold("ttl", Float(-1.0)), "hold ttl negative");
    value(hold("ttl", Float(f64::NAN)), "hold ttl NaN");
    value(hold("wait", Float(-1.0)), "hold wait negative");
    value(hold("limit", Int(0)), "hold limit 0");
    value(hold("stop_key", Text(String::new())), "hold stop_key empty");
    value(hold("tll", Int(3)), "hold unknown name");

    let job = |n: &str, v: OptionValue| JobOptions::builder().set(n, v).map(|_| ());
    kind(job("ttl", Text("1".into())), "job ttl text");
    kind(job("attempts", Float(2.0)), "job attempts float");
    kind(job("on_conflict", Int(1)), "job on_conflict int");
    value(
        job("on_conflict", Text("later".into())),
        "job on_conflict name",
    );
    let built = |n: &str, v: OptionValue| {
        let mut b = JobOptions::builder();
        b.set(n, v)?;
        b.build().map(|_| ())
    };
    value(built("ttl", Float(0.0)), "job ttl 0");
    value(built("limit", Int(0)), "job limit 0");

    let operator = |n: &str, v: OptionValue| OperatorOptions::builder().set(n, v).map(|_| ());
    kind(operator("prefix", Int(1)), "operator prefix int");
    kind(
        operator("allow_actions", Text("yes".into())),
        "operator bool text",
    );
    value(
        operator("allowed_hosts", Text(String::new())),
        "operator empty host",
    );
    let request = |n: &str, v: OptionValue| OperatorRequestFields::default().set(n, v).map(|_| ());
    kind(request("host", Bool(true)), "request host bool");
    kind(
        request("host_authorized", Text("yes".into())),
        "request bool text",
    );

    let open = |n: &str, v: OptionValue| OpenOptions::new().set(n, v).map(|_| ());
    kind(open("namespace", Int(1)), "open namespace int");
    kind(open("io_timeout", Text("1".into())), "open io_timeout text");
    value(open("io_timeout", Float(0.0)), "open io_timeout 0");

    let parts = |n: &str, v: OptionValue| ConnectionParts::new().set(n, v).map(|_| ());
    kind(parts("host", Bool(true)), "parts host bool");
    kind(parts("port", Float(5432.5)), "parts port float");
    value(parts("port", Int(70_000)), "parts port out of range");
    value(parts("port", Text("x".into())), "parts port text");
}
