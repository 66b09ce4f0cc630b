"""Creates the lease tables and ``fence_check`` in the ``default``
database when the settings keep the leases there (PostgreSQL, no ``URL``):
``manage.py migrate`` at deploy time, so an application role without DDL
rights needs nothing at run time. Idempotent (the DDL is
``Postgres.schema_sql()``, which ``mistri-locks schema`` prints too); a
no-op for any other backend or database."""

from __future__ import annotations

from typing import Any

from django.db import migrations  # type: ignore[import-untyped, import-not-found, unused-ignore]


def create_schema(apps: Any, schema_editor: Any) -> None:
    from mistri_locks import Postgres
    from mistri_locks.integrations.django import default_database_schema

    schema = default_database_schema()
    if schema is None or schema_editor.connection.alias != "default":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(Postgres.schema_sql(schema))


class Migration(migrations.Migration):  # type: ignore[misc]
    # The DDL runs its own transaction (BEGIN ... COMMIT).
    atomic = False
    dependencies: list[Any] = []
    operations = [migrations.RunPython(create_schema, migrations.RunPython.noop)]
