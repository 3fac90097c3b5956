"""The language of an organization's invoice and credit-note PDFs (issue 18)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("invoicing", "0005_payment_reference_unique")]

    operations = [
        migrations.AddField(
            model_name="billingprofile",
            name="document_language",
            field=models.CharField(
                choices=[("en", "English"), ("zh-hans", "简体中文")], default="en", max_length=16
            ),
        ),
    ]
