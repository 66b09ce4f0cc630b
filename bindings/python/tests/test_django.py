"""``mistri_locks.integrations.django`` on the session's throwaway PostgreSQL: the
backend defaults to the ``default`` database, ``manage.py mistri_locks``
lists and stops, and a stale fence is refused inside ``atomic()``."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import uuid
from typing import Any, Iterator

import pytest

import mistri_locks
import throwaway_postgres

HERE = os.path.dirname(os.path.abspath(__file__))
NAMESPACE = f"mistri:test:{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def django_pg(postgres_server: throwaway_postgres.Server) -> Iterator[throwaway_postgres.Server]:
    """Django configured in this process with the default database on the
    throwaway server (as django_settings.py does for the subprocess runs)."""
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            SECRET_KEY="test",
            USE_TZ=True,
            INSTALLED_APPS=["mistri_locks.integrations.django"],
            DATABASES={"default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": throwaway_postgres.DB,
                "USER": "postgres",
                "HOST": "127.0.0.1",
                "PORT": str(postgres_server.port),
            }},
            MISTRI_LOCKS={"NAMESPACE": NAMESPACE},
        )
        django.setup()
    import mistri_locks.integrations.django as mld

    mld.reset()
    yield postgres_server
    from django.db import connections

    connections.close_all()
    mld.reset()


def test_the_backend_defaults_to_the_default_database(django_pg: throwaway_postgres.Server) -> None:
    from mistri_locks.integrations.django import backend_url, leased, locks

    assert backend_url() == f"postgres://postgres@127.0.0.1:{django_pg.port}/{throwaway_postgres.DB}"
    handle = locks()
    assert isinstance(handle, mistri_locks.Postgres) and handle.namespace == NAMESPACE
    assert locks() is handle, "one handle per process"
    # The same rows another client on that database sees.
    direct = mistri_locks.Postgres(django_pg.url, namespace=NAMESPACE)

    @leased("report:{account_id}", ttl=2, heartbeat=0.2)
    def report(account_id: int) -> bool:
        lease = mistri_locks.current_lease()
        assert lease is not None
        return direct.held(lease.key)

    assert report(5) is True
    assert not direct.held("report:5")


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_other_settings_choose_other_backends(django_pg: throwaway_postgres.Server, tmp_path: Any) -> None:
    from django.conf import settings
    from django.test import override_settings

    import mistri_locks.integrations.django as mld

    try:
        with override_settings(MISTRI_LOCKS={"URL": "redis://127.0.0.1:1/0"}):
            mld.reset()
            assert mld.backend_url() == "redis://127.0.0.1:1/0"
            assert isinstance(mld.locks(), mistri_locks.Redis)
        sqlite = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "db")}}
        with override_settings(DATABASES=sqlite, BASE_DIR=tmp_path, MISTRI_LOCKS={}):
            mld.reset()
            assert mld.backend_url() == str(tmp_path / "mistri_locks.db")
            assert isinstance(mld.locks(), mistri_locks.Local)
        handle = mistri_locks.Memory()
        with override_settings(MISTRI_LOCKS=handle):  # a handle made in settings.py
            mld.reset()
            assert mld.locks() is handle
    finally:
        mld.reset()
    assert settings.MISTRI_LOCKS == {"NAMESPACE": NAMESPACE}


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_the_database_url_comes_from_the_core(django_pg: throwaway_postgres.Server) -> None:
    """An IPv6 HOST is bracketed (the old builder wrote ``@::1:5432``,
    which no parser reads as host ::1), and a password with ``@``, ``:``,
    ``/`` comes back whole; the same URL opens the real database."""
    from urllib.parse import unquote, urlsplit

    from django.test import override_settings

    import mistri_locks.integrations.django as mld

    password = "p@ss:w/rd?#% &="
    v6 = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "app", "USER": "me",
                      "PASSWORD": password, "HOST": "::1", "PORT": 5433,
                      "OPTIONS": {"sslmode": "disable", "application_name": "web 1"}}}
    try:
        with override_settings(DATABASES=v6):
            url = mld.backend_url()
        assert url.startswith("postgres://me:") and "@[::1]:5433/app?" in url, url
        parts = urlsplit(url)
        assert (parts.hostname, parts.port, parts.username) == ("::1", 5433, "me")
        assert unquote(parts.password or "") == password
        assert "sslmode=disable" in url and "application_name=web%201" in url
        # Built by the core: the native function is the one builder.
        assert mistri_locks._native.postgres_url(host="::1", port="5433") == "postgres://[::1]:5433/"
        with pytest.raises(ValueError, match="did you mean \"host\""):
            mistri_locks._native.postgres_url(hostt="h")
        real = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": throwaway_postgres.DB,
                            "USER": "postgres", "PASSWORD": password, "HOST": "127.0.0.1",
                            "PORT": str(django_pg.port)}}
        with override_settings(DATABASES=real, MISTRI_LOCKS={"NAMESPACE": NAMESPACE}):
            mld.reset()
            handle = mld.locks()
            assert isinstance(handle, mistri_locks.Postgres)
            assert handle.acquire("url:1", 5) and handle.held("url:1") and handle.release("url:1")
    finally:
        mld.reset()


def call(*args: str) -> str:
    from django.core.management import call_command

    out = io.StringIO()
    call_command("mistri_locks", *args, stdout=out)
    return out.getvalue()


def test_the_command_lists_and_stops(django_pg: throwaway_postgres.Server) -> None:
    from django.core.management import CommandError

    from mistri_locks.integrations.django import locks

    handle = locks()
    hold = handle.hold("nightly:7", ttl=5, heartbeat=0.2, stop_key="nightly:7:stop")
    assert hold is not None
    with hold:
        listed = call("list", "nightly:")
        assert "lease nightly:7" in listed and f"fence={hold.fence}" in listed
        assert "nightly:7" in call("status", "nightly:7")
        call("stop", "nightly:7:stop", "--ttl", "30")
        # The tick (0.2 s) or the NOTIFY trips it; 5 s is the bound of a
        # lost test, not the promise (test_postgres.py measures that).
        assert hold.signal.wait(5)  # type: ignore[union-attr]
        with pytest.raises(mistri_locks.Interrupted) as info:
            hold.checkpoint()
        assert info.value.reason == "stopped"
        assert "flag  nightly:7:stop" in call("list", "nightly:")
    call("clear", "nightly:7:stop")
    assert not handle.flag("nightly:7:stop")
    with pytest.raises(CommandError, match="not held: nightly:7"):
        call("status", "nightly:7")
    assert "raised job:abc-123:stop" in call("stop-task", "abc-123")
    assert handle.flag("job:abc-123:stop")
    handle.clear_flag("job:abc-123:stop")


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_a_mysql_default_database_puts_the_leases_in_mysql(
    django_pg: throwaway_postgres.Server, mariadb_server: Any
) -> None:
    """``DATABASES["default"]`` on MySQL/MariaDB (no ``URL``): the core
    builds the ``mysql://`` URL from its parts, and ``leased`` and
    ``manage.py mistri_locks`` work on that database (a throwaway MariaDB,
    whose password must be percent-encoded). ``URL`` still wins."""
    from django.test import override_settings

    import mistri_locks.integrations.django as mld

    ns = f"mistri:test:{uuid.uuid4().hex}"
    direct = mistri_locks.open(mariadb_server.url, namespace=ns)
    mysql = {"default": {"ENGINE": "django.db.backends.mysql", "NAME": "mistri", "USER": "mistri",
                         "PASSWORD": "pw:mistri/41", "HOST": "127.0.0.1", "PORT": str(mariadb_server.port)}}
    try:
        with override_settings(DATABASES=mysql, MISTRI_LOCKS={"NAMESPACE": ns}):
            mld.reset()
            assert mld.backend_url() == mariadb_server.url
            assert mld.default_database_schema() is None

            @mld.leased("report:{account_id}", ttl=2, heartbeat=0.2)
            def report(account_id: int) -> tuple[bool, int]:
                lease = mistri_locks.current_lease()
                assert lease is not None
                return direct.held(lease.key), lease.fence

            held, fence = report(9)
            assert held and fence > 0
            assert not direct.held("report:9")
            assert direct.acquire("nightly:9", 30)
            assert f"fence={direct.fence('nightly:9')}" in call("list", "nightly:")
            call("stop", "nightly:9:stop", "--ttl", "30")
            assert direct.flag("nightly:9:stop")
        with override_settings(DATABASES=mysql, MISTRI_LOCKS={"URL": "redis://127.0.0.1:1/0"}):
            assert mld.backend_url() == "redis://127.0.0.1:1/0"
        v6 = {"default": {**mysql["default"], "HOST": "::1", "PORT": 3307, "USER": "me",
                          "OPTIONS": {"ssl_mode": "VERIFY_IDENTITY"}}}
        with override_settings(DATABASES=v6):
            assert mld.backend_url() == "mysql://me:pw%3Amistri%2F41@[::1]:3307/mistri?ssl-mode=VERIFY_IDENTITY"
        socket_host = {"default": {**mysql["default"], "HOST": "/run/mysqld/mysqld.sock"}}
        with override_settings(DATABASES=socket_host), pytest.raises(ValueError, match="unix socket"):
            mld.backend_url()
    finally:
        mld.reset()


def test_django_admin_runs_the_command(django_pg: throwaway_postgres.Server) -> None:
    """As an operator runs it: ``django-admin`` (manage.py) in its own process."""
    from mistri_locks.integrations.django import locks

    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="django_settings",
        PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""),
        MISTRI_TEST_PG_DB=throwaway_postgres.DB,
        MISTRI_TEST_PG_PORT=str(django_pg.port),
        MISTRI_TEST_NS=NAMESPACE,
    )
    task_id = uuid.uuid4().hex
    with locks().hold("admin:held", ttl=5, heartbeat=0.2):
        out = subprocess.run(
            [sys.executable, "-m", "django", "mistri_locks", "list", "admin:"],
            env=env, capture_output=True, text=True, timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert "lease admin:held" in out.stdout
    out = subprocess.run(
        [sys.executable, "-m", "django", "mistri_locks", "stop-task", task_id],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert locks().flag(f"job:{task_id}:stop")


def test_a_stale_fence_is_refused_inside_atomic(django_pg: throwaway_postgres.Server) -> None:
    from django.db import DatabaseError, connection, transaction

    from mistri_locks.integrations.django import leased, locks

    with connection.cursor() as c:
        c.execute("CREATE TABLE IF NOT EXISTS dj_reports (id text PRIMARY KEY, body text)")
    resource = f"dj-report:{uuid.uuid4().hex[:8]}"

    def write(fence: int, body: str) -> None:
        # The application's write and the fence check in one transaction.
        with transaction.atomic():
            with connection.cursor() as c:
                c.execute("SELECT mistri_locks.fence_check(%s, %s::bigint)", [resource, fence])
                c.execute(
                    "INSERT INTO dj_reports (id, body) VALUES (%s, %s) "
                    "ON CONFLICT (id) DO UPDATE SET body = excluded.body",
                    [resource, body],
                )

    def body() -> Any:
        with connection.cursor() as c:
            c.execute("SELECT body FROM dj_reports WHERE id = %s", [resource])
            return c.fetchone()

    @leased("dj-report", ttl=5, heartbeat=0.2)
    def report() -> None:
        lease = mistri_locks.current_lease()
        assert lease is not None
        write(lease.fence, "from A")
        # A pauses; an operator breaks its lease and B takes over and writes.
        other = locks().new_owner()
        assert other.break_lease("dj-report") and other.acquire("dj-report", 5)
        fence_b = other.fence("dj-report")
        assert fence_b is not None and fence_b > lease.fence
        write(fence_b, "from B")
        # A wakes up and writes with its old fence: refused, rolled back.
        with pytest.raises(DatabaseError, match="(?i)fence"):
            write(lease.fence, "from A, stale")
        assert body() == ("from B",)
        other.release("dj-report")

    report()
    assert body() == ("from B",)


def test_leased_threads_in_django_see_their_own_lease(django_pg: throwaway_postgres.Server) -> None:
    from mistri_locks.integrations.django import leased

    seen: dict[str, Any] = {}
    both = threading.Barrier(2, timeout=20)

    @leased("dj:{name}", ttl=5, heartbeat=0.2, on_conflict="raise")
    def work(name: str) -> None:
        both.wait()
        lease = mistri_locks.current_lease()
        seen[name] = None if lease is None else lease.key

    threads = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert seen == {"a": "dj:a", "b": "dj:b"}


def test_the_migration_creates_the_schema_in_the_default_database(
    django_pg: throwaway_postgres.Server,
) -> None:
    from django.core.management import call_command
    from django.db import connection
    from django.test import override_settings

    import mistri_locks.integrations.django as mld

    schema = f"dj_{uuid.uuid4().hex[:8]}"

    def fence_checks() -> int:
        with connection.cursor() as c:
            c.execute("SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                      "WHERE n.nspname = %s AND p.proname = 'fence_check'", [schema])
            return int(c.fetchone()[0])

    try:
        with override_settings(MISTRI_LOCKS={"NAMESPACE": NAMESPACE, "SCHEMA": schema}):
            mld.reset()
            assert mld.default_database_schema() == schema
            assert fence_checks() == 0
            call_command("migrate", "mistri_locks", verbosity=0)
            assert fence_checks() == 1, "migrate created the tables and fence_check"
            handle = mld.locks()
            assert handle.acquire("migrated", 5) and handle.release("migrated")
        with override_settings(MISTRI_LOCKS={"URL": "redis://127.0.0.1:1/0"}):
            assert mld.default_database_schema() is None  # not in the database: nothing to migrate
    finally:
        mld.reset()
        with connection.cursor() as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            c.execute("DELETE FROM django_migrations WHERE app = 'mistri_locks'")
