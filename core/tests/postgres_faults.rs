//! The fault suite on Postgres: what a hold promises whatever the network
//! or the database does, on a real PostgreSQL server on loopback (the
//! testkit's [`PgServer`]), through the testkit's [`Proxy`] where the
//! network is the fault, and through a [`PgBouncer`] in transaction pooling
//! mode. The Redis twin is `network_faults.rs`; the promises are the same:
//!
//! 1. **Told first.** A hold's signal trips, with a reason starting
//!    `lease lost:`, strictly before anyone else could acquire its lease.
//!    An independent client (its own `Locks`, straight to the server, never
//!    through the proxy) polls `acquire` on the holder's keys every few ms;
//!    the instant taken just before the acquire that succeeded must come
//!    after the instant the holder's `on_abort` callback ran.
//! 2. **Release is bounded** by the adapter's I/O timeout + 1 s, whatever
//!    the network does (an `Error::Connection` is an allowed answer).
//! 3. **Fences keep rising**, across a server restart and a crash too.
//! 4. **A dead holder's lease is free after the ttl, not before.**
//!
//! Mutual exclusion under a random schedule of these faults is the soak's
//! (`core/tests/soak.rs`, the Postgres backend: the same faults, judged by
//! the history checker), not this file's.
//!
//! Postgres keeps its rows across a restart (unlike the Redis test
//! server, which starts empty): a lease that was live when the server went
//! down is still there when it comes back, until its `expires_at` passes
//! on the database clock.
//!
//! This file lists the cases and says how a client reaches a throwaway
//! PostgreSQL (a server warmed with its schema, adapters warmed); each
//! case's body is generic and shared with the Redis suite
//! (`tests/support/fault_cases.rs`), and so are the judges, the witness and
//! the figures (`tests/support/fault_kit.rs`). Its own case is the one only
//! Postgres has: PgBouncer. Each case prints its figures (`--nocapture`)
//! and checks every promise before failing. Cases run one at a time
//! (`fault_suite!` takes the kit's `one_at_a_time` guard for each; the
//! PgBouncer case takes it itself), also under a plain `cargo test`:
//!
//! ```text
//! cargo test -p mistri_locks_core --test postgres_faults -- --nocapture
//! ```
//!
//! The test binary re-executes itself for the multi-process cases: `child`
//! does nothing unless `MISTRI_FAULT_ROLE` is set.

mod common;
#[path = "../../tests/support/fault_kit.rs"]
mod fault_kit;
use common::*;
use fault_kit::cases::{fault_suite, FaultBackend};
use fault_kit::*;
use mistri_locks::{HoldOptions, Locks, Postgres, ReleaseOutcome};
use mistri_locks_testkit::{unique, PgBouncer, PgServer};
use std::time::Instant;

const NS: &str = "mistri:pgfaults";

/// How long the harness gives a fresh server to create the schema (DDL and
/// the functions' first compile; seconds under load, not a case's figure).
const SCHEMA_TIMEOUT: f64 = 30.0;

impl FaultBackend for PgServer {
    /// A thawed or restarted postmaster forks a backend for each new
    /// connection, and a fresh backend compiles the schema's functions.
    const RECOVERY: f64 = 5.0;

    /// A fresh server with the schema already made, by one call with a
    /// long timeout: on a new server the first call runs the DDL, which
    /// under load takes longer than a case's 1 s I/O timeout.
    fn ready() -> Self {
        let server = PgServer::start();
        Locks::new(
            Postgres::with_timeout(&server.url(), NS, secs(SCHEMA_TIMEOUT))
                .expect("postgres adapter"),
        )
        .held("warm-up")
        .expect("the schema on a fresh server");
        server
    }

