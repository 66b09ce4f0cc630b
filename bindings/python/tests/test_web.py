"""The operator's page under WSGI (mistri_locks.integrations.web) and the metrics
(mistri_locks.metrics): the same JSON, actions and refusals as
`mistri-locks serve`, driven through the WSGI protocol itself; the
Prometheus text and the prometheus_client collector checked by promtool."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

import pytest

import mistri_locks
from mistri_locks import metrics
from mistri_locks.integrations import web

TOKEN = "0123456789abcdef-token"
HOST = "app.example:8000"
# The app's own names: the default is the loopback names only.
HOSTS = ["app.example"]
ORIGIN = "http://" + HOST


class Response:
    def __init__(self, status: str, headers: List[Tuple[str, str]], body: bytes) -> None:
        self.status = int(status.split()[0])
        self.headers = headers
        self.body = body

    def header(self, name: str) -> Optional[str]:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def json(self) -> Any:
        return json.loads(self.body)


def call(app: Any, method: str, path: str, *, query: str = "", body: bytes = b"",
         mount: str = "", headers: Optional[Dict[str, str]] = None,
         extra: Optional[Dict[str, Any]] = None) -> Response:
    environ: Dict[str, Any] = {
        "REQUEST_METHOD": method, "SCRIPT_NAME": mount, "PATH_INFO": path,
        "QUERY_STRING": query, "SERVER_NAME": "app.example", "SERVER_PORT": "8000",
        "HTTP_HOST": HOST, "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)), "CONTENT_TYPE": "application/json",
    }
    for k, v in (headers or {}).items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    environ.update(extra or {})
    got: Dict[str, Any] = {}

    def start_response(status: str, hdrs: List[Tuple[str, str]]) -> None:
        got["status"], got["headers"] = status, hdrs

    out = b"".join(app(environ, start_response))
    return Response(got["status"], got["headers"], out)


def page_csrf(app: Any, mount: str = "") -> Tuple[str, str]:
    """The CSRF cookie a page load sets, and the token in the page."""
    r = call(app, "GET", "/", mount=mount)
    assert r.status == 200
    cookie = (r.header("Set-Cookie") or "").split(";")[0]
    token = cookie.partition("=")[2]
    assert token and ('content="%s"' % token) in r.body.decode()
    return cookie, token


def promtool(text: str) -> None:
    assert shutil.which("promtool"), "promtool (Debian's prometheus) is installed by scripts/setup"
    p = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr + text


def test_read_only_by_default() -> None:
    locks = mistri_locks.Memory()
    locks.set_flag("stop:x", ttl=60)
    app = web.app(locks, allowed_hosts=HOSTS)
    r = call(app, "GET", "/")
    assert r.status == 200 and r.header("Content-Type") == "text/html; charset=utf-8"
    assert '<meta name="mistri-actions" content="off">' in r.body.decode()
    assert "default-src 'none'" in (r.header("Content-Security-Policy") or "")
    cookie, csrf = page_csrf(app)
    r = call(app, "POST", "/api/clear", body=b'{"key": "stop:x"}',
             headers={"Origin": ORIGIN, "Cookie": cookie, "X-CSRF-Token": csrf})
    assert r.status == 403 and "read-only" in r.json()["error"]
    assert locks.flag("stop:x")


def test_state_json_is_the_listing_escaped() -> None:
    locks = mistri_locks.Memory()
    evil = "<img src=x onerror=alert(1)>"
    with locks.hold("report:42", ttl=10, heartbeat=1) as h1, locks.hold(evil, ttl=10, heartbeat=1):
        r = call(web.app(locks, allowed_hosts=HOSTS), "GET", "/api/state", query="prefix=")
        assert r.status == 200 and r.header("Content-Type") == "application/json"
        assert b"<" not in r.body
        doc = r.json()
        keys = [lease["key"] for lease in doc["leases"]]
        assert sorted(keys) == sorted(["report:42", evil])
        lease = next(le for le in doc["leases"] if le["key"] == "report:42")
        assert lease["fence"] == h1.fence and lease["ttl_s"] == 10 and lease["heartbeat_s"] == 1
        assert lease["holders"][0]["stuck"] is False
        only = call(web.app(locks, allowed_hosts=HOSTS), "GET", "/api/state", query="prefix=report%3A").json()
        assert [le["key"] for le in only["leases"]] == ["report:42"]


def test_actions_need_authorize_same_origin_and_the_pages_csrf_token() -> None:
    locks = mistri_locks.Memory()
    other = locks.new_owner()
    allowed = {"yes": True}
    seen: List[Any] = []

    def authorize(environ: Dict[str, Any]) -> bool:
        seen.append(environ)
        return allowed["yes"]

    app = web.app(locks, allowed_hosts=HOSTS, authorize=authorize, prefix="job")
    cookie, csrf = page_csrf(app, mount="/locks")
    assert call(app, "GET", "/", mount="/locks").header("Set-Cookie").endswith(  # type: ignore[union-attr]
        "Path=/locks; SameSite=Strict; HttpOnly")
    good = {"Origin": ORIGIN, "Cookie": cookie, "X-CSRF-Token": csrf}
    assert other.acquire("job:1", ttl=30)

    def brk(headers: Dict[str, str], key: str = "job:1") -> Response:
        return call(app, "POST", "/api/break", mount="/locks",
                    body=json.dumps({"key": key}).encode(), headers=headers)

    assert brk({}).status == 403  # no origin, no token
    assert brk(dict(good, Origin="http://evil.example")).status == 403
    assert brk(dict(good, **{"X-CSRF-Token": "nope"})).status == 403
    assert brk({k: v for k, v in good.items() if k != "Cookie"}).status == 403
    allowed["yes"] = False
    assert brk(good).status == 403
    allowed["yes"] = True
    assert brk(good, key="elsewhere").status == 403  # outside the prefix
    assert locks.held("job:1")
    assert call(app, "GET", "/api/break", mount="/locks").status == 405
    r = brk(good)
    assert r.status == 200 and r.json()["ok"] is True, r.body
    assert not locks.held("job:1")
    assert seen and seen[-1]["PATH_INFO"] == "/api/break"
    # Clear, and a bad body.
    locks.set_flag("job:stop", ttl=60)
    r = call(app, "POST", "/api/clear", mount="/locks", body=b'{"key": "job:stop"}', headers=good)
    assert r.status == 200 and not locks.flag("job:stop")
    assert call(app, "POST", "/api/clear", mount="/locks", body=b"{", headers=good).status == 400


def test_a_bearer_token_authorises_scripts() -> None:
    locks = mistri_locks.Memory()
    locks.set_flag("stop:x", ttl=60)
    app = web.app(locks, allowed_hosts=HOSTS, token=TOKEN)
    body = b'{"key": "stop:x"}'
    assert call(app, "POST", "/api/clear", body=body).status == 403
    assert call(app, "POST", "/api/clear", body=body,
                headers={"Authorization": "Bearer wrong-token-0123"}).status == 403
    assert call(app, "POST", "/api/clear", body=body, headers={
        "Authorization": "Bearer " + TOKEN, "Origin": "http://evil.example"}).status == 403
    r = call(app, "POST", "/api/clear", body=body, headers={"Authorization": "Bearer " + TOKEN})
    assert r.status == 200 and not locks.flag("stop:x")
    with pytest.raises(ValueError):
        web.app(locks, token="short")
    with pytest.raises(ValueError):
        web.app(locks, allow_actions=True)
    with pytest.raises(TypeError):
        web.app("not a handle")  # type: ignore[arg-type]


def test_a_content_length_that_is_not_a_length_is_400() -> None:
    """Finding 15 (WSGI): CONTENT_LENGTH "abc" answered 413 (44a85b1), a
    negative one was read as no body. Both are 400 now, before the body is
    read; a length above the largest body stays 413."""
    locks = mistri_locks.Memory()
    wsgi = web.app(locks, allowed_hosts=HOSTS, token=TOKEN)
    auth = {"Authorization": "Bearer " + TOKEN}
    for bad in ("abc", "-5", "1e3", " 5", "+5", "\uff15"):
        r = call(wsgi, "POST", "/api/clear", body=b'{"key":"f"}', headers=auth,
                 extra={"CONTENT_LENGTH": bad})
        assert r.status == 400, (bad, r.status, r.body)
        assert "Content-Length" in r.json()["error"]
    r = call(wsgi, "POST", "/api/clear", body=b"", headers=auth, extra={"CONTENT_LENGTH": str(1 << 20)})
    assert r.status == 413
    locks.set_flag("f", 60)
    r = call(wsgi, "POST", "/api/clear", body=b'{"key":"f"}', headers=auth)
    assert r.status == 200 and not locks.flag("f")


def test_the_host_check_refuses_other_hosts_with_421() -> None:
    """Findings 4 and 13 (WSGI): a DNS-rebinding request (its Host not one
    of the app's names) got the whole state (44a85b1). The app passes
    allowed_hosts to the core, which answers 421 before it reads the
    backend; the default is the loopback names (fail closed)."""
    locks = mistri_locks.Memory()
    locks.set_flag("secret:stop", 60)
    default = web.app(locks)
    for ok in ("localhost", "localhost:8000", "127.0.0.1:9", "[::1]:8000"):
        r = call(default, "GET", "/api/state", headers={"Host": ok})
        assert r.status == 200, (ok, r.status, r.body)
    for bad in ("evil.example", "app.example:8000", "localhost.evil.example"):
        r = call(default, "GET", "/api/state", headers={"Host": bad})
        assert r.status == 421, (bad, r.status, r.body)
        assert b"secret" not in r.body
    named = web.app(locks, allowed_hosts=["app.example", ".corp.example", "ops.example:9000"])
    for ok in ("app.example:8000", "app.example", "corp.example", "a.b.corp.example:1", "ops.example:9000"):
        assert call(named, "GET", "/api/state", headers={"Host": ok}).status == 200, ok
    for bad in ("evil.example", "ops.example:9001", "xcorp.example", "localhost"):
        assert call(named, "GET", "/api/state", headers={"Host": bad}).status == 421, bad
    anything = web.app(locks, allowed_hosts=["*"])
    assert call(anything, "GET", "/api/state", headers={"Host": "evil.example"}).status == 200
    # A rebinding page that fetched its own CSRF pair from GET / is refused
    # before the action too.
    acting = web.app(locks, token=TOKEN)
    r = call(acting, "POST", "/api/clear", body=b'{"key":"secret:stop"}',
             headers={"Host": "evil.example", "Authorization": "Bearer " + TOKEN})
    assert r.status == 421 and locks.flag("secret:stop")


def test_behind_a_tls_proxy_trust_forwarded_takes_scheme_and_host_from_the_proxy() -> None:
    """Finding 13 (WSGI): behind a TLS-terminating proxy every action was
    403 (Origin https://… against the request's http). With
    trust_forwarded the scheme and host come from X-Forwarded-Proto/-Host,
    for the Host check and the same-origin check alike."""
    locks = mistri_locks.Memory()
    proxied = {"Host": "127.0.0.1:8000", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "ops.example"}

    def clear(app: Any, headers: Dict[str, str]) -> int:
        locks.set_flag("f", 60)
        cookie, csrf = page_csrf_with(app, headers)
        return call(app, "POST", "/api/clear", body=b'{"key":"f"}', headers={
            **headers, "Origin": "https://ops.example", "Cookie": cookie, "X-CSRF-Token": csrf}).status

    behind = web.app(locks, authorize=lambda environ: True, allowed_hosts=["ops.example"],
                     trust_forwarded=True)
    assert clear(behind, proxied) == 200 and not locks.flag("f")
    # The forwarded host is the one checked: another name is refused.
    assert call(behind, "GET", "/api/state", headers={**proxied, "X-Forwarded-Host": "evil.example"}).status == 421
    # Without trust_forwarded the proxy's headers are ignored: the action is
    # cross-origin (https://ops.example against http://127.0.0.1:8000).
    plain = web.app(locks, authorize=lambda environ: True, allowed_hosts=["ops.example", "127.0.0.1"])
    assert clear(plain, proxied) == 403 and locks.flag("f")


def page_csrf_with(app: Any, headers: Dict[str, str]) -> Tuple[str, str]:
    r = call(app, "GET", "/", headers=headers)
    assert r.status == 200, (r.status, r.body)
    cookie = (r.header("Set-Cookie") or "").split(";")[0]
    return cookie, cookie.partition("=")[2]


def test_host_options_are_checked_and_passed_by_name() -> None:
    """The options reach the core by name: a misspelt field is an error,
    not an absent value; bad allowed_hosts are refused at construction."""
    locks = mistri_locks.Memory()
    with pytest.raises(TypeError, match="one string"):
        web.app(locks, allowed_hosts="app.example")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="non-empty str"):
        web.app(locks, allowed_hosts=[""])
    with pytest.raises(TypeError, match="trust_forwarded"):
        web.app(locks, trust_forwarded="yes")  # type: ignore[arg-type]
    native = mistri_locks._native
    with pytest.raises(TypeError, match='unknown option field "allowed_host"'):
        native._operator_options({"allowed_host": ["*"]})
    with pytest.raises(TypeError, match='unknown request field "hots"'):
        native._operator_handle(locks, {"hots": "x"}, native._operator_options({}))
    with pytest.raises(TypeError, match="allowed_hosts"):
        native._operator_options({"allowed_hosts": "app.example"})
    status, _, _ = native._operator_handle(
        locks, {"method": "GET", "path": "/api/state", "host": "app.example"},
        native._operator_options({"allowed_hosts": ["*"]}))
    assert status == 200


def test_a_bad_option_fails_when_the_app_is_made() -> None:
    """The options are built once, by the core's parser, when the app is
    made, and the app holds the native result: a 15-character token is the
    core's ValueError from ``app(...)`` and ``django_urls(...)``, before
    any request; a request passes only its own fields (the options are the
    built object, not a dict read again per request)."""
    locks = mistri_locks.Memory()
    native = mistri_locks._native
    fifteen = "0123456789abcde"
    with pytest.raises(ValueError, match="token must be a string of at least 16 characters"):
        web.app(locks, token=fifteen, allowed_hosts=HOSTS)
    with pytest.raises(ValueError, match="token must be a string of at least 16 characters"):
        web.django_urls(locks, token=fifteen, allowed_hosts=HOSTS)
    built = native._operator_options({"token": fifteen + "f", "allowed_hosts": HOSTS})
    assert isinstance(built, native._OperatorOptions) and built.allow_actions
    # A dict is no longer read per request.
    with pytest.raises(TypeError):
        native._operator_handle(locks, {"method": "GET"}, {"allowed_hosts": HOSTS})  # type: ignore[arg-type]
    status, _, _ = native._operator_handle(
        locks, {"method": "GET", "path": "/api/state", "host": "app.example"}, built)
    assert status == 200


def test_stop_raises_the_holders_stop_key() -> None:
    locks = mistri_locks.Memory()
    worker = locks.new_owner()
    app = web.app(locks, allowed_hosts=HOSTS, token=TOKEN)
    hold = worker.hold("report:42", ttl=10, heartbeat=0.05, stop_key="report:42:stop")
    assert hold is not None
    r = call(app, "POST", "/api/stop", body=b'{"key": "report:42"}',
             headers={"Authorization": "Bearer " + TOKEN})
    assert r.status == 200, r.body
    # Tripped within a tick (the heartbeat, 50 ms); the bound is the flag's ttl.
    assert hold.signal.wait(5)
    hold.release()


def test_metrics_pass_promtool_from_every_route() -> None:
    locks = mistri_locks.Memory()
    with locks.hold("job", ttl=10, heartbeat=1):
        assert locks.hold("job", ttl=10) is None
        text = metrics.text(locks)
        promtool(text)
        assert "mistri_locks_holds_active 1\n" in text
        assert 'mistri_locks_acquisitions_total{outcome="refused"} 1\n' in text
        served = call(web.app(locks, allowed_hosts=HOSTS), "GET", "/metrics")
        assert served.status == 200 and served.header("Content-Type").startswith("text/plain; version=0.0.4")  # type: ignore[union-attr]
        promtool(served.body.decode())
        assert "mistri_locks_fleet_leases_held 1\n" in served.body.decode()


def test_the_prometheus_client_collector() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    locks = mistri_locks.Memory()
    registry = CollectorRegistry()
    registry.register(metrics.Collector(locks))
    with locks.hold("job", ttl=10, heartbeat=1):
        out = generate_latest(registry).decode()
    promtool(out)
    assert "mistri_locks_holds_active 1.0" in out
    assert 'mistri_locks_acquisitions_total{outcome="acquired"} 1.0' in out
    assert 'mistri_locks_holds_lost_total{cause="deadline"} 0.0' in out
    with pytest.raises(TypeError):
        metrics.Collector(object())  # type: ignore[arg-type]


DJANGO_CHECK = """
import django
from django.conf import settings
settings.configure(ALLOWED_HOSTS=["*"], ROOT_URLCONF="__main__", DEBUG=False, SECRET_KEY="test",
                   MIDDLEWARE=["django.middleware.csrf.CsrfViewMiddleware"])
django.setup()
from django.test import Client
from django.urls import include, path
import mistri_locks, mistri_locks.integrations.web

locks = mistri_locks.Memory()
locks.set_flag("stop:x", ttl=60)
urlpatterns = [path("locks/", include(mistri_locks.integrations.web.django_urls(locks, authorize=lambda request: True)))]
client = Client(HTTP_HOST="app.example:8000")
r = client.get("/locks/")
assert r.status_code == 200, r.status_code
csrf = r.cookies["mistri_locks_csrf"].value
assert r.cookies["mistri_locks_csrf"]["path"] == "/locks"
state = client.get("/locks/api/state").json()
assert [f["key"] for f in state["flags"]] == ["stop:x"], state
assert client.post("/locks/api/clear", b'{"key": "stop:x"}', content_type="application/json",
                   HTTP_ORIGIN="http://evil.example", HTTP_X_CSRF_TOKEN=csrf).status_code == 403
assert client.post("/locks/api/clear", b'{"key": "stop:x"}', content_type="application/json",
                   HTTP_ORIGIN="http://app.example:8000").status_code == 403  # no CSRF token
r = client.post("/locks/api/clear", b'{"key": "stop:x"}', content_type="application/json",
                HTTP_ORIGIN="http://app.example:8000", HTTP_X_CSRF_TOKEN=csrf)
assert r.status_code == 200, r.content
assert not locks.flag("stop:x")
# allowed_hosts defaults to settings.ALLOWED_HOSTS ("*" here); an explicit
# list that leaves out this host is refused by the core (421).
urlpatterns.append(path("narrow/", include(mistri_locks.integrations.web.django_urls(locks, allowed_hosts=["other.example"]))))
assert client.get("/locks/api/state").status_code == 200
assert client.get("/narrow/api/state").status_code == 421
print("django ok")
"""


def test_django_urls_serve_the_same_interface() -> None:
    # Its own process: Django's settings are process-wide (test_django.py
    # configures its own).
    pytest.importorskip("django")  # python32's pinned tools install it
    p = subprocess.run([sys.executable, "-c", DJANGO_CHECK], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "django ok" in p.stdout, p.stdout + p.stderr
