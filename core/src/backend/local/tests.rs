use super::bells::{bucket_of, fnv1a, line_bucket_of, Bell};
use super::store::now_ns;
use super::*;
use crate::contract::adapter::Adapter;
use rusqlite::{params, Connection};
use std::path::PathBuf;
use std::time::Duration;

fn temp_db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mistri-local-unit-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir.join("locks.db")
}

#[test]
fn the_bell_hash_is_fnv1a_64() {
    // The published FNV-1a test vectors: the hash is wire protocol.
    assert_eq!(fnv1a(&[b""]), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a(&[b"foobar"]), 0x8594_4171_f739_67e8);
    assert_eq!(fnv1a(&[b"foo", b"bar"]), fnv1a(&[b"foobar"]));
    assert_eq!(Bell::Raised(bucket_of("stop")).file_name(), "raised-cc5");
    assert_eq!(
        line_bucket_of("k", "L"),
        (fnv1a(&[b"k\0L"]) % BELL_BUCKETS) as u16
    );
    assert_eq!(Bell::Next(0xa).file_name(), "next-00a");
}

#[test]
fn ringing_never_creates_a_bell() {
    let path = temp_db("ring");
    let local = Local::open(Some(&path)).unwrap();
    local.set_flag("f", Duration::from_secs(5)).unwrap();
    assert!(!local.bells_dir().exists(), "a ringer made the folder");
    std::fs::create_dir(local.bells_dir()).unwrap();
    local.set_flag("f", Duration::from_secs(5)).unwrap();
    assert_eq!(std::fs::read_dir(local.bells_dir()).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn boottime_moves_forward() {
    let a = now_ns();
    std::thread::sleep(Duration::from_millis(2));
    assert!(now_ns() > a);
    assert!(a > 0);
}

#[test]
fn files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let path = temp_db("private");
    let _local = Local::open(Some(&path)).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let dir_mode = std::fs::metadata(path.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700, "{dir_mode:o}");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn rows_from_another_boot_are_expired() {
    let path = temp_db("boot");
    let local = Local::open(Some(&path)).unwrap();
    let con = Connection::open(&path).unwrap();
    con.execute(
        "INSERT INTO leases (key, token, expires_ns, boot) VALUES ('k', 't', ?1, 'an-old-boot')",
        params![i64::MAX],
    )
    .unwrap();
    con.execute(
        "INSERT INTO flags (key, expires_ns, boot) VALUES ('f', ?1, 'an-old-boot')",
        params![i64::MAX],
    )
    .unwrap();
    assert!(!local.held("k").unwrap());
    assert!(!local.flag("f").unwrap());
    assert!(local
        .acquire("k", Duration::from_secs(5))
        .unwrap()
        .is_some());
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn expired_rows_are_pruned() {
    let path = temp_db("prune");
    let local = Local::open(Some(&path)).unwrap();
    for i in 0..(PRUNE_EVERY * 2) {
        local
            .acquire(&format!("k{i}"), Duration::from_nanos(1))
            .unwrap();
    }
    let con = Connection::open(&path).unwrap();
    let rows: i64 = con
        .query_row("SELECT COUNT(*) FROM leases", [], |r| r.get(0))
        .unwrap();
    assert!(rows < i64::from(PRUNE_EVERY) + 2, "{rows} rows left");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}