    /// Warmed: a fresh adapter's first call pays for a new server process
    /// and the first compile of the schema's functions in it, which a case
    /// must not spend from its ttl or its 1 s I/O timeout (as the contract
    /// fixture's `warmed`). Tried up to three times; a case then meets any
    /// remaining trouble itself.
    fn locks(url: &str) -> Locks {
        let locks = Locks::new(
            Postgres::with_timeout(url, NS, secs(IO_TIMEOUT)).expect("postgres adapter"),
        );
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
    PgServer;
    harness_hold_through_the_proxy_renews => harness_hold_through_the_proxy();
    blackhole_1_hold => blackhole(1);
    blackhole_100_holds => blackhole(100);
    server_frozen_past_the_ttl => frozen_past_the_ttl();
    server_restarted_after_downtime => restarted_after_downtime();
    server_restarted_at_once_and_crashed => restarted_with_data_at_once();
    holder_process_killed => holder_process_killed();
}

// ---------------------------------------------------------------- Postgres only: PgBouncer

/// Through PgBouncer in transaction pooling mode, with the push listener
/// off (`listen=off`; LISTEN cannot work through a transaction pooler):
/// every operation works (each is one statement, no session state), and a
/// stop flag reaches a hold by the tick (at most a second), not by push.
#[test]
fn through_pgbouncer_in_transaction_mode() {
    let _one = one_at_a_time();
    let label = "pgbouncer";
    let server = PgServer::ready();
    // A pool of 2 server connections for many clients: statements of
    // different clients interleave on the same server sessions.
    let bouncer = PgBouncer::start_with_pool(&server, 2);
    let url = format!("{}?listen=off", bouncer.url());
    let a = PgServer::locks(&url);
    let b = PgServer::locks(&url);
    let direct = PgServer::locks(&server.url());
    let key = unique("bouncer");

    // Acquire, exclusion, fence, renew, held, info, release.
    assert!(a.acquire(&key, secs(30.0)).unwrap());
    let f1 = a.fence(&key).expect("fence");
    assert!(!b.acquire(&key, secs(30.0)).unwrap(), "exclusive");
    assert!(
        !direct.acquire(&key, secs(30.0)).unwrap(),
        "exclusive for a direct client too"
    );
    assert!(a.renew(&key, secs(30.0)).unwrap());
    assert!(!b.renew(&key, secs(30.0)).unwrap(), "only the owner renews");
    assert!(b.held(&key).unwrap());
    let info = b.info(&key).unwrap().expect("info");
    assert_eq!(info.holder.as_ref().map(|h| h.fence), Some(f1));
    let listed = b.list(&key).unwrap();
    assert!(listed.leases.iter().any(|l| l.key == key), "{listed:?}");
    assert!(!b.release(&key).unwrap(), "only the owner releases");
    assert!(a.release(&key).unwrap());
    assert!(!a.held(&key).unwrap());
    assert!(b.acquire(&key, secs(30.0)).unwrap());
    let f2 = b.fence(&key).expect("fence");
    assert!(f2 > f1, "fences rise: {f1} -> {f2}");
    assert!(a.break_lease(&key).unwrap());
    assert!(!b.held(&key).unwrap());

    // Flags.
    let flag = unique("bouncer-flag");
    assert!(!a.flag(&flag).unwrap());
    a.set_flag(&flag, secs(30.0)).unwrap();
    assert!(b.flag(&flag).unwrap());
    b.clear_flag(&flag).unwrap();
    assert!(!a.flag(&flag).unwrap());

    // Many small operations from threads: pooled sessions are shared.
    std::thread::scope(|s| {
        for t in 0..4 {
            let (a, key) = (&a, format!("{key}-t{t}"));
            s.spawn(move || {
                for _ in 0..25 {
                    assert!(a.acquire(&key, secs(30.0)).unwrap());
                    assert!(a.release(&key).unwrap());
                }
            });
        }
    });

    // A hold with a stop flag: told by the tick.
    let hold_key = unique("bouncer-hold");
    let stop_key = format!("stop-{hold_key}");
    let hold = a
        .hold(
            &hold_key,
            HoldOptions {
                stop_key: Some(stop_key.clone()),
                ..opts(TTL, HEARTBEAT)
            },
        )
        .unwrap()
        .expect("free");
    let told = watch(&hold);
    // A few renewals; the raise then lands mid-tick (not on a multiple of
    // the 0.5 s tick from the hold's start).
    std::thread::sleep(secs(3.0 * TTL / 2.0 + 0.2));
    // Nothing LISTENs: no session anywhere on the server ran LISTEN.
    let listening = server.sql(
        "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'listen%' AND pid <> pg_backend_pid()",
    );
    assert_eq!(
        listening, "0",
        "{label}: a session LISTENs through listen=off"
    );
    assert!(
        !hold.is_lost(),
        "{label}: renewals through the bouncer fail: {:?}",
        hold.signal().reason()
    );
    assert!(
        !b.acquire(&hold_key, secs(30.0)).unwrap(),
        "renewed through the bouncer"
    );
    let raised = Instant::now();
    b.set_flag(&stop_key, secs(30.0)).unwrap();
    let tick = HEARTBEAT.min(1.0);
    assert!(
        hold.signal().wait(Some(secs(tick + 2.0))),
        "{label}: stop flag not seen within the tick + 2 s"
    );
    let woke = Instant::now();
    // Callbacks run on the notifier thread, just after the waiters wake.
    wait_told(std::slice::from_ref(&told), woke + secs(2.0));
    let reason = hold.signal().reason().unwrap_or_default();
    let latency = diff(raised, woke);
    println!(
        "  {label}: stop flag -> signal {} (tick {}): {reason}; on_abort ran: {}",
        ms(latency),
        ms(tick),
        told.get().is_some()
    );
    assert!(told.get().is_some(), "{label}: on_abort never ran");
    assert!(reason.starts_with("stop flag"), "{reason}");
    assert!(latency <= tick + 1.0, "{label}: took {}", ms(latency));
    assert_eq!(hold.release().unwrap(), ReleaseOutcome::Released);
    assert!(
        b.acquire(&hold_key, secs(30.0)).unwrap(),
        "free after release"
    );
}
