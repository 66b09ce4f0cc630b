//! The operator's surface (core/src/operator): the state JSON, the
//! Prometheus text (checked by `promtool check metrics`), the HTTP
//! interface's actions and refusals, and the lost-by-deadline counter
//! under a frozen Redis. `cargo run --release -p mistri_locks_core
//! --example operator_bench` prints the 10,000-lease figure.

mod common;
use common::*;
use mistri_locks::operator::{
    self, handle, OperatorOptions, OperatorRequest, OperatorResponse, CSRF_COOKIE,
};
use mistri_locks::{AcquireOptions, Locks, OpenOptions};
use mistri_locks_testkit::{unique, PgServer, RedisCluster, RedisSentinels, RedisServer};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

const TOKEN: &str = "0123456789abcdef-token";

fn promtool_accepts(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package, installed by scripts/setup)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool refused:\n{}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

fn get<'a>(path: &'a str, query: &'a str) -> OperatorRequest<'a> {
    OperatorRequest {
        method: "GET",
        path,
        query,
        scheme: "http",
        host: Some("127.0.0.1:9187"),
        ..OperatorRequest::default()
    }
}

fn body(r: &OperatorResponse) -> String {
    String::from_utf8(r.body.clone()).unwrap()
}

#[test]
fn state_json_shows_every_lease_escaped() {
    let locks = Locks::memory();
    let evil = "<img src=x onerror=alert(1)>";
    let _a = locks
        .hold("report:42", opts(10.0, 1.0))
        .unwrap()
        .expect("free");
    let _b = locks.hold(evil, opts(10.0, 1.0)).unwrap().expect("free");
    locks.set_flag("report:stop", secs(60.0)).unwrap();
    let doc = operator::state_json(&locks.list("").unwrap(), "", SystemTime::now());
    assert!(doc.contains(r#""key":"report:42","held":true"#), "{doc}");
    assert!(doc.contains(r#""ttl_s":10,"heartbeat_s":1"#), "{doc}");
    assert!(doc.contains(r#""flags":[{"key":"report:stop""#), "{doc}");
    // Angle brackets never appear raw, yet the key reads back the same.
    assert!(!doc.contains('<') && doc.contains(r"\u003cimg src=x onerror=alert(1)\u003e"));
    // Only under the prefix.
    let only = operator::state_json(
        &locks.list("report:").unwrap(),
        "report:",
        SystemTime::now(),
    );
    assert!(
        !only.contains("img") && only.contains("report:42"),
        "{only}"
    );
}

#[test]
fn a_holder_silent_past_twice_its_heartbeat_is_stuck() {
    let locks = Locks::memory();
    let _h = locks.hold("job", opts(30.0, 1.0)).unwrap().expect("free");
    let info = locks.info("job").unwrap().unwrap();
    let h = &info.holders[0];
    assert!(!operator::holder_is_stuck(h, h.renewed_at + secs(1.9)));
    assert!(operator::holder_is_stuck(h, h.renewed_at + secs(2.1)));
    let fleet = operator::fleet_prometheus(&locks.list("").unwrap(), h.renewed_at + secs(5.0));
    assert_eq!(value(&fleet, "mistri_locks_fleet_holders_silent"), 1.0);
    assert_eq!(value(&fleet, "mistri_locks_fleet_leases_held"), 1.0);
}

#[test]
fn metrics_pass_promtool_and_count_what_happened() {
    let locks = Locks::memory();
    let hold = locks.hold("job", opts(10.0, 0.05)).unwrap().expect("free");
    assert!(locks.hold("job", opts(10.0, 0.05)).unwrap().is_none());
    locks.set_flag("stop:x", secs(60.0)).unwrap();
    std::thread::sleep(secs(0.2)); // a few beats, for the round-trip gauges
    let text = operator::stats_prometheus(&locks.stats());
    promtool_accepts(&text);
    assert_eq!(value(&text, "mistri_locks_holds_active"), 1.0);
    assert_eq!(
        value(
            &text,
            "mistri_locks_acquisitions_total{outcome=\"acquired\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            &text,
            "mistri_locks_acquisitions_total{outcome=\"refused\"}"
        ),
        1.0
    );
    hold.release().unwrap();
    let served = handle(&locks, &OperatorOptions::default(), &get("/metrics", ""));
    assert_eq!(served.status, 200);
    let text = body(&served);
    promtool_accepts(&text);
    assert_eq!(value(&text, "mistri_locks_holds_released_total"), 1.0);
    assert_eq!(value(&text, "mistri_locks_fleet_flags_raised"), 1.0);
    assert!(!text.contains("key="), "no key label: {text}");
}

#[test]
fn lost_by_deadline_counts_exactly_the_holds_lost_under_a_frozen_server() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), &mistri_locks_testkit::unique("op")).unwrap();
    let holds: Vec<_> = (0..3)
        .map(|i| {
            locks
                .hold(&format!("job:{i}"), opts(0.6, 0.05))
                .unwrap()
                .expect("free")
        })
        .collect();
    let keep = locks.new_owner();
    let before = operator::stats_prometheus(&locks.stats());
    assert_eq!(
        value(&before, "mistri_locks_holds_lost_total{cause=\"deadline\"}"),
        0.0
    );
    server.freeze();
    // Each hold is told by its safe deadline, which is before its ttl ends
    // (the promise); two ttls bound the wait from the protocol.
    for h in &holds {
        assert!(h.signal().wait(Some(secs(1.2))), "a hold was never told");
    }
    let text = operator::stats_prometheus(&locks.stats());
    server.thaw();
    promtool_accepts(&text);
    let lost = holds.iter().filter(|h| h.is_lost()).count() as f64;
    assert_eq!(lost, 3.0);
    assert_eq!(
        value(&text, "mistri_locks_holds_lost_total{cause=\"deadline\"}"),
        lost
    );
    assert_eq!(value(&text, "mistri_locks_holds_active"), 0.0);
    drop(keep);
}

fn post<'a>(path: &'a str, body: &'a [u8]) -> OperatorRequest<'a> {
    OperatorRequest {
        method: "POST",
        path,
        scheme: "http",
        host: Some("127.0.0.1:9187"),
        body,
        ..OperatorRequest::default()
    }
}

#[test]
fn actions_are_refused_unless_enabled_authorised_same_origin_and_csrf() {
    let locks = Locks::memory();
    locks.set_flag("stop:x", secs(60.0)).unwrap();
    let clear = br#"{"key": "stop:x"}"#;
    let bearer = format!("Bearer {TOKEN}");
    let read_only = OperatorOptions::default();
    let on = OperatorOptions {
        allow_actions: true,
        token: Some(TOKEN.into()),
        ..OperatorOptions::default()
    };
    let refused = |opts: &OperatorOptions, req: &OperatorRequest<'_>, why: &str| {
        let r = handle(&locks, opts, req);
        assert_eq!(r.status, 403, "{why}: {}", body(&r));
        assert!(locks.flag("stop:x").unwrap(), "{why}: acted anyway");
    };
    // Read-only, whatever is sent; and the page has no buttons' switch on.
    let mut req = post("/api/clear", clear);
    req.authorization = Some(&bearer);
    refused(&read_only, &req, "read-only");
    let page = body(&handle(&locks, &read_only, &get("/", "")));
    assert!(page.contains(r#"<meta name="mistri-actions" content="off">"#));
    // No token; a wrong token.
    refused(&on, &post("/api/clear", clear), "no token");
    let mut req = post("/api/clear", clear);
    req.authorization = Some("Bearer wrong-token-0123456");
    refused(&on, &req, "wrong token");
    // Another origin, even with the token.
    let mut req = post("/api/clear", clear);
    req.authorization = Some(&bearer);
    req.origin = Some("http://evil.example");
    refused(&on, &req, "other origin");
    // The host's authorisation needs the page's CSRF token and an origin.
    let host = OperatorOptions {
        allow_actions: true,
        ..OperatorOptions::default()
    };
    let mut req = post("/api/clear", clear);
    req.host_authorized = Some(true);
    req.origin = Some("http://127.0.0.1:9187");
    refused(&host, &req, "no CSRF token");
    let page = handle(&locks, &host, &get("/", ""));
    let cookie = page
        .headers
        .iter()
        .find(|(k, _)| k == "Set-Cookie")
        .map(|(_, v)| v.split(';').next().unwrap().to_owned())
        .unwrap();
    let csrf = cookie
        .strip_prefix(&format!("{CSRF_COOKIE}="))
        .unwrap()
        .to_owned();
    assert!(body(&page).contains(&format!(r#"content="{csrf}""#)));
    req.cookie = Some(&cookie);
    req.csrf = Some("not-the-token");
    refused(&host, &req, "wrong CSRF token");
    req.csrf = Some(&csrf);
    req.host_authorized = Some(false);
    refused(&host, &req, "the host says no");
    req.host_authorized = Some(true);
    let r = handle(&locks, &host, &req);
    assert_eq!(
        (r.status, body(&r).contains(r#""ok":true"#)),
        (200, true),
        "{}",
        body(&r)
    );
    assert!(!locks.flag("stop:x").unwrap());
    // GET on an action is not an action.
    let r = handle(&locks, &on, &get("/api/break", ""));
    assert_eq!(r.status, 405);
}

#[test]
fn stop_clear_and_break_do_what_they_say() {
    let locks = Locks::memory();
    let other = locks.new_owner();
    let on = OperatorOptions {
        allow_actions: true,
        token: Some(TOKEN.into()),
        prefix: "job".into(),
        ..OperatorOptions::default()
    };
    let bearer = format!("Bearer {TOKEN}");
    let act = |path: &str, body: &str| {
        let mut req = post(path, body.as_bytes());
        req.authorization = Some(&bearer);
        handle(&locks, &on, &req)
    };
    let _h = other.hold("job:1", opts(30.0, 1.0)).unwrap().expect("free");
    // Bad bodies are 400, keys outside the prefix 403.
    assert_eq!(act("/api/break", "{").status, 400);
    assert_eq!(act("/api/break", r#"{"key": ""}"#).status, 400);
    assert_eq!(act("/api/break", r#"{"key": "other"}"#).status, 403);
    assert_eq!(act("/api/stop", r#"{"key": "job:none"}"#).status, 404);
    let r = act("/api/break", r#"{"key": "job:1"}"#);
    assert_eq!(r.status, 200, "{}", body(&r));
    assert!(!locks.held("job:1").unwrap());
    assert_eq!(act("/api/break", r#"{"key": "job:1"}"#).status, 404);
    // The listing the page reads, under the served prefix.
    locks.set_flag("jobs-stop", secs(60.0)).unwrap();
    let state = body(&handle(&locks, &on, &get("/api/state", "prefix=s")));
    assert!(
        state.contains(r#""prefix":"jobs""#) && state.contains("jobs-stop"),
        "{state}"
    );
    assert_eq!(act("/api/clear", r#"{"key": "jobs-stop"}"#).status, 200);
    assert!(!locks.flag("jobs-stop").unwrap());
}

#[test]
fn stop_raises_the_holders_stop_key_shown_in_the_state() {
    let locks = Locks::memory();
    let worker = locks.new_owner();
    let mut o = opts(10.0, 0.05);
    o.stop_key = Some("report:42:stop".into());
    let hold = worker.hold("report:42", o).unwrap().expect("free");
    let _plain = worker
        .hold("report:43", opts(10.0, 0.05))
        .unwrap()
        .expect("free");
    let on = OperatorOptions {
        allow_actions: true,
        token: Some(TOKEN.into()),
        ..OperatorOptions::default()
    };
    let state = body(&handle(&locks, &on, &get("/api/state", "")));
    assert!(state.contains(r#""stop_key":"report:42:stop""#), "{state}");
    let bearer = format!("Bearer {TOKEN}");
    let mut req = post("/api/stop", br#"{"key": "report:43"}"#);
    req.authorization = Some(&bearer);
    assert_eq!(
        handle(&locks, &on, &req).status,
        409,
        "no stop key to raise"
    );
    let mut req = post("/api/stop", br#"{"key": "report:42"}"#);
    req.authorization = Some(&bearer);
    let r = handle(&locks, &on, &req);
    assert_eq!(r.status, 200, "{}", body(&r));
    assert!(locks.flag("report:42:stop").unwrap());
    // Tripped within a tick (50 ms); the flag's own ttl bounds the wait.
    assert!(hold.signal().wait(Some(mistri_locks::FLAG_TTL)));
    assert_eq!(
        operator::stop_holders(&locks, "report:42").unwrap(),
        Ok("raised report:42:stop".into())
    );
}

// ------------------------------------------------- waiting lines per key

/// Two waiting lines on a held key (`waiters`: the handles they wait
/// through; distinct handles make distinct lines, and on Memory each
/// waiter counts): the listing shows 2 lines whose oldest wait grows with
/// the clock and never exceeds how long they have waited; the state JSON
/// and the fleet gauges show them; once both got their turn, none.
fn two_waiting_lines_are_listed(holder: &Locks, waiters: [&Locks; 2]) {
    let prefix = unique("waiting");
    let key = format!("{prefix}:job");
    assert!(holder.acquire(&key, secs(30.0)).unwrap());
    let started = Instant::now();
    std::thread::scope(|s| {
        for w in waiters {
            let key = key.as_str();
            s.spawn(move || {
                let wait = AcquireOptions {
                    wait: Some(secs(60.0)),
                    ..AcquireOptions::default()
                };
                assert!(w.acquire_with(key, secs(30.0), &wait).unwrap(), "a turn");
                assert!(w.release(key).unwrap());
            });
        }
        // Both queued: bounded by 20 s (each queues at its first try).
        let end = Instant::now() + secs(20.0);
        let (first, first_read) = loop {
            let listing = holder.list(&prefix).unwrap();
            let read = Instant::now();
            if let Some(w) = listing.waiting_for(&key).filter(|w| w.lines == 2) {
                break (w.oldest_wait, read);
            }
            assert!(Instant::now() < end, "never 2 lines: {listing:?}");
            std::thread::sleep(Duration::from_millis(20));
        };
        std::thread::sleep(Duration::from_millis(300));
        let asked = Instant::now();
        let listing = holder.list(&prefix).unwrap();
        let answered = Instant::now();
        let w = listing.waiting_for(&key).expect("still waiting").clone();
        assert_eq!((w.key.as_str(), w.lines), (key.as_str(), 2));
        // The backends keep milliseconds: 2 ms of rounding either way.
        let ms2 = Duration::from_millis(2);
        assert!(
            w.oldest_wait + ms2 >= first + (asked - first_read),
            "the oldest wait {:?} grew less than the clock since {first:?}",
            w.oldest_wait
        );
        assert!(
            w.oldest_wait <= answered - started + ms2,
            "the oldest wait {:?} is longer than they have waited",
            w.oldest_wait
        );
        assert_eq!(listing.leases.len(), 1, "{listing:?}");
        let doc = operator::state_json(&listing, &prefix, SystemTime::now());
        assert!(
            doc.contains(r#""limit":1,"waiting":2,"oldest_wait_s":"#),
            "{doc}"
        );
        let fleet = operator::fleet_prometheus(&listing, SystemTime::now());
        assert_eq!(value(&fleet, "mistri_locks_fleet_waiting_lines"), 2.0);
        let oldest = value(&fleet, "mistri_locks_fleet_oldest_wait_seconds");
        assert!(
            (oldest - w.oldest_wait.as_secs_f64()).abs() < 0.001,
            "{fleet}"
        );
        promtool_accepts(&fleet);
        assert!(holder.release(&key).unwrap());
    });
    // Both had their turn and left the queue: no line is listed.
    let listing = holder.list(&prefix).unwrap();
    assert!(listing.waiting.is_empty(), "{listing:?}");
    let doc = operator::state_json(&listing, &prefix, SystemTime::now());
    assert!(doc.ends_with(r#""waiting":[]}"#), "{doc}");
}

#[test]
fn waiting_lines_memory() {
    let locks = Locks::memory();
    two_waiting_lines_are_listed(&locks, [&locks, &locks]);
}

#[test]
fn waiting_lines_local() {
    let path = std::env::temp_dir()
        .join(unique("mistri-operator"))
        .join("locks.db");
    let open = || Locks::local(Some(&path)).unwrap();
    let (holder, a, b) = (open(), open(), open());
    two_waiting_lines_are_listed(&holder, [&a, &b]);
}

fn waiting_lines_at(url: &str) {
    let ns = unique("mistri:operator");
    let open = || Locks::open_with(url, &OpenOptions::new().namespace(&ns)).unwrap();
    let (holder, a, b) = (open(), open(), open());
    two_waiting_lines_are_listed(&holder, [&a, &b]);
}

#[test]
fn waiting_lines_redis() {
    let server = RedisServer::start();
    waiting_lines_at(&server.url());
}

#[test]
fn waiting_lines_redis_sentinel() {
    waiting_lines_at(&RedisSentinels::shared().url());
}

#[test]
fn waiting_lines_redis_cluster() {
    waiting_lines_at(&RedisCluster::shared().url());
}

#[test]
fn waiting_lines_postgres() {
    let server = PgServer::start();
    waiting_lines_at(&server.url());
}

// --------------------------------------------- the safe-deadline margin

/// Waits (up to 20 s) until `done` holds.
fn until(what: &str, done: impl Fn() -> bool) {
    let end = Instant::now() + secs(20.0);
    while !done() {
        assert!(Instant::now() < end, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Renewals stop while the server is frozen: the first renewal confirmed
/// after the thaw replaces a safe deadline set by a renewal sent before
/// the stop, so the margin it had left is at most the ttl less the time
/// the server stood still; the gauge's minimum shows it (and promtool
/// accepts the text).
#[test]
fn the_safe_margin_gauge_shows_how_close_renewals_came() {
    let server = RedisServer::start();
    let locks = Locks::redis(&server.url(), &unique("mistri:margin")).unwrap();
    let ttl = 6.0;
    let hold = locks.hold("job", opts(ttl, 0.05)).unwrap().expect("free");
    until("two renewals", || locks.stats().renewals_confirmed >= 2);
    let healthy = locks
        .stats()
        .safe_margin_min
        .expect("renewals were confirmed");
    assert!(
        healthy > Duration::ZERO && healthy <= secs(ttl),
        "{healthy:?}"
    );
    server.freeze();
    // Stopped for sure (SIGSTOP may land later than kill returns).
    let stat = format!("/proc/{}/stat", server.pid());
    until("the server stopped", || {
        let text = std::fs::read_to_string(&stat).unwrap();
        let state = text.rsplit(')').next().unwrap().split_whitespace().next();
        state == Some("T")
    });
    let stopped = Instant::now();
    std::thread::sleep(secs(0.5));
    let thawing = Instant::now();
    let confirmed = locks.stats().renewals_confirmed;
    server.thaw();
    until("a renewal after the thaw", || {
        locks.stats().renewals_confirmed > confirmed
    });
    assert!(
        !hold.is_lost(),
        "the hold outlived a 0.5 s freeze of a {ttl} s ttl"
    );
    let text = operator::stats_prometheus(&locks.stats());
    promtool_accepts(&text);
    let margin = value(&text, "mistri_locks_safe_margin_min_seconds");
    let stood_still = (thawing - stopped).as_secs_f64();
    assert!(
        margin > 0.0 && margin <= ttl - stood_still,
        "margin {margin} s after the server stood still {stood_still} s"
    );
    hold.release().unwrap();
}

// ------------------------------------------------------ the Host check

/// A page on another site that rebinds its name to this address sends
/// `Host: evil.example`: every route answers 421 before the backend is
/// read (nothing listed, nothing acted on), and says how to allow it.
#[test]
fn another_host_is_refused_before_the_backend_is_read() {
    let locks = Locks::memory();
    let _h = locks
        .hold("secret:job", opts(30.0, 1.0))
        .unwrap()
        .expect("free");
    locks.set_flag("secret:stop", secs(60.0)).unwrap();
    let on = OperatorOptions {
        allow_actions: true,
        token: Some(TOKEN.into()),
        ..OperatorOptions::default()
    };
    let bearer = format!("Bearer {TOKEN}");
    let evil = |mut req: OperatorRequest<'static>| {
        req.host = Some("evil.example");
        req
    };
    for (path, query) in [
        ("/api/state", ""),
        ("/metrics", ""),
        ("/", ""),
        ("/nope", ""),
    ] {
        let r = handle(&locks, &on, &evil(get(path, query)));
        let text = body(&r);
        assert_eq!(r.status, 421, "{path}: {text}");
        assert!(
            text.contains("evil.example") && text.contains("--allow-host"),
            "{text}"
        );
        assert!(!text.contains("secret"), "listed anyway: {text}");
    }
    for (path, key) in [
        ("/api/clear", br#"{"key": "secret:stop"}"#.as_slice()),
        ("/api/break", br#"{"key": "secret:job"}"#.as_slice()),
    ] {
        let mut req = evil(post(path, key));
        req.authorization = Some(&bearer);
        req.origin = Some("http://evil.example");
        assert_eq!(handle(&locks, &on, &req).status, 421, "{path}");
    }
    assert!(locks.flag("secret:stop").unwrap() && locks.held("secret:job").unwrap());
    // A missing Host, and one that is no host name, are refused too.
    let mut req = get("/api/state", "");
    req.host = None;
    assert_eq!(handle(&locks, &on, &req).status, 400);
    req.host = Some("127.0.0.1:9187/../x");
    assert_eq!(handle(&locks, &on, &req).status, 421);
    // The loopback names on any port answer by default; a named host only
    // when allowed; `X-Forwarded-Host` is not read unless trusted.
    for host in ["localhost:1234", "127.0.0.1", "[::1]:9187"] {
        let mut req = get("/api/state", "");
        req.host = Some(host);
        assert_eq!(handle(&locks, &on, &req).status, 200, "{host}");
    }
    let mut req = get("/api/state", "");
    req.host = Some("locks.example.com");
    let named = OperatorOptions {
        allowed_hosts: vec![".example.com".into()],
        ..on.clone()
    };
    assert_eq!(handle(&locks, &named, &req).status, 200);
    req.host = Some("127.0.0.1:9187");
    assert_eq!(
        handle(&locks, &named, &req).status,
        421,
        "the list replaces the default"
    );
    req.forwarded_host = Some("evil.example");
    assert_eq!(handle(&locks, &on, &req).status, 200, "untrusted: ignored");
    let trusting = OperatorOptions {
        trust_forwarded: true,
        ..on.clone()
    };
    assert_eq!(
        handle(&locks, &trusting, &req).status,
        421,
        "trusted: checked"
    );
}

/// Behind a TLS-terminating proxy the browser's `Origin` is
/// `https://locks.example.com` while the server sees `http` and its own
/// address: with `trust_forwarded` the scheme and host come from
/// `X-Forwarded-Proto` and `X-Forwarded-Host`, so the page's actions work
/// (and its cookie is `Secure`); without it they are refused.
#[test]
fn behind_a_tls_proxy_the_forwarded_scheme_and_host_make_the_origin() {
    let locks = Locks::memory();
    locks.set_flag("stop:x", secs(60.0)).unwrap();
    let proxied = OperatorOptions {
        allow_actions: true,
        allowed_hosts: vec!["locks.example.com".into()],
        trust_forwarded: true,
        ..OperatorOptions::default()
    };
    let through_proxy = |mut req: OperatorRequest<'static>| {
        req.host = Some("127.0.0.1:9187");
        req.forwarded_proto = Some("https");
        req.forwarded_host = Some("locks.example.com");
        req
    };
    let page = handle(&locks, &proxied, &through_proxy(get("/", "")));
    assert_eq!(page.status, 200, "{}", body(&page));
    let cookie = page
        .headers
        .iter()
        .find(|(k, _)| k == "Set-Cookie")
        .map(|(_, v)| v.clone())
        .unwrap();
    assert!(cookie.ends_with("; Secure"), "{cookie}");
    let pair = cookie.split(';').next().unwrap().to_owned();
    let csrf = pair
        .strip_prefix(&format!("{CSRF_COOKIE}="))
        .unwrap()
        .to_owned();
    let clear = br#"{"key": "stop:x"}"#;
    let mut req = through_proxy(post("/api/clear", clear));
    req.origin = Some("https://locks.example.com");
    req.cookie = Some(Box::leak(pair.into_boxed_str()));
    req.csrf = Some(Box::leak(csrf.into_boxed_str()));
    req.host_authorized = Some(true);
    // Not trusted: the origin is compared with http://127.0.0.1:9187.
    let untrusted = OperatorOptions {
        trust_forwarded: false,
        allowed_hosts: vec![],
        ..proxied.clone()
    };
    let r = handle(&locks, &untrusted, &req);
    assert_eq!(r.status, 403, "{}", body(&r));
    assert!(locks.flag("stop:x").unwrap());
    let r = handle(&locks, &proxied, &req);
    assert_eq!(r.status, 200, "{}", body(&r));
    assert!(!locks.flag("stop:x").unwrap());
    // Another origin is still another origin behind the proxy.
    locks.set_flag("stop:x", secs(60.0)).unwrap();
    req.origin = Some("https://evil.example");
    assert_eq!(handle(&locks, &proxied, &req).status, 403);
    assert!(locks.flag("stop:x").unwrap());
}

// ------------------------------------------- the served prefix, the token

/// `serve --prefix jobs:`: Stop on `jobs:a`, whose holder watches
/// `billing:stop`, raises nothing and answers 409 naming that stop key
/// (before: it raised `billing:stop` and tripped `billing:nightly`).
#[test]
fn a_stop_raises_no_stop_key_outside_the_served_prefix() {
    let locks = Locks::memory();
    let worker = locks.new_owner();
    let watching = |stop: &str| {
        let mut o = opts(30.0, 0.05);
        o.stop_key = Some(stop.into());
        o
    };
    let nightly = worker
        .hold("billing:nightly", watching("billing:stop"))
        .unwrap()
        .expect("free");
    let _a = worker
        .hold("jobs:a", watching("billing:stop"))
        .unwrap()
        .expect("free");
    let _b = worker
        .hold("jobs:b", watching("jobs:b:stop"))
        .unwrap()
        .expect("free");
    let on = OperatorOptions {
        allow_actions: true,
        token: Some(TOKEN.into()),
        prefix: "jobs:".into(),
        ..OperatorOptions::default()
    };
    let bearer = format!("Bearer {TOKEN}");
    let stop = |key: &str| {
        let body = format!(r#"{{"key": "{key}"}}"#);
        let mut req = post("/api/stop", body.as_bytes());
        req.authorization = Some(&bearer);
        let r = handle(&locks, &on, &req);
        (r.status, self::body(&r))
    };
    let (status, text) = stop("jobs:a");
    assert_eq!(status, 409, "{text}");
    assert!(
        text.contains("billing:stop") && text.contains("outside"),
        "{text}"
    );
    assert!(
        !locks.flag("billing:stop").unwrap(),
        "raised outside the prefix"
    );
    assert!(
        !nightly.signal().is_aborted(),
        "billing:nightly was tripped"
    );
    let (status, text) = stop("jobs:b");
    assert_eq!(status, 200, "{text}");
    assert!(locks.flag("jobs:b:stop").unwrap());
    // The shell's `stop --holder-of` serves no prefix: it may raise any.
    assert_eq!(
        operator::stop_holders(&locks, "jobs:a").unwrap(),
        Ok("raised billing:stop".into())
    );
}

/// `Authorization: bearer …` in any case of the scheme is the bearer
/// token (RFC 9110: the scheme is case-insensitive); another scheme or no
/// space after it is not.
#[test]
fn the_bearer_scheme_matches_in_any_case() {
    let locks = Locks::memory();
    let on = OperatorOptions {
        allow_actions: true,
        token: Some(TOKEN.into()),
        ..OperatorOptions::default()
    };
    for (scheme, want) in [
        ("Bearer ", 200),
        ("bearer ", 200),
        ("BEARER  ", 200),
        ("bEaReR\t", 200),
        ("Basic ", 403),
        ("Bearer", 403),
        ("Bearerx ", 403),
    ] {
        locks.set_flag("stop:x", secs(60.0)).unwrap();
        let auth = format!("{scheme}{TOKEN}");
        let mut req = post("/api/clear", br#"{"key": "stop:x"}"#);
        req.authorization = Some(&auth);
        let r = handle(&locks, &on, &req);
        assert_eq!(r.status, want, "{auth:?}: {}", body(&r));
        assert_eq!(locks.flag("stop:x").unwrap(), want != 200);
    }
}

/// A body that names `key` twice (which one a proxy or a log read is not
/// known) or any name twice is 400, and nothing is done.
#[test]
fn a_body_with_a_name_twice_is_refused() {
    let locks = Locks::memory();
    let on = OperatorOptions {
        allow_actions: true,
        token: Some(TOKEN.into()),
        ..OperatorOptions::default()
    };
    let bearer = format!("Bearer {TOKEN}");
    for b in [
        r#"{"key": "stop:a", "key": "stop:b"}"#,
        r#"{"key": "stop:a", "key": "stop:a"}"#,
        r#"{"key": "stop:a", "n": 1, "n": 2}"#,
        r#"{"key": "stop:a", "k\u0065y": "stop:b"}"#,
    ] {
        locks.set_flag("stop:a", secs(60.0)).unwrap();
        locks.set_flag("stop:b", secs(60.0)).unwrap();
        let mut req = post("/api/clear", b.as_bytes());
        req.authorization = Some(&bearer);
        let r = handle(&locks, &on, &req);
        assert_eq!(r.status, 400, "{b}: {}", body(&r));
        assert!(body(&r).contains("more than once"), "{}", body(&r));
        assert!(locks.flag("stop:a").unwrap() && locks.flag("stop:b").unwrap());
    }
}

// ----------------------------------- generated input: the readers hold

/// xorshift64*: a fixed seed, so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.below(from.len())]
    }
}

const PIECES: &[&[u8]] = &[
    b"GET ",
    b"POST ",
    b"HEAD ",
    b"/",
    b"/api/state",
    b"/api/clear",
    b"/metrics",
    b"?prefix=",
    b" HTTP/1.1",
    b" HTTP/2",
    b"\r\n",
    b"\n",
    b"\r",
    b":",
    b" ",
    b"\t",
    b"Host: ",
    b"127.0.0.1:9187",
    b"evil.example",
    b"[::1]",
    b"Content-Length: ",
    b"0",
    b"17",
    b"99999999999999999999",
    b"-1",
    b"Transfer-Encoding: chunked",
    b"Authorization: Bearer ",
    b"Origin: http://127.0.0.1:9187",
    b"X-Forwarded-Host: ",
    b"\xff\xfe",
    b"\0",
    b"%zz",
    b"{\"key\": \"stop:x\"}",
    b"\r\n\r\n",
];

fn generated_head(rng: &mut Rng) -> Vec<u8> {
    let valid = format!(
        "POST /api/clear HTTP/1.1\r\nHost: 127.0.0.1:9187\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 17\r\n\r\n{{\"key\": \"stop:x\"}}"
    )
    .into_bytes();
    let mut out = match rng.below(4) {
        // Pieces of requests, in any order.
        0 => (0..rng.below(24))
            .flat_map(|_| rng.pick(PIECES).to_vec())
            .collect(),
        // Random bytes.
        1 => (0..rng.below(200)).map(|_| rng.next() as u8).collect(),
        // A valid request, mutated.
        _ => valid,
    };
    for _ in 0..rng.below(6) {
        if out.is_empty() {
            break;
        }
        let at = rng.below(out.len());
        match rng.below(5) {
            0 => out[at] = rng.next() as u8,
            1 => {
                out.remove(at);
            }
            2 => {
                let piece = rng.pick(PIECES).to_vec();
                out.splice(at..at, piece);
            }
            3 => out.truncate(at),
            _ => {
                // A header line repeated.
                let lines: [&[u8]; 2] = [b"Content-Length: 17\r\n", b"Host: evil.example\r\n"];
                let line = *rng.pick(&lines);
                let at = out
                    .windows(2)
                    .position(|w| w == b"\r\n")
                    .map_or(0, |p| p + 2);
                out.splice(at..at, line.to_vec());
            }
        }
    }
    if rng.below(50) == 0 {
        // Past the head's limit.
        out.extend(std::iter::repeat_n(b'a', operator::wire::MAX_HEAD));
    }
    out
}

/// 4,000 generated requests through the head reader, the length check and
/// the interface, on a Memory handle: nothing panics; a head that cannot
/// be read is refused with a status, or the stream ended (the reader read
/// every byte); every head read is answered with a status.
#[test]
fn generated_requests_are_each_answered_with_a_status() {
    use operator::wire::{read_head, HeadError};
    let locks = Locks::memory();
    let on = OperatorOptions {
        allow_actions: true,
        token: Some(TOKEN.into()),
        ..OperatorOptions::default()
    };
    let mut rng = Rng(0x5eed_0039);
    let mut seen = std::collections::BTreeMap::<u16, usize>::new();
    for case in 0..4000 {
        let input = generated_head(&mut rng);
        let mut cursor = std::io::Cursor::new(&input[..]);
        let status = match read_head(&mut cursor) {
            Err(HeadError::Io(_)) => {
                assert_eq!(
                    cursor.position() as usize,
                    input.len(),
                    "case {case}: the reader stopped early: {:?}",
                    String::from_utf8_lossy(&input)
                );
                0
            }
            Err(HeadError::Refused(r)) => r.status,
            Ok(head) => match head.body_length() {
                Err(r) => r.status,
                Ok(n) => {
                    let start = cursor.position() as usize;
                    let body = &input[start.min(input.len())..(start + n).min(input.len())];
                    let r = handle(&locks, &on, &head.request("http", body));
                    let text = operator::wire::response_head(&r);
                    assert!(text.starts_with(&format!("HTTP/1.1 {} ", r.status)));
                    r.status
                }
            },
        };
        assert!(
            status == 0 || (200..600).contains(&status),
            "case {case}: {status}"
        );
        *seen.entry(status).or_default() += 1;
    }
    eprintln!("statuses over 4000 generated requests (0: the stream ended): {seen:?}");
    // The generator reaches the interesting answers.
    for want in [0, 200, 400, 421] {
        assert!(seen.contains_key(&want), "never {want}: {seen:?}");
    }
}

/// Appends `s` as a JSON string, escaping at random (`\uXXXX`, surrogate
/// pairs, short escapes) where JSON allows.
fn json_string(rng: &mut Rng, s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        let plain = !matches!(c, '"' | '\\') && (c as u32) >= 0x20;
        if plain && rng.below(3) != 0 {
            out.push(c);
            continue;
        }
        match c {
            '"' if rng.below(2) == 0 => out.push_str("\\\""),
            '\\' if rng.below(2) == 0 => out.push_str("\\\\"),
            '\n' if rng.below(2) == 0 => out.push_str("\\n"),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{:04X}", u));
                }
            }
        }
    }
    out.push('"');
    out
}

/// 4,000 generated action bodies through the JSON field reader: nothing
/// panics and each is answered 200 or 400; a well-formed body whose `key`
/// is a valid flag key lowers exactly that flag (the reader decoded it).
#[test]
fn generated_json_bodies_are_each_answered_with_a_status() {
    let locks = Locks::memory();
    let on = OperatorOptions {
        allow_actions: true,
        token: Some(TOKEN.into()),
        ..OperatorOptions::default()
    };
    let bearer = format!("Bearer {TOKEN}");
    let chars = [
        'a', 'z', ':', '-', ' ', '"', '\\', '/', '\n', '\u{1}', 'é', '😀', '<', '\u{7f}', '{', '}',
        ',',
    ];
    let mut rng = Rng(0x0b0d_1e55);
    let (mut lowered, mut refused) = (0, 0);
    for case in 0..4000 {
        let key: String = (0..1 + rng.below(12)).map(|_| *rng.pick(&chars)).collect();
        let key = format!("k{key}");
        let mut text = format!("{{\"key\": {}", json_string(&mut rng, &key));
        if rng.below(2) == 0 {
            text.push_str(&format!(
                ", \"n\": {}",
                rng.pick(&["1", "-2.5e3", "true", "null"])
            ));
        }
        text.push('}');
        let mutated = rng.below(3) == 0;
        let mut bytes = text.into_bytes();
        if mutated {
            for _ in 0..1 + rng.below(3) {
                if bytes.is_empty() {
                    break;
                }
                let at = rng.below(bytes.len());
                match rng.below(3) {
                    0 => bytes[at] = rng.next() as u8,
                    1 => {
                        bytes.remove(at);
                    }
                    _ => bytes.insert(at, *rng.pick(b"{}[]\",:\\u0")),
                }
            }
        }
        let valid_key = locks.set_flag(&key, secs(60.0)).is_ok();
        let mut req = post("/api/clear", &bytes);
        req.authorization = Some(&bearer);
        let r = handle(&locks, &on, &req);
        assert!(
            matches!(r.status, 200 | 400),
            "case {case}: {} {}",
            r.status,
            body(&r)
        );
        if !mutated && valid_key {
            assert_eq!(
                r.status,
                200,
                "case {case}: {:?}: {}",
                String::from_utf8_lossy(&bytes),
                body(&r)
            );
            assert!(
                !locks.flag(&key).unwrap(),
                "case {case}: {key:?} still raised"
            );
        }
        if r.status == 200 {
            lowered += 1;
        } else {
            refused += 1;
        }
        let _ = locks.clear_flag(&key);
    }
    eprintln!("4000 generated bodies: {lowered} answered 200, {refused} 400");
    assert!(lowered > 0 && refused > 0);
}

// ------------------------------------------ one listing among the requests

/// The `SCAN` calls the server has answered (INFO commandstats).
fn scans(client: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(client)
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_scan:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// 8 concurrent `GET /api/state` and a `GET /metrics` for the same prefix
/// on one Redis handle cause one listing (counted by the server's `SCAN`
/// calls against one plain `Locks::list`); a request after the shared
/// listing's 0.9 s have passed lists anew; an action drops the kept
/// listing, so the next refresh shows its effect at once.
#[test]
fn concurrent_refreshes_share_one_listing() {
    let server = RedisServer::start();
    let locks = Locks::open_with(
        &server.url(),
        &OpenOptions::new().namespace(unique("mistri:shared")),
    )
    .unwrap();
    let mut client = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    for i in 0..20 {
        assert!(locks.acquire(&format!("job:{i}"), secs(60.0)).unwrap());
    }
    locks.set_flag("job:stop", secs(60.0)).unwrap();
    let before = scans(&mut client);
    locks.list("").unwrap();
    let one = scans(&mut client) - before;
    assert!(one >= 1, "a listing sends SCAN");
    let on = OperatorOptions {
        allow_actions: true,
        token: Some(TOKEN.into()),
        ..OperatorOptions::default()
    };
    let before = scans(&mut client);
    let started = Instant::now();
    let gate = std::sync::Barrier::new(9);
    let bodies: Vec<String> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..9)
            .map(|i| {
                let (locks, on, gate) = (&locks, &on, &gate);
                s.spawn(move || {
                    gate.wait();
                    let path = if i == 8 { "/metrics" } else { "/api/state" };
                    let r = handle(locks, on, &get(path, ""));
                    assert_eq!(r.status, 200);
                    body(&r)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let shared = scans(&mut client) - before;
    // All nine asked within the time a listing is shared (0.9 s from the
    // start of its read): one read.
    assert!(started.elapsed() < secs(0.9), "the machine stalled");
    assert_eq!(
        shared, one,
        "9 requests sent {shared} SCANs; one listing sends {one}"
    );
    for b in &bodies[..8] {
        assert!(
            b.contains("\"job:19\"") && b.contains("\"job:stop\""),
            "{b}"
        );
    }
    assert_eq!(value(&bodies[8], "mistri_locks_fleet_leases_held"), 20.0);
    // An action drops it: the flag is gone from the very next refresh.
    let bearer = format!("Bearer {TOKEN}");
    let mut req = post("/api/clear", br#"{"key": "job:stop"}"#);
    req.authorization = Some(&bearer);
    assert_eq!(handle(&locks, &on, &req).status, 200);
    let state = body(&handle(&locks, &on, &get("/api/state", "")));
    assert!(!state.contains("job:stop"), "{state}");
    // Past its 0.9 s a listing is read anew.
    let before = scans(&mut client);
    std::thread::sleep(secs(1.0));
    handle(&locks, &on, &get("/api/state", ""));
    assert_eq!(scans(&mut client) - before, one);
}

/// The options are set by name and built with the rules: an unknown name
/// (with the nearest known one), a short token, and actions with neither a
/// token nor `authorize` are refused; actions default to on with either.
#[test]
fn operator_options_by_name_carry_the_rules() {
    use mistri_locks::OptionValue;
    let err =
        |b: &mistri_locks::operator::OperatorOptionsBuilder| b.build().unwrap_err().to_string();
    let mut b = OperatorOptions::builder();
    let unknown = b
        .set("allowed_host", OptionValue::Text("*".into()))
        .unwrap_err()
        .to_string();
    assert!(
        unknown.contains("unknown option field \"allowed_host\""),
        "{unknown}"
    );
    assert!(
        unknown.contains("did you mean \"allowed_hosts\"?"),
        "{unknown}"
    );
    let wrong = b
        .set("allow_actions", OptionValue::Text("yes".into()))
        .unwrap_err()
        .to_string();
    assert!(
        wrong.contains("allow_actions must be true or false"),
        "{wrong}"
    );

    let mut short = OperatorOptions::builder();
    short
        .set("token", OptionValue::Text("x".repeat(15)))
        .unwrap();
    assert!(
        err(&short).contains("at least 16 characters"),
        "{}",
        err(&short)
    );

    let mut bare = OperatorOptions::builder();
    bare.set("allow_actions", OptionValue::Bool(true)).unwrap();
    assert!(
        err(&bare).contains("needs authorize or token"),
        "{}",
        err(&bare)
    );

    let read_only = OperatorOptions::builder().build().unwrap();
    assert!(!read_only.allow_actions && read_only.token.is_none());
    let mut tok = OperatorOptions::builder();
    tok.set("token", OptionValue::Text("x".repeat(16))).unwrap();
    tok.set("allowed_hosts", OptionValue::Text("a.example".into()))
        .unwrap();
    tok.set("allowed_hosts", OptionValue::Text("b.example".into()))
        .unwrap();
    let built = tok.build().unwrap();
    assert!(built.allow_actions, "a token enables actions by default");
    assert_eq!(built.allowed_hosts, ["a.example", "b.example"]);
    let mut host = OperatorOptions::builder();
    host.set("authorize", OptionValue::Bool(true)).unwrap();
    host.set("allow_actions", OptionValue::Bool(false)).unwrap();
    assert!(
        !host.build().unwrap().allow_actions,
        "an explicit false wins"
    );
}

/// A request's fields are read by name alike in every face: unknown names
/// are refused with the nearest known one, what is not set has the
/// defaults (GET /, scheme http).
#[test]
fn request_fields_by_name_have_one_set_of_defaults() {
    use mistri_locks::operator::OperatorRequestFields;
    use mistri_locks::OptionValue;
    let mut fields = OperatorRequestFields::default();
    let e = fields
        .set("cookies", OptionValue::Text("x".into()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown request field \"cookies\"; did you mean \"cookie\"?"),
        "{e}"
    );
    let e = fields
        .set("host_authorized", OptionValue::Text("yes".into()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("host_authorized must be true or false"), "{e}");
    let req = fields.request();
    assert_eq!(
        (req.method, req.path, req.scheme, req.query),
        ("GET", "/", "http", "")
    );
    assert!(req.host.is_none() && req.body.is_empty() && req.host_authorized.is_none());
    fields
        .set("path", OptionValue::Text("/api/state".into()))
        .unwrap();
    fields
        .set("host", OptionValue::Text("localhost".into()))
        .unwrap();
    fields
        .set("host_authorized", OptionValue::Bool(false))
        .unwrap();
    fields.set_body(b"{}".to_vec());
    let req = fields.request();
    assert_eq!(
        (req.path, req.host, req.body),
        ("/api/state", Some("localhost"), &b"{}"[..])
    );
    assert_eq!(req.host_authorized, Some(false));
    let locks = Locks::memory();
    let served = handle(&locks, &OperatorOptions::default(), &fields.request());
    assert_eq!(served.status, 200);
}
