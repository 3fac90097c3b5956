"""On PostgreSQL, ``usage_call`` becomes a table range-partitioned by month on
``started_at`` (see ``usage.partitions``); the primary key becomes
``(request_id, started_at)``. Rows, columns and index names are kept; one
transaction. SQLite keeps its one plain table: a no-op there. The model
state does not change (Django still sees ``request_id`` as the key)."""

from django.db import migrations


def partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from usage.partitions import to_partitioned

    with schema_editor.connection.cursor() as cur:
        to_partitioned(cur)


def unpartition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from usage.partitions import to_plain

    with schema_editor.connection.cursor() as cur:
        to_plain(cur)


class Migration(migrations.Migration):
    atomic = True

    dependencies = [
        ("usage", "0009_call_attribution"),
    ]

    operations = [
        migrations.RunPython(partition, unpartition, elidable=False),
    ]
