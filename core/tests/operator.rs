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
use mistri_locks::Locks;
use mistri_locks_testkit::RedisServer;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::SystemTime;

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
