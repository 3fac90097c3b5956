"""Payment references unique per organization (see 0004 for the duplicates)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("invoicing", "0004_payment_reference_paid_on")]

    operations = [
        migrations.AddConstraint(
            model_name="payment",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    models.Q(("reference", ""), _negated=True),
                    models.Q(("method", "stripe"), _negated=True),
                ),
                fields=("organization", "reference"),
                name="invoicing_payment_reference_unique",
            ),
        ),
    ]
