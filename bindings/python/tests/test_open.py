"""One entry point: ``mistri_locks.open(url, *, namespace, label, schema)``
opens every backend as its own class (a lease taken through it is the one
the backend's own constructor sees), an unknown scheme's error lists every
scheme, and each backend's constructor refuses another backend's URL."""

from __future__ import annotations

import pathlib
import uuid

import pytest

import mistri_locks


def ns() -> str:
    return f"mistri:test:{uuid.uuid4().hex}"


def key() -> str:
    return f"open-{uuid.uuid4().hex}"


def shared(a: mistri_locks.Locks, b: mistri_locks.Locks) -> None:
    k = key()
    assert a.acquire(k, 30)
    assert not b.acquire(k, 30), "the second handle must see the lease"
    assert a.release(k)


def test_memory() -> None:
    locks = mistri_locks.open("memory://", label="opener")
    assert isinstance(locks, mistri_locks.Memory)
    assert locks.label == "opener"
    shared(locks, locks.new_owner())


def test_a_path_and_a_file_url(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "locks.db"
    by_path = mistri_locks.open(str(db))
    by_url = mistri_locks.open(f"file://{db}")
    assert isinstance(by_path, mistri_locks.Local) and isinstance(by_url, mistri_locks.Local)
    assert by_url.path == db
    shared(by_path, by_url)
    shared(by_url, mistri_locks.Local(db))


def test_redis_with_a_namespace(redis_server) -> None:  # type: ignore[no-untyped-def]
    name = ns()
    locks = mistri_locks.open(redis_server.url, namespace=name, label="opener")
    assert isinstance(locks, mistri_locks.Redis)
    assert locks.namespace == name and locks.label == "opener"
    shared(locks, mistri_locks.Redis(redis_server.url, namespace=name))


def test_postgres_with_a_schema_and_its_dsn(postgres_server) -> None:  # type: ignore[no-untyped-def]
    name = ns()
    schema = f"open_{uuid.uuid4().hex[:8]}"
    locks = mistri_locks.open(postgres_server.url, namespace=name, schema=schema)
    assert isinstance(locks, mistri_locks.Postgres)
    # The schema option, not the URL, chose the tables.
    shared(locks, mistri_locks.Postgres(f"{postgres_server.url}?schema={schema}", namespace=name))
    shared(locks, mistri_locks.Postgres(postgres_server.url, schema=schema, namespace=name))
    with pytest.raises(ValueError, match="given twice"):
        mistri_locks.open(f"{postgres_server.url}?schema=a", schema="b")
    alias = postgres_server.url.replace("postgres://", "postgresql://", 1)
    assert isinstance(mistri_locks.open(alias, namespace=name), mistri_locks.Postgres)


def test_an_unknown_scheme_lists_every_scheme() -> None:
    with pytest.raises(mistri_locks.ConfigError) as e:
        mistri_locks.open("http://example.com")
    for scheme in ("memory://", "file://", "redis://", "rediss://", "redis+cluster://",
                   "redis+sentinel://", "postgres://", "postgresql://", "DSN"):
        assert scheme in str(e.value)


def test_schema_is_for_postgres_only() -> None:
    with pytest.raises(mistri_locks.ConfigError, match="Postgres option"):
        mistri_locks.open("memory://", schema="s")


def test_each_constructor_refuses_another_backends_url(redis_server, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(mistri_locks.ConfigError, match="Redis constructor takes redis://") as e:
        mistri_locks.Redis("postgres://u:secret@127.0.0.1:1/db")
    assert "open(url)" in str(e.value) and "secret" not in str(e.value)
    with pytest.raises(mistri_locks.ConfigError, match="Redis constructor"):
        mistri_locks.Redis(str(tmp_path / "locks.db"))
    with pytest.raises(mistri_locks.ConfigError, match="Postgres constructor takes postgres://"):
        mistri_locks.Postgres(redis_server.url)
    with pytest.raises(mistri_locks.ConfigError, match="Local constructor takes"):
        mistri_locks.Local(redis_server.url)
