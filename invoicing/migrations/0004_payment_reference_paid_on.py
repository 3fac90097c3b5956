"""Payment references unique per organization, and the day a payment was made.

Before the constraint is added, references recorded twice in one organization
(by hand: bank transfer or other; card payments are not constrained) are made
distinct, deterministically: the earliest payment (lowest id) keeps the
reference, every later one gets `` [duplicate #<its id>]`` appended (cut so
the whole fits in 128 characters). Nothing else about those rows changes, so
amounts, invoices and the ledger are untouched; finance can find them by the
suffix. The constraint itself is the next migration (its own transaction:
PostgreSQL alters no table with updates pending in the same one). ``paid_on`` of existing succeeded payments is their creation day in
the organization's time zone."""

from collections import defaultdict
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.db import migrations, models

SUFFIX = " [duplicate #{pk}]"


def _zone(name):
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def suffix_duplicates(apps, schema_editor):
    Payment = apps.get_model("invoicing", "Payment")
    seen = defaultdict(list)
    rows = (
        Payment.objects.exclude(reference="")
        .exclude(method="stripe")
        .order_by("pk")
        .values_list("pk", "organization_id", "reference")
    )
    for pk, org_id, reference in rows.iterator():
        seen[(org_id, reference)].append(pk)
    for (_, reference), pks in seen.items():
        for pk in pks[1:]:
            tail = SUFFIX.format(pk=pk)
            Payment.objects.filter(pk=pk).update(reference=reference[: 128 - len(tail)] + tail)


def backfill_paid_on(apps, schema_editor):
    Payment = apps.get_model("invoicing", "Payment")
    for payment in (
        Payment.objects.filter(status="succeeded", paid_on__isnull=True)
        .select_related("organization")
        .only("pk", "created_at", "organization__timezone")
        .iterator()
    ):
        day = payment.created_at.astimezone(_zone(payment.organization.timezone)).date()
        Payment.objects.filter(pk=payment.pk).update(paid_on=day)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_gateway_limits"),
        ("invoicing", "0003_cards"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="payment",
            name="paid_on",
            field=models.DateField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="creditnote",
            name="effect",
            field=models.CharField(
                choices=[
                    ("reduce_due", "Reduces the amount due"),
                    ("refund_card", "Refunded to the card"),
                    ("refund_balance", "Credited to the prepaid balance"),
                    ("refund_manual", "Refund by bank transfer"),
                ],
                max_length=16,
            ),
        ),
        migrations.RunPython(suffix_duplicates, migrations.RunPython.noop),
        migrations.RunPython(backfill_paid_on, migrations.RunPython.noop),
    ]
