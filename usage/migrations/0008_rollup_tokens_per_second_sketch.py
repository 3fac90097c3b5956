"""A sketch of output tokens per second on each rollup row, filled at ingest
(the marketplace's output speed). A bytea column with a constant default:
a catalogue change on PostgreSQL, no table rewrite; workers on the previous
code still insert rows. Rows written before it hold an empty sketch: the
figure starts counting when it is deployed (call records are not replayed)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("usage", "0007_call_upstream_cost")]

    operations = [
        migrations.AddField(
            model_name="rollup",
            name="tps_hist",
            field=models.BinaryField(default=b"", db_default=b""),
        )
    ]
