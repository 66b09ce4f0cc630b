"""The Python face of the Postgres backend: its constructor (URL, schema,
errors), the DDL it hands out, and fencing at the resource: an
application's own psycopg transaction refusing a stale holder's write with
``mistri_locks.fence_check``. The contract cases run on Postgres through
conftest.BACKENDS (test_contract.py)."""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest

import mistri_locks


def ns() -> str:
    return f"mistri:test:{uuid.uuid4().hex}"


def test_schema_given_twice_is_a_value_error(postgres_server) -> None:
    with pytest.raises(ValueError, match="schema"):
        mistri_locks.Postgres(postgres_server.url + "?schema=a", schema="b")
    with pytest.raises(ValueError, match="schema"):
        mistri_locks.Postgres(postgres_server.url + "?sslmode=disable&schema=a", schema="a")


@pytest.mark.parametrize(
    "url",
    ["not a url", "postgres://127.0.0.1:notaport/db", "redis://127.0.0.1:6379/0",
     "postgres://127.0.0.1/db?sslmode=bogus"],
)
def test_bad_urls_are_config_errors(url: str) -> None:
    with pytest.raises(mistri_locks.ConfigError):
        mistri_locks.Postgres(url)


def test_messages_and_repr_never_carry_the_password(postgres_server) -> None:
    with pytest.raises(mistri_locks.Error) as info:
        # Nothing listens on port 1: the first operation (or opening) fails.
        mistri_locks.Postgres("postgres://app:s3cret@127.0.0.1:1/db").held("k")
    assert "s3cret" not in str(info.value)
    locks = mistri_locks.Postgres(postgres_server.url.replace("postgres@", "postgres:s3cret@"))
    assert "s3cret" not in repr(locks)
    assert repr(locks) == '<mistri_locks.Postgres namespace="mistri:locks">'


def test_schema_argument_puts_the_tables_there(postgres_server) -> None:
    schema = f"app_locks_{uuid.uuid4().hex[:8]}"
    a = mistri_locks.Postgres(postgres_server.url, schema=schema, namespace=ns())
    assert a.acquire("job", 5)
    assert a.namespace.startswith("mistri:test:")
    tables = postgres_server.psql(
        f"SELECT count(*) FROM information_schema.tables WHERE table_schema = '{schema}'"
    )
    assert int(tables) >= 1
    # The same schema through the URL is the same store.
    b = mistri_locks.Postgres(f"{postgres_server.url}?schema={schema}", namespace=a.namespace)
    assert b.held("job") and not b.acquire("job", 5)
    # Another schema is another store.
    c = mistri_locks.Postgres(postgres_server.url, namespace=a.namespace)
    assert not c.held("job")
    assert a.release("job")


def test_schema_sql_is_the_ddl_and_runs_twice(postgres_server) -> None:
    schema = f"ddl_{uuid.uuid4().hex[:8]}"
    sql = mistri_locks.Postgres.schema_sql(schema)
    assert schema in sql and "fence_check" in sql
    assert mistri_locks.Postgres.schema_sql() == mistri_locks.Postgres.schema_sql("mistri_locks")
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute(sql)
        conn.execute(sql)  # idempotent
    locks = mistri_locks.Postgres(postgres_server.url, schema=schema, namespace=ns())
    assert locks.acquire("after-ddl", 5) and locks.release("after-ddl")
    with pytest.raises((ValueError, mistri_locks.ConfigError)):
        mistri_locks.Postgres.schema_sql('bad"name')


def write_fenced(url: str, resource: str, fence: int, value: str) -> None:
    """What an application does: its write and the fence check in one
    transaction, so a stale holder's write is rolled back whole."""
    with psycopg.connect(url) as conn:
        with conn.transaction():
            conn.execute("SELECT mistri_locks.fence_check(%s, %s::bigint)", (resource, fence))
            conn.execute(
                "INSERT INTO reports (id, body) VALUES (%s, %s) "
                "ON CONFLICT (id) DO UPDATE SET body = excluded.body",
                (resource, value),
            )


def test_fence_check_refuses_the_stale_holders_write(postgres_server) -> None:
    url = postgres_server.url
    namespace = ns()
    a = mistri_locks.Postgres(url, namespace=namespace)
    b = mistri_locks.Postgres(url, namespace=namespace)
    assert a.acquire("report", 5)  # creates the schema (and fence_check)
    a.release("report")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS reports (id text PRIMARY KEY, body text)")
    resource = f"report:{uuid.uuid4().hex[:8]}"

    # A holds, writes; then its lease lapses (a pause, say) and B takes over.
    assert a.acquire("report", 0.3)
    fence_a = a.fence("report")
    assert fence_a is not None
    write_fenced(url, resource, fence_a, "from A")
    time.sleep(0.6)
    assert b.acquire("report", 5)
    fence_b = b.fence("report")
    assert fence_b is not None and fence_b > fence_a
    write_fenced(url, resource, fence_b, "from B")

    # A wakes up and writes with its old fence: refused, rolled back.
    with pytest.raises(psycopg.Error) as refused:
        write_fenced(url, resource, fence_a, "from A, stale")
    assert "fence" in str(refused.value).lower()
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT body FROM reports WHERE id = %s", (resource,)).fetchone()
    assert row == ("from B",)
    # B's own writes keep going; a hold's fence works the same way.
    write_fenced(url, resource, fence_b, "from B again")
    assert b.release("report")
    h = a.hold("report", ttl=5, heartbeat=1)
    assert h is not None and h.fence > fence_b
    with h:
        write_fenced(url, resource, h.fence, "from A's hold")
    with pytest.raises(psycopg.Error):
        write_fenced(url, resource, fence_b, "from B, stale")
