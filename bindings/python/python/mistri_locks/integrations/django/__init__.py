"""Django: the backend from settings, ``leased`` on it, and
``manage.py mistri_locks``.

Add ``"mistri_locks.integrations.django"`` to ``INSTALLED_APPS`` for the management
command. The backend is chosen once per process (and again in a forked
child), from ``settings.MISTRI_LOCKS``:

- ``{"URL": "redis://…" | "postgres://…" | "/path/to/locks.db"}``: that
  backend (``NAMESPACE`` optional, default ``mistri:locks``);
- no ``URL``, and ``DATABASES["default"]`` is PostgreSQL: the Postgres
  backend on that very database (a URL built from its settings; the schema
  ``mistri_locks``, or ``SCHEMA``, is created by the app's migration,
  ``manage.py migrate mistri_locks``, or else on first use);
- no ``URL``, and ``DATABASES["default"]`` is MySQL or MariaDB: the MySQL
  backend on that very database (a ``mysql://`` URL built from its HOST,
  PORT, NAME, USER, PASSWORD and ``OPTIONS["ssl_mode"]``; its tables are
  made on first use);
- a ``Locks`` handle made in settings.py (``MISTRI_LOCKS = Postgres(...)``):
  that handle;
- otherwise Local: an SQLite file ``mistri_locks.db`` beside ``BASE_DIR``
  (``PATH`` overrides), or in the temp dir when there is no ``BASE_DIR``.

``mistri_locks.integrations.django.leased`` is ``mistri_locks.leased`` with that
backend: it decorates views, commands' helpers and any function.

A write can refuse a stale holder inside its own transaction (Postgres
backend on the default database):

    with transaction.atomic():
        with connection.cursor() as c:
            c.execute("SELECT mistri_locks.fence_check(%s, %s)", [resource, lease.fence])
        Report.objects.update_or_create(...)
"""

from __future__ import annotations

import os
import tempfile
import threading
from typing import Any, Callable, Optional, TypeVar

from ..._leased import leased as _leased
from ..._native import Locks
from ..._native import open as _open
from ..._native import mysql_url as _mysql_url_of
from ..._native import postgres_url as _postgres_url_of

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_handle: Optional[tuple[int, Locks]] = None


def _postgres_url(db: dict[str, Any]) -> str:
    """A libpq URL for a Django ``DATABASES`` entry (PostgreSQL): the core
    builds it from the typed parts (an IPv6 host bracketed, every part
    percent-encoded, a ``/`` host a unix socket folder)."""
    options = db.get("OPTIONS") or {}
    return _postgres_url_of(
        host=db.get("HOST"),
        port=db.get("PORT"),
        database=db.get("NAME"),
        user=db.get("USER"),
        password=db.get("PASSWORD"),
        sslmode=options.get("sslmode"),
        application_name=options.get("application_name"),
    )


def _mysql_url(db: dict[str, Any]) -> str:
    """A ``mysql://`` URL for a Django ``DATABASES`` entry (MySQL or
    MariaDB), built by the core from the typed parts (an IPv6 host
    bracketed, every part percent-encoded). A unix socket HOST is a
    ValueError: the backend reaches MySQL over TCP."""
    options = db.get("OPTIONS") or {}
    return _mysql_url_of(
        host=db.get("HOST"),
        port=db.get("PORT"),
        database=db.get("NAME"),
        user=db.get("USER"),
        password=db.get("PASSWORD"),
        tls_mode=options.get("ssl_mode"),
    )


def backend_url() -> str:
    """The URL (or Local path) the settings choose (see the module's doc)."""
    from django.conf import settings  # type: ignore[import-untyped, import-not-found, unused-ignore]

    setting = getattr(settings, "MISTRI_LOCKS", None) or {}
    if isinstance(setting, Locks):
        raise TypeError("settings.MISTRI_LOCKS is a handle, not a dict with a URL")
    conf: dict[str, Any] = dict(setting)
    if conf.get("URL"):
        return str(conf["URL"])
    default = settings.DATABASES.get("default", {})
    if "postgresql" in str(default.get("ENGINE", "")) or "postgis" in str(default.get("ENGINE", "")):
        return _postgres_url(default)
    if "mysql" in str(default.get("ENGINE", "")):
        return _mysql_url(default)
    if conf.get("PATH"):
        return str(conf["PATH"])
    base = getattr(settings, "BASE_DIR", None)
    if base:
        return os.path.join(str(base), "mistri_locks.db")
    return os.path.join(tempfile.gettempdir(), f"mistri_locks-{os.getuid()}.db")


def open_url(url: str, namespace: str = "mistri:locks", schema: Optional[str] = None) -> Locks:
    """The backend for a URL, through ``mistri_locks.open`` (the core's one
    scheme table): ``redis…://``, ``postgres(ql)://`` (in ``schema``,
    default ``mistri_locks``; a ``schema`` for another backend is a
    ``ConfigError``), ``memory://``, else a Local database path."""
    return _open(url, namespace=namespace, schema=schema)


def default_database_schema() -> Optional[str]:
    """The schema the leases live in when the settings put them in the
    ``default`` database (no ``URL``, PostgreSQL); else None. The app's
    migration creates it there."""
    from django.conf import settings  # type: ignore[import-untyped, import-not-found, unused-ignore]

    setting = getattr(settings, "MISTRI_LOCKS", None) or {}
    if isinstance(setting, Locks) or setting.get("URL"):
        return None
    engine = str(settings.DATABASES.get("default", {}).get("ENGINE", ""))
    if "postgresql" not in engine and "postgis" not in engine:
        return None
    return str(setting.get("SCHEMA") or "mistri_locks")


def locks() -> Locks:
    """This process's handle on the backend the settings choose (made on
    first use, and again after a fork)."""
    global _handle
    with _lock:
        if _handle is None or _handle[0] != os.getpid():
            from django.conf import settings  # type: ignore[import-untyped, import-not-found, unused-ignore]

            conf = getattr(settings, "MISTRI_LOCKS", None) or {}
            if isinstance(conf, Locks):
                # A handle made in settings.py (the older recipe): use it.
                _handle = (os.getpid(), conf)
            else:
                namespace = str(conf.get("NAMESPACE", "mistri:locks"))
                schema = conf.get("SCHEMA")
                _handle = (os.getpid(), open_url(backend_url(), namespace, schema))
        return _handle[1]


def reset() -> None:
    """Forgets the handle (tests that change ``settings.MISTRI_LOCKS``)."""
    global _handle
    with _lock:
        _handle = None


def leased(key: str, **options: Any) -> Callable[[F], F]:
    """``mistri_locks.leased`` on the settings' backend (``locks=`` still
    overrides it)."""
    options.setdefault("locks", locks)
    return _leased(key, **options)


__all__ = ["backend_url", "default_database_schema", "leased", "locks", "open_url", "reset"]
