from django.db import migrations


def drop_request_id_pattern_index(apps, schema_editor):
    """Django adds a ``varchar_pattern_ops`` index to every indexed CharField on
    PostgreSQL. Nothing searches request ids by prefix, and a fifth index on
    the hottest table costs ingest about a fifth of its insert time."""
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cur:
        cur.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'usage_call' "
            "AND indexname LIKE 'usage_call_request_id_%%_like'"
        )
        for (name,) in cur.fetchall():
            cur.execute(f'DROP INDEX IF EXISTS "{name}"')


def seed(apps, schema_editor):
    from usage.seed import seed_catalog

    seed_catalog(apps.get_model("usage", "CatalogModel"), apps.get_model("usage", "Price"))


class Migration(migrations.Migration):
    dependencies = [("usage", "0001_initial")]

    operations = [
        migrations.RunPython(drop_request_id_pattern_index, migrations.RunPython.noop),
        migrations.RunPython(seed, migrations.RunPython.noop),
    ]
