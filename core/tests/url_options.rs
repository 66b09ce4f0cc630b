//! Every backend refuses a URL option it does not know (issue 39, finding
//! 3): one allowlist per scheme in the core's scheme table, checked at open
//! before anything connects (the URLs point at closed ports, so no answer
//! here can be a connection error). The error names the unknown option and
//! the nearest known one, with the password masked. A `file://` URL's query
//! goes through the same allowlist (finding 15): `file://` takes no
//! options, so `?mode=ro` is refused instead of becoming part of the name.

use mistri_locks::{Error, Locks, OpenOptions, Postgres};
use mistri_locks_testkit::unique;
use std::path::Path;

/// The message of an invalid-argument error; anything else fails the test.
fn refused<T: std::fmt::Debug>(url: &str, r: Result<T, Error>) -> String {
    match r {
        Err(Error::InvalidArgument(m)) => m,
        Err(other) => panic!("{url}: expected an invalid-argument error, got {other:?}"),
        Ok(v) => panic!("{url}: expected an invalid-argument error, it opened: {v:?}"),
    }
}

/// Every way a URL is opened: `open`, `open_with`, the family's own
/// constructor. Each must refuse `url` with the same message.
fn refused_everywhere(url: &str) -> String {
    let message = refused(url, Locks::open(url));
    let with = refused(
        url,
        Locks::open_with(url, &OpenOptions::new().namespace("ns")),
    );
    assert_eq!(with, message, "{url}");
    let own = match mistri_locks::family_of(url).unwrap() {
        mistri_locks::Family::Redis => refused(url, Locks::redis(url, "ns")),
        mistri_locks::Family::Postgres => refused(url, Postgres::open(url, "ns")),
        mistri_locks::Family::Local => refused(url, Locks::local(Some(Path::new(url)))),
        // Memory (and any family to come) has no constructor of its own.
        _ => message.clone(),
    };
    assert_eq!(own, message, "{url}");
    message
}

#[test]
fn a_mistyped_redis_option_names_the_right_one() {
    for (typo, meant) in [
        ("min_replica=all", "min_replicas"),
        ("minreplicas=all", "min_replicas"),
        ("MIN_REPLICAS=all", "min_replicas"),
        ("replica_timout=0.1", "replica_timeout"),
        ("Eviction=accept", "eviction"),
        ("settings_chek=5", "settings_check"),
    ] {
        let key = typo.split('=').next().unwrap();
        let url = format!("redis://127.0.0.1:1/0?{typo}");
        assert_eq!(
            refused_everywhere(&url),
            format!("unknown option \"{key}\" in redis://127.0.0.1:1/0; did you mean \"{meant}\"?")
        );
    }
}

#[test]
fn an_option_with_no_near_name_lists_the_known_ones() {
    for pair in ["bogus=1", "timeout=abc", "protocol=resp3", "db=2"] {
        let key = pair.split('=').next().unwrap();
        let url = format!("redis://127.0.0.1:1/0?{pair}");
        assert_eq!(
            refused_everywhere(&url),
            format!(
                "unknown option \"{key}\" in redis://127.0.0.1:1/0; redis:// takes: \
                 min_replicas, replica_timeout, eviction, settings_check"
            )
        );
    }
}

