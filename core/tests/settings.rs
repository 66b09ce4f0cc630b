//! Settings that break the promise are refused (issue 28 §1): a Redis whose
//! `maxmemory-policy` may evict keys with a TTL (every lease has one) is
//! refused at connect and at every reconnect with a ConfigError naming the
//! policy and the fixes; `eviction=accept` in the URL accepts the risk. A
//! policy changed at run time is found by the heartbeat within the
//! settings check interval (`settings_check=SECONDS`, default 60 s), with
//! one `INFO memory` per adapter and server per interval, never one per
//! hold, and every hold is told (an `at_risk` event naming the policy).

mod common;
use common::{opts, secs};
use mistri_locks::{Error, Event, EventKind, Hold, Locks};
use mistri_locks_testkit::{command_on, RedisCluster, RedisSentinels, RedisServer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// The `at_risk` events of `locks`.
fn at_risk_events(locks: &Locks) -> mpsc::Receiver<Event> {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    locks.on_event(move |e| {
        if e.kind == EventKind::AtRisk {
            let _ = tx.lock().unwrap().send(e.clone());
        }
    });
    rx
}

/// The keys told `at_risk` by `by`, each with a reason naming `policy`.
fn told_by(rx: &mpsc::Receiver<Event>, keys: usize, by: Instant, policy: &str) -> Vec<String> {
    let mut told = Vec::new();
    while told.len() < keys {
        let left = by.saturating_duration_since(Instant::now());
        let Ok(e) = rx.recv_timeout(left) else { break };
        let reason = e.reason.unwrap_or_default();
        assert!(reason.contains(policy), "{policy:?} not in: {reason}");
        assert!(reason.contains("eviction=accept"), "no fix in: {reason}");
        told.push(e.key);
    }
    told.sort();
    told
}

/// A field of `INFO` on `port` (`section`), as a number.
fn info_number(port: u16, section: &str, prefix: &str) -> u64 {
    command_on(port, &format!("INFO {section}"))
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

const HOLDS: usize = 10;
/// The settings check interval the tests ask for.
const EVERY: f64 = 0.5;
/// The holds' heartbeat (their tick).
const TICK: f64 = 0.2;

/// How long a run-time policy change may take to reach the holds: the
/// interval, a tick for the scheduler, and the I/O thread's bound twice
/// (a beat in flight, then the check itself).
fn told_within(locks: &Locks) -> Duration {
    secs(EVERY + TICK) + 2 * locks.adapter().io_timeout()
}

fn holds(locks: &Locks, prefix: &str) -> Vec<Hold> {
    (0..HOLDS)
        .map(|i| {
            let key = format!("{prefix}-{i}");
            locks.hold(&key, opts(30.0, TICK)).unwrap().expect("free")
        })
        .collect()
}

#[test]
fn redis_an_evicting_policy_set_at_run_time_is_told_to_every_hold_by_one_check() {
    let server = RedisServer::start();
    let port = server.port();
    let checked = Locks::redis(
        &format!("{}?settings_check={EVERY}", server.url()),
        "mistri:runtime",
    )
    .unwrap();
    let accepting = Locks::redis(
        &format!("{}?settings_check={EVERY}&eviction=accept", server.url()),
        "mistri:runtime",
    )
    .unwrap();
    let risk = at_risk_events(&checked);
    let accepted = at_risk_events(&accepting);
    let started = Instant::now();
    command_on(port, "CONFIG RESETSTAT");
    let connections = info_number(port, "stats", "total_connections_received:");
    let held = holds(&checked, "job");
    let _accepted_holds = holds(&accepting, "other");
    // Several intervals with a safe policy: no hold is told, and the
    // checks cost one INFO memory per interval for the whole engine
    // (HOLDS holds), plus one per connection opened (the connect check).
    std::thread::sleep(secs(4.0 * EVERY));
    let infos = info_number(port, "commandstats", "cmdstat_info:calls=");
    let opened = info_number(port, "stats", "total_connections_received:") - connections;
    let intervals = (started.elapsed().as_secs_f64() / EVERY).floor() as u64;
    println!(
        "{HOLDS} holds, settings_check={EVERY}: {infos} INFO calls in {intervals} intervals, \
         {opened} connections opened"
    );
    assert!(
        infos <= intervals + 1 + opened,
        "{infos} INFO calls in {intervals} intervals with {opened} connections opened \
         ({HOLDS} holds: one check per interval, not per hold)"
    );
    assert!(risk.try_recv().is_err(), "told with a safe policy");
    // The policy changed at run time, on the pooled connections' server.
    command_on(port, "CONFIG SET maxmemory 100mb");
    command_on(port, "CONFIG SET maxmemory-policy allkeys-lru");
    let by = Instant::now() + told_within(&checked);
    let told = told_by(&risk, HOLDS, by, "allkeys-lru");
    let mut keys: Vec<String> = (0..HOLDS).map(|i| format!("job-{i}")).collect();
    keys.sort();
    assert_eq!(told, keys, "every hold is told once");
    // eviction=accept: never checked, never told (its checks would have
    // come within an interval of the other engine's).
    assert!(
        accepted.recv_timeout(secs(2.0 * EVERY + TICK)).is_err(),
        "eviction=accept was told"
    );
    // Told once per risk, not once per check; a hold made while it stands
    // (on a pooled connection) is told at once.
    std::thread::sleep(secs(2.0 * EVERY));
    assert!(risk.try_recv().is_err(), "told again for the same risk");
    if let Ok(Some(late)) = checked.hold("late", opts(30.0, TICK)) {
        let e = risk.recv_timeout(secs(5.0)).expect("the new hold is told");
        assert_eq!(e.key, "late");
        late.release().unwrap();
    }
    command_on(port, "CONFIG SET maxmemory 0");
    for hold in held {
        assert!(!hold.is_lost(), "{:?}", hold.signal().reason());
        hold.release().unwrap();
    }
}

#[test]
fn cluster_an_evicting_policy_on_any_master_is_told() {
    let cluster = RedisCluster::start(3, 1);
    let locks = Locks::redis(
        &format!("{}?settings_check={EVERY}", cluster.url()),
        "mistri:runtime",
    )
    .unwrap();
    let risk = at_risk_events(&locks);
    let hold = locks.hold("job", opts(30.0, TICK)).unwrap().expect("free");
    // A master that does not own the hold's key: only a check of every
    // master finds it.
    let owner = cluster.owner_of(mistri_locks::internals::slot_of(
        "mistri:runtime:lease:{job}",
    ));
    let other = cluster
        .master_ports()
        .into_iter()
        .find(|p| Some(*p) != owner)
        .expect("another master");
    cluster.command(other, "CONFIG SET maxmemory 100mb");
    cluster.command(other, "CONFIG SET maxmemory-policy volatile-ttl");
    let by = Instant::now() + told_within(&locks);
    let told = told_by(&risk, 1, by, "volatile-ttl");
    assert_eq!(told, ["job"], "the hold was not told");
    assert!(!hold.is_lost());
    hold.release().unwrap();
}

#[test]
fn sentinel_an_evicting_policy_on_the_master_named_after_a_failover_is_told() {
    let set = RedisSentinels::start();
    let locks = Locks::redis(
        &format!("{}?settings_check={EVERY}", set.url()),
        "mistri:runtime",
    )
    .unwrap();
    let risk = at_risk_events(&locks);
    let hold = locks.hold("job", opts(30.0, TICK)).unwrap().expect("free");
    let new_master = set.failover();
    let (old_master, _) = set.data_ports();
    assert_ne!(new_master, old_master);
    set.command(new_master, "CONFIG SET maxmemory 100mb");
    set.command(new_master, "CONFIG SET maxmemory-policy volatile-lru");
    // Renewals may fail across the switch (at_risk naming the error): the
    // one naming the policy is the settings check's, on the new master.
    let by = Instant::now() + told_within(&locks);
    let mut told = None;
    while told.is_none() {
        let left = by.saturating_duration_since(Instant::now());
        let Ok(e) = risk.recv_timeout(left) else {
            break;
        };
        told = e
            .reason
            .filter(|r| r.contains("maxmemory-policy volatile-lru"));
    }
    let told = told.expect("the hold was not told of the new master's policy");
    assert!(told.contains(&format!(":{new_master} (")), "{told}");
    set.command(new_master, "CONFIG SET maxmemory 0");
    let _ = hold.release();
}

// ------------------------------------------- fail closed (issue 39, finding 5)

/// The words every refusal of a check that could not be made carries.
fn names_the_check(msg: &str, words: &[&str]) {
    for part in words.iter().chain(&["eviction=accept"]) {
        assert!(msg.contains(part), "{part:?} not in: {msg}");
    }
}

/// A ConfigError at the first operation, naming the check.
fn refused_naming(url: &str, words: &[&str]) {
    let locks = Locks::redis(url, "mistri:settings").unwrap();
    match locks.acquire("job", TTL) {
        Err(Error::Config(msg)) => names_the_check(&msg, words),
        other => panic!("wanted a ConfigError naming the check, got {other:?}"),
    }
    // eviction=accept: the check is not made, and the server is used.
    let sep = if url.contains('?') { '&' } else { '?' };
    let accepting = Locks::redis(&format!("{url}{sep}eviction=accept"), "mistri:settings").unwrap();
    assert!(accepting.acquire("job", TTL).unwrap());
    assert!(accepting.release("job").unwrap());
}

const NEEDS_INFO: &str = "the memory-policy check needs INFO (grant +info, or eviction=accept)";

#[test]
fn redis_a_user_without_info_is_refused_naming_the_check() {
    let server = RedisServer::start();
    let port = server.port();
    assert!(command_on(port, "ACL SETUSER noinfo on >secret ~* &* +@all -info").contains("OK"));
    let url = format!("redis://noinfo:secret@127.0.0.1:{port}/0");
    refused_naming(&url, &[NEEDS_INFO]);
}

/// A redis-server of the test's own, started with `args` (the testkit's
/// take no `rename-command`); killed on drop.
struct OwnServer {
    child: std::process::Child,
    dir: std::path::PathBuf,
    port: u16,
}

impl OwnServer {
    fn start(args: &[&str]) -> OwnServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(mistri_locks_testkit::unique("own-redis"));
        std::fs::create_dir_all(&dir).unwrap();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .args(args)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server");
        let server = OwnServer { child, dir, port };
        let up = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(up.elapsed() < secs(10.0), "redis-server did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn redis_a_renamed_info_is_refused_naming_the_check() {
    let server = OwnServer::start(&["--rename-command", "INFO", ""]);
    let url = format!("redis://127.0.0.1:{}/0", server.port);
    refused_naming(&url, &[NEEDS_INFO]);
}

/// A loopback proxy in front of a Redis port that, while `hide` is on,
/// rewrites `maxmemory_policy:` in the server's replies to a field of the
/// same length nobody knows (the RESP lengths stay right): an `INFO
/// memory` without the policy, as from a proxy or a Redis-compatible
/// server. Threads stop within 50 ms of the proxy's drop.
struct HidingProxy {
    port: u16,
    hide: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

const FIELD: &[u8] = b"maxmemory_policy:";
const HIDDEN: &[u8] = b"maxmemory_polxcy:";

impl HidingProxy {
    fn start(upstream: u16) -> HidingProxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let hide = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s) = (hide.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let server = std::net::TcpStream::connect(("127.0.0.1", upstream)).unwrap();
                        pump(
                            client.try_clone().unwrap(),
                            server.try_clone().unwrap(),
                            None,
                            &s,
                        );
                        pump(server, client, Some(h.clone()), &s);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        HidingProxy { port, hide, stop }
    }
}

impl Drop for HidingProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either closes or `stop`; with `hide`, the
/// policy field is renamed while it is on (a field split across reads is
/// held back until the next read, or 5 ms).
fn pump(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    hide: Option<Arc<AtomicBool>>,
    stop: &Arc<AtomicBool>,
) {
    use std::io::{Read, Write};
    let stop = stop.clone();
    std::thread::spawn(move || {
        from.set_read_timeout(Some(Duration::from_millis(5)))
            .unwrap();
        let mut pending: Vec<u8> = Vec::new();
        let mut buf = [0u8; 16384];
        while !stop.load(Ordering::SeqCst) {
            let n = match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    0
                }
                Err(_) => break,
            };
            pending.extend_from_slice(&buf[..n]);
            let hiding = hide.as_ref().is_some_and(|h| h.load(Ordering::SeqCst));
            if hiding {
                let mut i = 0;
                while i + FIELD.len() <= pending.len() {
                    if &pending[i..i + FIELD.len()] == FIELD {
                        pending[i..i + FIELD.len()].copy_from_slice(HIDDEN);
                    }
                    i += 1;
                }
            }
            // Hold back a tail that may be the start of the field, while
            // more is coming.
            let keep = if hiding && n > 0 {
                (1..FIELD.len())
                    .rev()
                    .find(|k| pending.len() >= *k && pending.ends_with(&FIELD[..*k]))
                    .unwrap_or(0)
            } else {
                0
            };
            let send = pending.len() - keep;
            if send > 0 && to.write_all(&pending[..send]).is_err() {
                break;
            }
            pending.drain(..send);
        }
        let _ = to.shutdown(std::net::Shutdown::Both);
    });
}

#[test]
fn redis_an_info_without_the_policy_is_refused_naming_the_check() {
    let server = RedisServer::start();
    // What it hides: a policy that evicts leases.
    command_on(server.port(), "CONFIG SET maxmemory 100mb");
    command_on(server.port(), "CONFIG SET maxmemory-policy volatile-lru");
    let proxy = HidingProxy::start(server.port());
    proxy.hide.store(true, Ordering::SeqCst);
    let url = format!("redis://127.0.0.1:{}/0", proxy.port);
    refused_naming(
        &url,
        &["the memory-policy check could not read", "maxmemory_policy"],
    );
}

/// The `settings_checks_failed_total` sample of `locks`'s metrics text.
fn failed_checks_metric(locks: &Locks) -> u64 {
    let text = mistri_locks::operator::stats_prometheus(&locks.stats());
    text.lines()
        .find_map(|l| l.strip_prefix("mistri_locks_settings_checks_failed_total "))
        .and_then(|n| n.trim().parse().ok())
        .expect("the counter in the metrics text")
}

/// Holds on `url` (checked every `EVERY`); `fail` makes the next checks
/// fail: every hold is told `at_risk` once with a reason carrying
/// `words`, the failures are counted in `stats()` and the metrics, and no
/// hold is lost or told again while it lasts.
fn a_failed_run_time_check_is_told_and_counted(url: &str, fail: impl FnOnce(), words: &[&str]) {
    let locks = Locks::redis(&format!("{url}?settings_check={EVERY}"), "mistri:failing").unwrap();
    let risk = at_risk_events(&locks);
    let held = holds(&locks, "job");
    std::thread::sleep(secs(2.0 * EVERY));
    assert!(risk.try_recv().is_err(), "told while the check works");
    assert_eq!(locks.stats().settings_checks_failed, 0);
    assert_eq!(failed_checks_metric(&locks), 0);
    fail();
    let by = Instant::now() + told_within(&locks);
    let mut told = Vec::new();
    while told.len() < HOLDS {
        let left = by.saturating_duration_since(Instant::now());
        let Ok(e) = risk.recv_timeout(left) else {
            break;
        };
        let reason = e.reason.unwrap_or_default();
        names_the_check(&reason, words);
        told.push(e.key);
    }
    told.sort();
    let mut keys: Vec<String> = (0..HOLDS).map(|i| format!("job-{i}")).collect();
    keys.sort();
    assert_eq!(told, keys, "every hold is told once");
    assert!(locks.stats().settings_checks_failed >= 1);
    assert!(failed_checks_metric(&locks) >= 1);
    // Told once, not once per failed check.
    std::thread::sleep(secs(3.0 * EVERY));
    if let Ok(e) = risk.try_recv() {
        panic!("told again for the same failure: {e:?}");
    }
    assert!(
        locks.stats().settings_checks_failed >= 2,
        "each failure counted"
    );
    for hold in held {
        assert!(!hold.is_lost(), "{:?}", hold.signal().reason());
        hold.release().unwrap();
    }
}

#[test]
fn redis_info_refused_at_run_time_is_told_and_counted() {
    let server = RedisServer::start();
    let port = server.port();
    assert!(command_on(port, "ACL SETUSER holder on >secret ~* &* +@all").contains("OK"));
    let url = format!("redis://holder:secret@127.0.0.1:{port}/0");
    a_failed_run_time_check_is_told_and_counted(
        &url,
        || assert!(command_on(port, "ACL SETUSER holder -info").contains("OK")),
        &[NEEDS_INFO],
    );
}

#[test]
fn redis_a_policy_gone_from_info_at_run_time_is_told_and_counted() {
    let server = RedisServer::start();
    let proxy = HidingProxy::start(server.port());
    let url = format!("redis://127.0.0.1:{}/0", proxy.port);
    let hide = proxy.hide.clone();
    a_failed_run_time_check_is_told_and_counted(
        &url,
        move || hide.store(true, Ordering::SeqCst),
        &["the memory-policy check could not read"],
    );
}
