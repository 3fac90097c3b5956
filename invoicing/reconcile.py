"""The reconciliation finance can run any time: for every organization with
calls, an invoice or a ledger in a month, prove that the invoice's usage
lines equal the sum of the month's billed call costs (load-test calls marked
"not billed" are on no invoice), that its lines add up to its
total, that credit notes stay within the total and match what the invoice
records, and that the ledger balance is the sum of its entries."""

from __future__ import annotations

from django.db.models import Q, Sum

from accounts.facade import Organization
from invoicing.models import CreditNote, Invoice, InvoiceStatus, LedgerEntry, LineKind
from invoicing.selectors import prepaid_balance
from invoicing.services._common import parse_period, period_bounds
from usage.facade import billed_cost, has_billed_calls


def _org_report(org: Organization, period: str) -> dict:
    start, end = period_bounds(period, org.timezone)
    in_currency, other_currency = billed_cost(org.pk, start, end, org.currency)
    problems: list[str] = []
    report: dict = {
        "organization_id": org.pk,
        "organization": org.name,
        "currency": org.currency,
        "call_costs": in_currency,
    }
    if other_currency:
        problems.append(f"{other_currency} calls rated in another currency")
    invoice = (
        Invoice.objects.filter(organization=org, period=period)
        .exclude(status=InvoiceStatus.VOID)
        .first()
    )
    if invoice is None:
        report["invoice"] = None
        if in_currency:
            problems.append(f"calls costing {in_currency} are on no invoice")
    else:
        lines = invoice.lines.all()
        usage = sum(ln.amount for ln in lines if ln.kind == LineKind.USAGE)
        lines_total = sum(ln.amount for ln in lines if ln.kind != LineKind.CREDITS)
        notes = CreditNote.objects.filter(invoice=invoice).aggregate(
            s=Sum("amount"), m=Sum("amount_minor")
        )
        report.update(
            invoice=invoice.number or f"draft #{invoice.pk}",
            status=invoice.status,
            usage_lines=usage,
            difference=usage - in_currency,
            total=invoice.total,
            lines_total=lines_total,
            credited=notes["s"] or 0,
        )
        if usage != in_currency:
            problems.append(f"usage lines {usage} != call costs {in_currency}")
        if usage != invoice.usage_amount:
            problems.append("usage lines differ from the invoice's usage amount")
        if lines_total != invoice.total:
            problems.append(f"lines add up to {lines_total}, the total is {invoice.total}")
        if (notes["s"] or 0) != invoice.credited or (notes["m"] or 0) != invoice.credited_minor:
            problems.append("credit notes differ from what the invoice records")
        if invoice.credited > invoice.total:
            problems.append(f"credited {invoice.credited} exceeds the total {invoice.total}")
    entries = list(LedgerEntry.objects.filter(organization=org).values_list("amount", flat=True))
    balance = prepaid_balance(org.pk)
    report["ledger_entries"] = len(entries)
    report["ledger_balance"] = balance
    if balance != sum(entries):
        problems.append(f"ledger balance {balance} != sum of entries {sum(entries)}")
    report["problems"] = problems
    report["ok"] = not problems
    return report


def reconcile(period: str) -> dict:
    parse_period(period)
    orgs = []
    for org in Organization.objects.order_by("pk"):
        start, end = period_bounds(period, org.timezone)
        has = (
            has_billed_calls(org.pk, start, end)
            or Invoice.objects.filter(Q(organization=org) & Q(period=period)).exists()
            or LedgerEntry.objects.filter(organization=org).exists()
        )
        if has:
            orgs.append(_org_report(org, period))
    return {
        "period": period,
        "organizations": orgs,
        "differences": sum(not o["ok"] for o in orgs),
        "ok": all(o["ok"] for o in orgs),
    }
