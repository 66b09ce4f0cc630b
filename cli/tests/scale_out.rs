//! The CLI on a Redis Cluster and on Sentinel: `--url redis+cluster://…`
//! and `--url redis+sentinel://…` show a lease held through the library.

use mistri_locks::Locks;
use mistri_locks_testkit::{unique, RedisCluster, RedisSentinels};
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_mistri-locks");

fn status_shows_the_holder(url: &str) {
    let ns = unique("mistri:cli");
    let locks = Locks::redis(url, &ns).unwrap();
    assert!(locks.acquire("nightly", Duration::from_secs(30)).unwrap());
    let fence = locks.fence("nightly").unwrap();
    let out = Command::new(BIN)
        .args([
            "--url",
            url,
            "--namespace",
            &ns,
            "status",
            "nightly",
            "--json",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(&fence.to_string()), "{text}");
    let stop = Command::new(BIN)
        .args(["--url", url, "--namespace", &ns, "stop", "nightly"])
        .output()
        .unwrap();
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
}

#[test]
fn status_on_a_cluster() {
    status_shows_the_holder(&RedisCluster::shared().url());
}

#[test]
fn status_through_sentinels() {
    status_shows_the_holder(&RedisSentinels::shared().url());
}
