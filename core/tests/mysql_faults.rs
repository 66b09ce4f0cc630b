//! The fault suite on MySQL / MariaDB: the promises of
//! `postgres_faults.rs` (told first, release bounded, fences rising, a
//! dead holder's lease free after the ttl and not before), on a throwaway
//! MariaDB 10.11 (the testkit's [`MariaDbServer`]), through the testkit's
//! proxy where the network is the fault. Each case's body is generic and
//! shared with the Redis and Postgres suites (`tests/support/fault_cases.rs`).
//!
//! MariaDB keeps its rows across a restart and a crash (InnoDB recovery);
//! a lease live when the server went down is there when it comes back,
//! until its `expires_us` passes on the database clock.
//!
//! ```text
//! cargo test -p mistri_locks_core --test mysql_faults -- --nocapture
//! ```

mod common;
#[path = "../../tests/support/fault_kit.rs"]
mod fault_kit;
use common::*;
use fault_kit::cases::{fault_suite, FaultBackend};
use fault_kit::*;
use mistri_locks::{Locks, MySql};
use mistri_locks_testkit::{unique, MariaDbServer};

const NS: &str = "mistri:myfaults";

/// How long the harness gives a fresh server to create the tables and
/// procedures (not a case's figure).
const SCHEMA_TIMEOUT: f64 = 30.0;

impl FaultBackend for MariaDbServer {
    /// A thawed or restarted server (InnoDB recovery after a crash).
    const RECOVERY: f64 = 5.0;

    /// A fresh server with the schema made by one call with a long timeout.
    fn ready() -> Self {
        let server = MariaDbServer::start();
        Locks::new(MySql::with_timeout(&server.url(), NS, secs(SCHEMA_TIMEOUT)).expect("adapter"))
            .held("warm-up")
            .expect("the schema on a fresh server");
        server
    }

    /// Warmed: the first call pays for the connection and its checks.
    fn locks(url: &str) -> Locks {
        let locks = Locks::new(MySql::with_timeout(url, NS, secs(IO_TIMEOUT)).expect("adapter"));
        let key = unique("warm-up");
        for _ in 0..3 {
            match locks.acquire(&key, secs(5.0)) {
                Ok(true) => {
                    let _ = locks.release(&key);
                    break;
                }
                Ok(false) => break,
                Err(_) => continue,
            }
        }
        locks
    }
}

fault_suite! {
    MariaDbServer;
    harness_hold_through_the_proxy_renews => harness_hold_through_the_proxy();
    blackhole_1_hold => blackhole(1);
    blackhole_100_holds => blackhole(100);
    server_frozen_past_the_ttl => frozen_past_the_ttl();
    server_restarted_after_downtime => restarted_after_downtime();
    server_restarted_at_once_and_crashed => restarted_with_data_at_once();
    holder_process_killed => holder_process_killed();
}