#[test]
fn every_redis_form_refuses_and_masks_the_password() {
    for (url, shown) in [
        (
            "rediss://u:s3cret@127.0.0.1:1/0?min_replica=all#insecure",
            "rediss://u:***@127.0.0.1:1/0",
        ),
        (
            "redis+cluster://:s3cret@127.0.0.1:1,127.0.0.1:2?min_replica=all",
            "redis+cluster://:***@127.0.0.1:1,127.0.0.1:2",
        ),
        (
            "rediss+cluster://u:s3cret@127.0.0.1:1?min_replica=all",
            "rediss+cluster://u:***@127.0.0.1:1",
        ),
        (
            "redis+sentinel://u:s3cret@127.0.0.1:1/mymaster/0?min_replica=all",
            "redis+sentinel://u:***@127.0.0.1:1/mymaster/0",
        ),
        (
            "unix:///nonexistent/redis.sock?min_replica=all&pass=s3cret",
            "unix:///nonexistent/redis.sock",
        ),
    ] {
        let message = refused_everywhere(url);
        assert_eq!(
            message,
            format!("unknown option \"min_replica\" in {shown}; did you mean \"min_replicas\"?")
        );
        assert!(!message.contains("s3cret"), "{message}");
    }
    // A mistyped password option: named, its value (the password) not shown.
    let url = "redis+sentinel://127.0.0.1:1/m?sentinel_pasword=s3cret";
    let message = refused_everywhere(url);
    assert!(
        message.contains("\"sentinel_pasword\"") && message.contains("\"sentinel_password\""),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "{message}");
    // Sentinel's own options are Sentinel's only.
    let message = refused_everywhere("redis://127.0.0.1:1/0?sentinel_password=s3cret");
    assert!(message.contains("\"sentinel_password\""), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
}

#[test]
fn a_bad_value_names_the_option_and_the_value() {
    for (pair, option, value) in [
        ("min_replicas=lots", "min_replicas", "lots"),
        ("replica_timeout=abc", "replica_timeout", "abc"),
        ("eviction=maybe", "eviction", "maybe"),
        ("settings_check=soon", "settings_check", "soon"),
    ] {
        let url = format!("redis://u:s3cret@127.0.0.1:1/0?{pair}");
        let message = refused(&url, Locks::open(&url));
        assert!(
            message.contains(option) && message.contains(&format!("{value:?}")),
            "{url}: {message}"
        );
        assert!(!message.contains("s3cret"), "{message}");
    }
}

#[test]
fn an_option_given_twice_is_refused() {
    let url = "redis://127.0.0.1:1/0?min_replicas=all&min_replicas=0";
    assert_eq!(
        refused_everywhere(url),
        "option \"min_replicas\" given twice in redis://127.0.0.1:1/0; give it once"
    );
}

#[test]
fn the_known_options_still_open() {
    // Redis connects lazily, so a closed port opens; an unknown option
    // above is refused before that, at the same place.
    for url in [
        "redis://127.0.0.1:1/0?min_replicas=all&replica_timeout=0.25&eviction=accept&settings_check=5",
        "redis+unix:///nonexistent/redis.sock?db=1&user=u&pass=p&min_replicas=1",
    ] {
        Locks::open(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        Locks::redis(url, "ns").unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

#[test]
fn postgres_goes_through_the_same_allowlist() {
    let url = "postgres://u:s3cret@127.0.0.1:1/db?sslmod=require";
    let message = refused_everywhere(url);
    assert_eq!(
        message,
        "unknown option \"sslmod\" in postgres://u:***@127.0.0.1:1/db; did you mean \"sslmode\"?"
    );
    let url = "postgresql://127.0.0.1:1/db?frobnicate=1";
    assert!(refused_everywhere(url).starts_with(
        "unknown option \"frobnicate\" in postgresql://127.0.0.1:1/db; postgresql:// takes: host, port,"
    ));
    // A key/value DSN: the same words, the DSN (and its password) not shown.
    let dsn = "host=127.0.0.1 port=1 dbname=db password=s3cret SSLMODE=require";
    let message = refused_everywhere(dsn);
    assert_eq!(
        message,
        "unknown option \"SSLMODE\" in a key/value DSN; did you mean \"sslmode\"?"
    );
}

#[test]
fn memory_takes_no_options() {
    assert_eq!(
        refused_everywhere("memory://?ttl=5"),
        "unknown option \"ttl\" in memory://; memory:// takes no options"
    );
}

/// A folder of its own (mode 0700: Local refuses a folder others may write).
struct Dir(std::path::PathBuf);

impl Dir {
    fn new() -> Dir {
        use std::os::unix::fs::DirBuilderExt;
        let dir = std::env::temp_dir().join(unique("mistri-url-options"));
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        Dir(dir)
    }

    fn names(&self) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_file_url_query_is_an_option_and_file_takes_none() {
    let dir = Dir::new();
    let url = format!("file://{}/x.db?mode=ro", dir.0.display());
    assert_eq!(
        refused_everywhere(&url),
        format!(
            "unknown option \"mode\" in file://{}/x.db; file:// takes no options \
             (a path with '?' in its name is given without file://)",
            dir.0.display()
        )
    );
    assert!(dir.names().is_empty(), "a file was made: {:?}", dir.names());
    // Without the query the same URL opens x.db; a bare path is a file
    // name, '?' and all.
    Locks::open(&format!("file://{}/x.db", dir.0.display())).unwrap();
    let bare = format!("{}/y.db?mode=ro", dir.0.display());
    Locks::open(&bare).unwrap();
    let mut names = dir.names();
    names.retain(|n| !n.contains("-wal") && !n.contains("-shm") && !n.contains("-journal"));
    names.sort();
    assert_eq!(names, ["x.db", "y.db?mode=ro"]);
}

#[test]
fn redis_open_refuses_the_options_only_open_reads() {
    use mistri_locks::Redis;
    // Redis::open takes one server's URL and reads none of our options:
    // it says so instead of dropping `min_replicas=all`.
    for url in [
        "redis://127.0.0.1:1/0?min_replicas=all",
        "redis://127.0.0.1:1/0?eviction=accept",
    ] {
        let message = refused(url, Redis::open(url, "ns").map(Locks::new));
        assert!(
            message.contains("is read by mistri_locks::open"),
            "{message}"
        );
    }
    let message = refused(
        "redis://127.0.0.1:1/0?min_replica=all",
        Redis::open("redis://127.0.0.1:1/0?min_replica=all", "ns").map(Locks::new),
    );
    assert!(
        message.contains("did you mean \"min_replicas\"?"),
        "{message}"
    );
    Redis::open("redis://127.0.0.1:1/0", "ns").unwrap();
    Redis::open("unix:///nonexistent/redis.sock?db=2", "ns").unwrap();
}
