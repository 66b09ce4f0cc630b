//! Settings that break the promise are refused (issue 28 §1): a Redis whose
//! `maxmemory-policy` may evict keys with a TTL (every lease has one) is
//! refused at connect and at every reconnect with a ConfigError naming the
//! policy and the fixes; `eviction=accept` in the URL accepts the risk.

use mistri_locks::{Error, Locks};
use mistri_locks_testkit::{command_on, RedisServer};
use std::time::Duration;

const TTL: Duration = Duration::from_secs(30);

fn config_error_naming(r: mistri_locks::Result<bool>, policy: &str) {
    match r {
        Err(Error::Config(msg)) => {
            for part in [
                policy,
                "noeviction",
                "a Redis of their own",
                "eviction=accept",
            ] {
                assert!(msg.contains(part), "{part:?} not in: {msg}");
            }
        }
        other => panic!("wanted a ConfigError naming {policy}, got {other:?}"),
    }
}

#[test]
fn redis_an_evicting_memory_policy_is_refused_at_every_connect() {
    let server = RedisServer::start();
    let port = server.port();
    let set = |policy: &str| {
        command_on(port, "CONFIG SET maxmemory 100mb");
        command_on(port, &format!("CONFIG SET maxmemory-policy {policy}"));
    };
    for policy in ["volatile-ttl", "allkeys-lru", "volatile-lru"] {
        set(policy);
        let locks = Locks::redis(&server.url(), "mistri:settings").unwrap();
        config_error_naming(locks.acquire("job", TTL), policy);
        // Accepting the risk, by URL.
        let url = format!("{}?eviction=accept", server.url());
        let accepting = Locks::redis(&url, "mistri:settings").unwrap();
        assert!(accepting.acquire("job", TTL).unwrap());
        assert!(accepting.release("job").unwrap());
    }
    // noeviction, or no maxmemory: fine.
    set("noeviction");
    let locks = Locks::redis(&server.url(), "mistri:settings").unwrap();
    assert!(locks.acquire("job", TTL).unwrap());
    command_on(port, "CONFIG SET maxmemory-policy allkeys-lru");
    command_on(port, "CONFIG SET maxmemory 0");
    assert!(locks.release("job").unwrap());
    // A reconnect reads the policy again: changed to an evicting one, the
    // connections dropped, the next operation is refused.
    command_on(port, "CONFIG SET maxmemory 100mb");
    command_on(port, "CLIENT KILL TYPE normal SKIPME yes");
    let mut refused = None;
    for _ in 0..3 {
        // The first try may meet a pooled connection the kill just closed.
        match locks.acquire("job", TTL) {
            Err(Error::Connection(_)) => continue,
            other => {
                refused = Some(other);
                break;
            }
        }
    }
    config_error_naming(refused.expect("an answer"), "allkeys-lru");
    assert!(matches!(
        Locks::redis(&format!("{}?eviction=maybe", server.url()), "ns"),
        Err(Error::InvalidArgument(_))
    ));
}
