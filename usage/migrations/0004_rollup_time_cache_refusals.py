"""Rollup sums for where time goes (queue, gateway overhead, upstream), the
response cache apart from the prefix cache, and refusals by cause.

Each is a bigint column with a constant default: on PostgreSQL 11 and later
adding one is a catalogue change (no table rewrite, a brief lock only), and
the DEFAULT is kept so workers on the previous code can still insert rows.
Rows written before this migration hold 0: these sums start counting when it
is deployed; they are not back-filled from call records (which retention may
already have deleted)."""

from django.db import migrations, models

NEW_SUMS = (
    "queue_sum_us",
    "overhead_sum_us",
    "upstream_sum_us",
    "response_cache_calls",
    "rate_limited_calls",
    "cap_refused_calls",
    "queue_refused_calls",
)


class Migration(migrations.Migration):
    dependencies = [("usage", "0003_rollup_storage")]

    operations = [
        migrations.AddField(
            model_name="rollup",
            name=name,
            field=models.BigIntegerField(default=0, db_default=0),
        )
        for name in NEW_SUMS
    ]
