//! Postgres rings every waiter (issue 28 §6): `release`, `break_lease` and
//! `leave_queue` take the key's `fences` row lock before they read the
//! queue, as `acquire` does. Each test drives the interleaving that lost
//! the wake-up under READ COMMITTED:
//!
//! 1. session W: `BEGIN; SELECT acquire(… 'lineW' …)` is refused (0) and
//!    queues lineW, uncommitted;
//! 2. another session frees the key (release, break, or the head line
//!    leaving), which must now wait for W's lock;
//! 3. W commits;
//! 4. a `LISTEN` on lineW's channel hears the announcement.

use mistri_locks::{Adapter, Identity, Postgres};
use mistri_locks_testkit::{unique, PgClient, PgServer};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

/// The adapter's I/O timeout: the bound of every wait here.
const IO: Duration = Duration::from_secs(5);

/// One server for the three tests (namespaces apart), started on a thread
/// that lives as long as the process (the server dies with the thread that
/// started it).
fn shared() -> &'static PgServer {
    static CELL: OnceLock<PgServer> = OnceLock::new();
    CELL.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(PgServer::start());
            loop {
                std::thread::park();
            }
        });
        rx.recv().expect("server started")
    })
}

fn who() -> Identity {
    Identity {
        label: "tester:1 rust".into(),
        heartbeat: Duration::from_millis(250),
        stop_key: None,
    }
}

/// Runs `free` (which frees `key` for the queue) on its own thread while
/// session W holds an uncommitted refused try of lineW, then commits W,
/// and returns what a listener on lineW's channel heard.
fn rung_after(
    server: &PgServer,
    ns: &str,
    key: &str,
    free: impl FnOnce() + Send + 'static,
) -> Vec<String> {
    let mut listener = PgClient::connect(server.port()).unwrap();
    let channel = listener
        .query(
            "SELECT mistri_locks.channel('n', $1, $2, 'lineW')",
            &[ns, key],
        )
        .unwrap()[0][0]
        .clone()
        .unwrap();
    listener.simple(&format!("LISTEN \"{channel}\"")).unwrap();

    let mut w = PgClient::connect(server.port()).unwrap();
    w.simple("BEGIN").unwrap();
    let fence = w
        .query(
            "SELECT mistri_locks.acquire($1, $2, 'tokW', 30000, 'w', 1000, 1, 'lineW', 6000)",
            &[ns, key],
        )
        .unwrap()[0][0]
        .clone();
    assert_eq!(fence.as_deref(), Some("0"), "W's try is refused");

    let (done, freed) = mpsc::channel();
    let freeing = std::thread::spawn(move || {
        free();
        let _ = done.send(());
    });
    // The freeing call either waits for W's lock (seen in
    // pg_stat_activity) or returns (the lost wake-up): whichever first.
    let mut watcher = PgClient::connect(server.port()).unwrap();
    let start = Instant::now();
    loop {
        if freed.try_recv().is_ok() {
            break;
        }
        let waiting = watcher
            .value(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND query LIKE '%mistri_locks%'",
            )
            .unwrap();
        if waiting.as_deref() != Some("0") {
            break;
        }
        assert!(
            start.elapsed() < IO,
            "the freeing call neither waited nor returned"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    w.simple("COMMIT").unwrap();
    freeing.join().unwrap();
    // The announcement was sent at the freeing call's commit, which has
    // happened: it is on the wire.
    listener
        .notifications(IO)
        .unwrap()
        .into_iter()
        .filter(|n| n.channel == channel)
        .map(|n| n.payload)
        .collect()
}

#[test]
fn a_release_rings_the_line_whose_refused_try_commits_after_it() {
    let server = shared();
    let ns = unique("wakeup");
    let pg = Postgres::open(&server.url(), &ns).unwrap();
    let lease = pg.acquire_as("k", IO * 6, &who()).unwrap().unwrap();
    let fence = lease.fence();
    let heard = rung_after(server, &ns, "k", move || {
        assert!(pg.release(&lease).unwrap());
    });
    assert_eq!(heard, vec![fence.to_string()], "lineW is rung");
}

#[test]
fn a_break_rings_the_line_whose_refused_try_commits_after_it() {
    let server = shared();
    let ns = unique("wakeup");
    let pg = Postgres::open(&server.url(), &ns).unwrap();
    pg.acquire_as("k", IO * 6, &who()).unwrap().unwrap();
    let heard = rung_after(server, &ns, "k", move || {
        assert!(pg.break_lease("k").unwrap());
    });
    assert_eq!(heard, vec!["0".to_owned()], "lineW is rung");
}

#[test]
fn a_leaving_head_rings_the_line_whose_refused_try_commits_after_it() {
    let server = shared();
    let ns = unique("wakeup");
    let pg = Postgres::open(&server.url(), &ns).unwrap();
    // lineA queues behind a holder; the holder leaves: the key is free,
    // but lineA heads the queue, so W's try is refused.
    let lease = pg.acquire_as("k", IO * 6, &who()).unwrap().unwrap();
    let refused = pg.acquire_queued("k", IO * 6, &who(), 1, "lineA").unwrap();
    assert!(refused.is_none());
    assert!(pg.release(&lease).unwrap());
    let heard = rung_after(server, &ns, "k", move || {
        pg.leave_queue("k", "lineA").unwrap();
    });
    assert_eq!(heard, vec!["0".to_owned()], "lineW is rung");
}
