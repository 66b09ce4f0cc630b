"""What only the MySQL backend says, on the session's throwaway MariaDB (the
contract runs there through ``conftest.BACKENDS``): fencing at the
resource from a plain DB-API connection (PyMySQL), the way an application
writes, as test_postgres.py does with psycopg."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pymysql
import pytest

import mistri_locks
import throwaway_mariadb


def app_connection(server: throwaway_mariadb.Server) -> Any:
    """The application's own connection: another client, another user's
    view of the same database (not the backend's connections)."""
    return pymysql.connect(host="127.0.0.1", port=server.port, user=throwaway_mariadb.USER,
                           password=throwaway_mariadb.PASSWORD, database=throwaway_mariadb.DB,
                           autocommit=False)


def write_fenced(conn: Any, resource: str, fence: int, body: str) -> None:
    """The fence check and the write in one transaction; a stale fence
    raises and the write is rolled back."""
    try:
        with conn.cursor() as c:
            c.execute("CALL mistri_fence_check(%s, %s)", (resource, fence))
            c.execute(
                "INSERT INTO reports (id, body) VALUES (%s, %s) ON DUPLICATE KEY UPDATE body = VALUES(body)",
                (resource, body),
            )
        conn.commit()
    except Exception:
        conn.rollback()
        raise


def test_fence_check_refuses_a_stale_holders_write_from_a_dbapi_connection(
    mariadb_server: throwaway_mariadb.Server,
) -> None:
    ns = f"mistri:test:{uuid.uuid4().hex}"
    old = mistri_locks.open(mariadb_server.url, namespace=ns)
    new = mistri_locks.open(mariadb_server.url, namespace=ns)
    resource = f"report:{uuid.uuid4().hex[:8]}"
    conn = app_connection(mariadb_server)
    try:
        with conn.cursor() as c:
            c.execute("CREATE TABLE IF NOT EXISTS reports (id VARCHAR(64) PRIMARY KEY, body TEXT) ENGINE=InnoDB")
        conn.commit()

        assert old.acquire(resource, 0.5)  # never renewed: it lapses
        stale = old.fence(resource)
        assert stale is not None
        write_fenced(conn, resource, stale, "from the first holder")
        time.sleep(0.8)  # past its ttl: the lease is free by the database's clock
        assert new.acquire(resource, 10)
        fresh = new.fence(resource)
        assert fresh is not None and fresh > stale
        write_fenced(conn, resource, fresh, "from the second holder")

        with pytest.raises(pymysql.err.OperationalError) as info:
            write_fenced(conn, resource, stale, "late write of the first holder")
        assert "ML409" in str(info.value)
        with conn.cursor() as c:
            c.execute("SELECT body FROM reports WHERE id = %s", (resource,))
            assert c.fetchone() == ("from the second holder",), "the stale write was rolled back"
        conn.rollback()
        # The current holder still writes after the refusal.
        write_fenced(conn, resource, fresh, "again from the second holder")
        assert new.release(resource)
    finally:
        conn.close()
