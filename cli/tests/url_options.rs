//! `--url` with an option its backend does not know is bad usage (status 2)
//! before anything connects (issue 39, findings 3 and 15): the message
//! names the option and the nearest known one, with the password masked.
//! The URLs point at closed ports, so the answer cannot be a connection
//! error (which is status 1).

use mistri_locks_testkit::unique;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_mistri-locks");
const USAGE: i32 = 2;

fn run(url: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .env_remove("MISTRI_LOCKS_URL")
        .arg("--url")
        .arg(url)
        .args(args)
        .output()
        .unwrap()
}

/// Exit status 2 and this one line on stderr.
fn refused(url: &str, args: &[&str], message: &str) {
    let out = run(url, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(USAGE), "{url} {args:?}: {err}");
    assert_eq!(
        err,
        format!("mistri-locks: invalid argument: {message}\n"),
        "{url} {args:?}"
    );
    assert!(out.stdout.is_empty(), "{url} {args:?}");
}

#[test]
fn a_mistyped_option_is_bad_usage_naming_the_right_one() {
    refused(
        "redis://127.0.0.1:1/0?min_replica=all",
        &["status"],
        "unknown option \"min_replica\" in redis://127.0.0.1:1/0; did you mean \"min_replicas\"?",
    );
    refused(
        "redis://admin:s3cret@127.0.0.1:1/0?MIN_REPLICAS=all",
        &["list", "--json"],
        "unknown option \"MIN_REPLICAS\" in redis://admin:***@127.0.0.1:1/0; did you mean \"min_replicas\"?",
    );
    refused(
        "redis+sentinel://127.0.0.1:1/mymaster?minreplicas=all",
        &["stop", "some:flag"],
        "unknown option \"minreplicas\" in redis+sentinel://127.0.0.1:1/mymaster; did you mean \"min_replicas\"?",
    );
    refused(
        "rediss+cluster://127.0.0.1:1?timeout=abc",
        &["run", "k", "--", "true"],
        "unknown option \"timeout\" in rediss+cluster://127.0.0.1:1; rediss+cluster:// takes: \
         min_replicas, replica_timeout, eviction, settings_check",
    );
    refused(
        "postgres://u:s3cret@127.0.0.1:1/db?sslmod=require",
        &["status"],
        "unknown option \"sslmod\" in postgres://u:***@127.0.0.1:1/db; did you mean \"sslmode\"?",
    );
}

#[test]
fn a_file_url_query_is_refused_and_makes_no_file() {
    let dir = std::env::temp_dir().join(unique("mistri-cli-file-url"));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("file://{}/x.db?mode=ro", dir.display());
    refused(
        &url,
        &["list"],
        &format!(
            "unknown option \"mode\" in file://{}/x.db; file:// takes no options \
             (a path with '?' in its name is given without file://)",
            dir.display()
        ),
    );
    let made: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(made.is_empty(), "{made:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
