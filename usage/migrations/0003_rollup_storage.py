"""Rollup rows are updated by every ingest batch that touches their hour, so
on PostgreSQL the table churns dead tuples far faster than autovacuum's
defaults (20 % of the table) clean them: reads then wade through dead
versions (a 30-day series read 17,000 pages instead of 100). Vacuum it after
a fixed number of dead rows, and leave room on each page so an update can
stay on its page (a HOT update: no index entries to write or clean)."""

from django.db import migrations

TUNED = (
    "fillfactor = 70, autovacuum_vacuum_scale_factor = 0, "
    "autovacuum_vacuum_threshold = 5000, autovacuum_analyze_scale_factor = 0.05"
)


def tune(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE usage_rollup SET ({TUNED})")


def untune(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "ALTER TABLE usage_rollup RESET (fillfactor, autovacuum_vacuum_scale_factor, "
            "autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor)"
        )


class Migration(migrations.Migration):
    dependencies = [("usage", "0002_seed_catalog")]

    operations = [migrations.RunPython(tune, untune)]
