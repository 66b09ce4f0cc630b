"""The operator's page for Python hosts: a WSGI app and a Django URL helper.

``app(locks)`` serves the same page, JSON, actions and metrics as
``mistri-locks serve`` (the routes and refusals are written once, in the
core: see docs/OPERATING.md)::

    GET  /              the page
    GET  /api/state     the leases and flags as JSON (?prefix=…)
    GET  /metrics       Prometheus text: this handle's counters + fleet gauges
    POST /api/stop      {"key": "…"}: raise the stop keys of the lease's holders
    POST /api/clear     {"key": "…"}: lower a flag
    POST /api/break     {"key": "…"}: delete a lease

Read-only unless ``authorize`` (or ``token``) is given: an action then needs
``authorize(request)`` to return true (or ``Authorization: Bearer <token>``),
a same-origin request, and the page's CSRF token. ``authorize`` gets the
WSGI environ from :func:`app` and Django's ``HttpRequest`` from
:func:`django_urls`; it is called for actions only (protect viewing with the
host's own routes or middleware).

Host check (DNS rebinding): a request whose ``Host`` is not in
``allowed_hosts`` is refused (421) before anything is read from the
backend. ``name`` matches that host on any port, ``name:port`` that port,
``.example.com`` the domain and its subdomains, ``*`` any host. :func:`app`
defaults to the loopback names only (``localhost``, ``127.0.0.1``,
``[::1]``); :func:`django_urls` to ``settings.ALLOWED_HOSTS``, which
Django checks too. Pass ``allowed_hosts=["*"]`` only where the app's own
Host check covers the mount. ``trust_forwarded=True`` (behind a
TLS-terminating proxy that sets them): the scheme and host come from
``X-Forwarded-Proto`` / ``X-Forwarded-Host``, for the Host check and the
same-origin check alike.

Nothing of Django is imported until :func:`django_urls` is called.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from .. import _native
from .._native import Locks

__all__ = ["app", "django_urls", "WSGIApp"]

_ACTIONS = ("/api/stop", "/api/clear", "/api/break")

StartResponse = Callable[..., Any]
WSGIApp = Callable[[Dict[str, Any], StartResponse], Iterable[bytes]]


class _Options:
    def __init__(
        self,
        authorize: Optional[Callable[[Any], bool]],
        token: Optional[str],
        allow_actions: Optional[bool],
        prefix: str,
        allowed_hosts: Iterable[str],
        trust_forwarded: bool,
    ) -> None:
        if authorize is not None and not callable(authorize):
            raise TypeError("authorize must be callable (request -> bool)")
        if not isinstance(prefix, str):
            raise TypeError("prefix must be a str")
        self.authorize = authorize
        if isinstance(allowed_hosts, (str, bytes)):
            raise TypeError("allowed_hosts must be a list of host names, not one string")
        hosts = list(allowed_hosts)
        for host in hosts:
            if not isinstance(host, str) or not host:
                raise TypeError(f"allowed_hosts: each entry must be a non-empty str, got {host!r}")
        if not isinstance(trust_forwarded, bool):
            raise TypeError("trust_forwarded must be a bool")
        # Built once, here, by the core's one parser, which holds the rules
        # (the token's length; actions need a token or authorize;
        # allow_actions' default): a bad option fails now, and a request
        # passes only its own fields.
        self.options = _native._operator_options({
            "prefix": prefix,
            "allow_actions": allow_actions,
            "token": token,
            "authorize": authorize is not None,
            "allowed_hosts": hosts,
            "trust_forwarded": trust_forwarded,
        })


def _respond(
    locks: Locks,
    opts: _Options,
    meta: Any,
    path: str,
    mount: str,
    body: bytes,
    request: Any,
) -> Tuple[int, List[Tuple[str, str]], bytes]:
    method = meta.get("REQUEST_METHOD", "GET")
    host_authorized: Optional[bool] = None
    if method == "POST" and path in _ACTIONS and opts.authorize is not None:
        host_authorized = bool(opts.authorize(request))
    host = meta.get("HTTP_HOST")
    if not host:
        host = "%s:%s" % (meta.get("SERVER_NAME", ""), meta.get("SERVER_PORT", ""))
    request_fields: Dict[str, Any] = {
        "method": method,
        "path": path or "/",
        "query": meta.get("QUERY_STRING", ""),
        "mount": mount,
        "scheme": meta.get("wsgi.url_scheme", "http"),
        "host": host,
        "forwarded_proto": meta.get("HTTP_X_FORWARDED_PROTO"),
        "forwarded_host": meta.get("HTTP_X_FORWARDED_HOST"),
        "origin": meta.get("HTTP_ORIGIN"),
        "authorization": meta.get("HTTP_AUTHORIZATION"),
        "csrf": meta.get("HTTP_X_CSRF_TOKEN"),
        "cookie": meta.get("HTTP_COOKIE"),
        "body": body,
        "host_authorized": host_authorized,
    }
    return _native._operator_handle(locks, request_fields, opts.options)


_Response = Tuple[int, List[Tuple[str, str]], bytes]

_REFUSED: _Response = (
    413, [("Content-Type", "application/json")], b'{"ok":false,"error":"the body is larger than 64 KiB"}'
)
_BAD_LENGTH: _Response = (
    400, [("Content-Type", "application/json")],
    b'{"ok":false,"error":"Content-Length must be a non-negative decimal integer"}',
)


def _body_length(meta: Any) -> Tuple[int, Optional[_Response]]:
    """The request's Content-Length, or the refusal: 400 for one that is not
    a non-negative decimal integer, 413 above the largest body read."""
    raw = meta.get("CONTENT_LENGTH") or ""
    if raw == "":
        return 0, None
    if not (isinstance(raw, str) and raw.isascii() and raw.isdigit()):
        return 0, _BAD_LENGTH
    length = int(raw)
    if length > _native._OPERATOR_MAX_BODY:
        return 0, _REFUSED
    return length, None


def app(
    locks: Locks,
    *,
    authorize: Optional[Callable[[Dict[str, Any]], bool]] = None,
    token: Optional[str] = None,
    allow_actions: Optional[bool] = None,
    prefix: str = "",
    allowed_hosts: Iterable[str] = (),
    trust_forwarded: bool = False,
) -> WSGIApp:
    """A WSGI app serving the operator's page for ``locks``.

    Mount it anywhere (``SCRIPT_NAME`` is its mount point), e.g. with
    werkzeug's ``DispatcherMiddleware`` or Flask's ``app.wsgi_app``.
    ``prefix`` limits what is shown and acted on to keys under it.
    ``allowed_hosts`` (default: the loopback names only) and
    ``trust_forwarded``: see the module's doc.
    """
    if not isinstance(locks, Locks):
        raise TypeError("locks must be a mistri_locks handle (Memory(), Redis(…), …)")
    opts = _Options(authorize, token, allow_actions, prefix, allowed_hosts, trust_forwarded)

    def wsgi(environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        length, refusal = _body_length(environ)
        if refusal is not None:
            status, headers, body = refusal
        else:
            data = environ["wsgi.input"].read(length) if length else b""
            status, headers, body = _respond(
                locks, opts, environ, environ.get("PATH_INFO", "/"),
                environ.get("SCRIPT_NAME", ""), data, environ,
            )
        reason = _REASONS.get(status, "Error")
        start_response("%d %s" % (status, reason), headers + [("Content-Length", str(len(body)))])
        if environ.get("REQUEST_METHOD") == "HEAD":
            return [b""]
        return [body]

    return wsgi


_REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 409: "Conflict", 413: "Content Too Large",
            421: "Misdirected Request", 502: "Bad Gateway"}


def django_urls(
    locks: Locks,
    *,
    authorize: Optional[Callable[[Any], bool]] = None,
    token: Optional[str] = None,
    allow_actions: Optional[bool] = None,
    prefix: str = "",
    allowed_hosts: Optional[Iterable[str]] = None,
    trust_forwarded: bool = False,
) -> List[Any]:
    """URL patterns serving the page in Django::

        urlpatterns = [
            path("locks/", include(mistri_locks.integrations.web.django_urls(
                locks, authorize=lambda request: request.user.is_staff))),
        ]

    The view is exempt from Django's CSRF middleware because the
    interface checks its own token (and the origin) on every action.
    ``allowed_hosts`` defaults to ``settings.ALLOWED_HOSTS`` (read now).
    Behind a TLS-terminating proxy, pass ``trust_forwarded=True`` beside
    Django's ``SECURE_PROXY_SSL_HEADER`` (and ``USE_X_FORWARDED_HOST``).
    """
    from django.http import HttpResponse  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from django.urls import re_path  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from django.views.decorators.csrf import csrf_exempt  # type: ignore[import-untyped, import-not-found, unused-ignore]

    if not isinstance(locks, Locks):
        raise TypeError("locks must be a mistri_locks handle (Memory(), Redis(…), …)")
    if allowed_hosts is None:
        from django.conf import settings  # type: ignore[import-untyped, import-not-found, unused-ignore]

        allowed_hosts = list(settings.ALLOWED_HOSTS)
    opts = _Options(authorize, token, allow_actions, prefix, allowed_hosts, trust_forwarded)

    @csrf_exempt  # type: ignore[untyped-decorator, misc, unused-ignore]
    def view(request: Any, rest: str = "") -> Any:
        meta = dict(request.META)
        meta["REQUEST_METHOD"] = request.method
        full = request.path
        mount = full[: len(full) - len(rest)].rstrip("/")
        _, refusal = _body_length(meta)
        if refusal is not None:
            status, headers, body = refusal
        else:
            status, headers, body = _respond(
                locks, opts, meta, "/" + rest, mount, request.body, request
            )
        response = HttpResponse(body, status=status)
        for name, value in headers:
            if name.lower() == "set-cookie":
                cookie, _, _ = value.partition(";")
                key, _, val = cookie.partition("=")
                response.set_cookie(key, val, path=mount or "/", samesite="Strict",
                                    httponly=True, secure=request.is_secure())
            else:
                response[name] = value
        return response

    return [re_path(r"^(?P<rest>.*)$", view)]
