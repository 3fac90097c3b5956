"""``python manage.py billing_reconcile --period YYYY-MM``: a JSON report;
exit status 1 when anything differs (see ``invoicing.reconcile``)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from accounts.facade import ValidationFailed
from invoicing.reconcile import reconcile


class Command(BaseCommand):
    help = "Prove invoices equal their calls, credits stay within totals, ledgers add up."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--period", required=True, help="the month, YYYY-MM")

    def handle(self, *args, period: str, **options) -> None:
        try:
            report = reconcile(period)
        except ValidationFailed as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(json.dumps(report, indent=2, sort_keys=True))
        if not report["ok"]:
            raise SystemExit(1)
