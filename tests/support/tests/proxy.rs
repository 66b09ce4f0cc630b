//! Self-tests of the fault-injecting proxy, byte by byte in front of a
//! throwaway redis-server: it forwards faithfully when not faulted (a value
//! larger than one read included), holds silent when blackholed and
//! delivers the held bytes after, and delays as told. (That a hold renews
//! through it, and that it leaves no thread behind, is every fault suite's
//! first case: `harness_hold_through_the_proxy`.)
//!
//! ```text
//! cargo test -p mistri_locks_testkit --test proxy
//! ```

use mistri_locks_testkit::{FaultServer, RedisServer};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

#[test]
fn proxy_forwards_holds_and_delays() {
    let server = RedisServer::start();
    let proxy = server.proxy();

    // Raw round trips, including a value larger than one read.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let big = "x".repeat(300_000);
    let set = format!(
        "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${}\r\n{big}\r\n*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n",
        big.len()
    );
    s.write_all(set.as_bytes()).unwrap();
    let want = format!("+OK\r\n${}\r\n{big}\r\n", big.len());
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while got.len() < want.len() {
        let n = s.read(&mut buf).expect("reply through the proxy");
        assert!(n > 0, "proxy closed the connection");
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, want.as_bytes(), "bytes changed in transit");

    // Blackhole: silence, bytes held, delivered after.
    proxy.blackhole(true);
    s.write_all(b"PING\r\n").unwrap();
    assert!(
        s.read(&mut buf).is_err(),
        "a blackholed proxy must stay silent (read should time out)"
    );
    proxy.blackhole(false);
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let n = s.read(&mut buf).unwrap();
    assert_eq!(
        &buf[..n],
        b"+PONG\r\n",
        "held bytes are delivered on resume"
    );

    // Delay: a round trip takes at least twice the delay.
    proxy.delay(Duration::from_millis(200));
    let start = Instant::now();
    s.write_all(b"PING\r\n").unwrap();
    let n = s.read(&mut buf).unwrap();
    let rtt = start.elapsed();
    assert_eq!(&buf[..n], b"+PONG\r\n");
    assert!(
        rtt >= Duration::from_millis(400),
        "delayed round trip took only {rtt:?}"
    );
    assert!(
        rtt < Duration::from_secs(1),
        "delayed round trip took {rtt:?}"
    );
    proxy.delay(Duration::ZERO);
    println!(
        "  proxy: 300 kB echoed intact; blackhole held and then delivered; delayed RTT {rtt:?}"
    );
}
