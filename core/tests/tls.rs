//! TLS from the URL (`rediss://`), against a redis-server serving TLS only
//! with a certificate from a throwaway CA. In its own test binary because it
//! sets SSL_CERT_FILE (process-wide) so the client trusts that CA.

use mistri_locks::{Error, HoldOptions, Locks};
use mistri_locks_testkit::{RedisConfig, RedisServer};
use std::time::Duration;

#[test]
fn tls_from_the_url() {
    let server = RedisServer::start_with(RedisConfig {
        tls: true,
        ..RedisConfig::default()
    });
    let url = server.url();
    assert!(url.starts_with("rediss://"));

    // Not trusting the server's CA yet: a clear configuration error.
    let untrusted = Locks::redis(&url, "mistri:tls").unwrap();
    let err = untrusted.held("k").unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
    assert!(err.to_string().contains("certificate"), "{err}");

    // This is the only test of this binary: no other thread reads the
    // environment while it changes.
    std::env::set_var("SSL_CERT_FILE", server.ca_file());

    let locks = Locks::redis(&url, "mistri:tls").unwrap();
    assert!(locks.acquire("k", Duration::from_secs(5)).unwrap());
    assert!(locks.held("k").unwrap());
    let opts = HoldOptions {
        ttl: Duration::from_millis(300),
        heartbeat: Duration::from_millis(50),
        ..HoldOptions::default()
    };
    let hold = locks.hold("h", opts).unwrap().expect("free");
    std::thread::sleep(Duration::from_millis(500));
    assert!(!hold.is_lost());
    hold.release().unwrap();
    assert!(locks.release("k").unwrap());

    // Plain text to a TLS-only port is a connection error, not a hang.
    let plain = Locks::redis(&url.replacen("rediss://", "redis://", 1), "mistri:tls").unwrap();
    let err = plain.held("k").unwrap_err();
    assert!(matches!(err, Error::Connection(_)), "{err}");
}
