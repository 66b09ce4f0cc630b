//! One `open`: every scheme of the one table opens its backend (a lease
//! taken through it is seen by that backend's own constructor), the typed
//! options reach the backend, an unknown scheme's error lists every scheme,
//! and each backend's own constructor refuses another backend's URL.

use mistri_locks::{Error, Locks, OpenOptions, Postgres};
use mistri_locks_testkit::{unique, PgServer, RedisCluster, RedisSentinels, RedisServer};
use std::time::Duration;

const TTL: Duration = Duration::from_secs(30);

/// A folder of its own, removed afterwards.
struct Dir(std::path::PathBuf);

impl Dir {
    fn new() -> Dir {
        let dir = std::env::temp_dir().join(unique("mistri-open"));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config_message(r: Result<Locks, Error>) -> String {
    match r {
        Err(Error::Config(m)) => m,
        Err(other) => panic!("expected a config error, got {other:?}"),
        Ok(locks) => panic!("expected a config error, got {locks:?}"),
    }
}

/// `a` takes a lease; `b`, opened another way on the same backend, sees it
/// held.
fn shared(a: &Locks, b: &Locks) {
    let key = unique("k");
    assert!(a.acquire(&key, TTL).unwrap());
    assert!(
        !b.acquire(&key, TTL).unwrap(),
        "the second handle must see the lease"
    );
    assert!(a.release(&key).unwrap());
}

#[test]
fn memory_opens() {
    let locks = Locks::open("memory://").unwrap();
    assert_eq!(locks.adapter().name(), "memory");
    shared(&locks, &locks.new_owner());
}

#[test]
fn a_local_path_and_file_url_open_the_same_file() {
    let dir = Dir::new();
    let db = dir.0.join("locks.db");
    let by_path = Locks::open(db.to_str().unwrap()).unwrap();
    let by_url = Locks::open(&format!("file://{}", db.display())).unwrap();
    assert_eq!(by_path.adapter().name(), "local");
    assert_eq!(by_url.adapter().name(), "local");
    shared(&by_path, &by_url);
    shared(&by_url, &Locks::local(Some(&db)).unwrap());
}

#[test]
fn redis_and_its_variants_open_with_the_namespace() {
    let server = RedisServer::start();
    let ns = unique("mistri:open");
    let options = OpenOptions::new()
        .namespace(&ns)
        .label("opener")
        .io_timeout(Duration::from_secs(3));
    let opened = Locks::open_with(&server.url(), &options).unwrap();
    assert_eq!(opened.adapter().name(), "redis");
    assert_eq!(opened.adapter().io_timeout(), Duration::from_secs(3));
    assert_eq!(opened.label(), "opener");
    shared(&opened, &Locks::redis(&server.url(), &ns).unwrap());
    // Another namespace is another set of keys.
    let elsewhere =
        Locks::open_with(&server.url(), &OpenOptions::new().namespace("other")).unwrap();
    let key = unique("k");
    assert!(opened.acquire(&key, TTL).unwrap());
    assert!(elsewhere.acquire(&key, TTL).unwrap());

    for url in [RedisCluster::shared().url(), RedisSentinels::shared().url()] {
        let ns = unique("mistri:open");
        let opened = Locks::open_with(&url, &OpenOptions::new().namespace(&ns)).unwrap();
        shared(&opened, &Locks::redis(&url, &ns).unwrap());
    }
    assert_eq!(
        Locks::open(&RedisCluster::shared().url())
            .unwrap()
            .adapter()
            .name(),
        "redis-cluster"
    );
}

#[test]
fn rediss_is_the_tls_row() {
    // No TLS server here: the URL parses and the adapter is Redis; the
    // first operation would connect with TLS.
    let locks = Locks::open("rediss://127.0.0.1:1/0").unwrap();
    assert_eq!(locks.adapter().name(), "redis");
}

#[test]
fn postgres_its_dsn_and_the_schema_option() {
    let server = PgServer::start();
    let ns = unique("mistri:open");
    let options = OpenOptions::new().namespace(&ns).schema("open_schema");
    let opened = Locks::open_with(&server.url(), &options).unwrap();
    assert_eq!(opened.adapter().name(), "postgres");
    let key = unique("k");
    assert!(opened.acquire(&key, TTL).unwrap());
    // The schema option, not the URL, put the table there.
    let rows = server.sql(&format!(
        "SELECT count(*) FROM open_schema.leases WHERE key = '{key}'"
    ));
    assert_eq!(rows.trim(), "1", "{rows}");
    let by_url = Postgres::open(&format!("{}?schema=open_schema", server.url()), &ns).unwrap();
    assert!(!Locks::new(by_url).acquire(&key, TTL).unwrap());
    assert!(opened.release(&key).unwrap());

    let postgresql = server.url().replacen("postgres://", "postgresql://", 1);
    let dsn = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        server.port()
    );
    for url in [postgresql, dsn] {
        let opened = Locks::open_with(&url, &OpenOptions::new().namespace(&ns)).unwrap();
        assert_eq!(opened.adapter().name(), "postgres", "{url}");
        shared(
            &opened,
            &Locks::new(Postgres::open(&server.url(), &ns).unwrap()),
        );
    }

    // A schema given both ways is refused: which one was meant is not ours to guess.
    let twice = Locks::open_with(&format!("{}?schema=a", server.url()), &options);
    assert!(matches!(twice, Err(Error::InvalidArgument(m)) if m.contains("given twice")));
}

#[test]
fn an_unknown_scheme_lists_every_scheme() {
    let m = config_message(Locks::open("http://example.com"));
    for scheme in [
        "memory://",
        "file://",
        "a path",
        "redis://",
        "rediss://",
        "redis+cluster://",
        "redis+sentinel://",
        "postgres://",
        "postgresql://",
        "key/value DSN",
    ] {
        assert!(m.contains(scheme), "{scheme} missing from: {m}");
    }
    assert!(m.contains("\"http\""), "{m}");
}

#[test]
fn schema_is_for_postgres_only() {
    let m = config_message(Locks::open_with(
        "memory://",
        &OpenOptions::new().schema("s"),
    ));
    assert!(m.contains("Postgres option"), "{m}");
}

#[test]
fn each_constructor_refuses_another_backends_url() {
    // Nothing connects: the refusal comes from the URL alone.
    let m = config_message(Locks::redis("postgres://u:secret@127.0.0.1:1/db", "ns"));
    assert!(m.contains("Redis constructor takes redis://"), "{m}");
    assert!(m.contains("Postgres URL") && m.contains("open(url)"), "{m}");
    assert!(!m.contains("secret"), "{m}");
    let m = config_message(Locks::redis("/tmp/locks.db", "ns"));
    assert!(m.contains("Local URL"), "{m}");
    let m = config_message(Locks::redis("host=h dbname=d", "ns"));
    assert!(m.contains("Postgres URL"), "{m}");

    for url in ["redis://127.0.0.1:1/0", "memory://", "file:///tmp/x.db"] {
        match Postgres::open(url, "ns") {
            Err(Error::Config(m)) => {
                assert!(m.contains("Postgres constructor takes postgres://"), "{m}");
                assert!(m.contains("open(url)"), "{m}");
            }
            other => panic!("{url}: expected a config error, got {other:?}"),
        }
    }

    let m = config_message(Locks::local(Some(std::path::Path::new(
        "redis://127.0.0.1:1/0",
    ))));
    assert!(m.contains("Local constructor takes"), "{m}");
    assert!(m.contains("Redis URL") && m.contains("open(url)"), "{m}");
}
