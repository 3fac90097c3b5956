"""Invoices, their lines, credit notes, payments and the monthly run.

Money columns are integer micro-units of ``currency`` except the ``*_minor``
columns, which hold the currency's minor unit (cents), produced once by
``invoicing.money.to_minor``."""

from __future__ import annotations

import re

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone as tz
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from console.kernel.choices import TextChoices
from console.kernel.money import format_amount
from invoicing.models.sla import sla_credit_description


class InvoiceStatus(TextChoices):
    DRAFT = "draft", _("Draft")
    FINALIZED = "finalized", _("Finalized")
    PAID = "paid", _("Paid")
    VOID = "void", _("Void")
    UNCOLLECTIBLE = "uncollectible", _("Uncollectible")


class InvoiceSequence(models.Model):
    """The last invoice number taken in a year; locked (``select_for_update``)
    by finalization, so numbers are gapless and never shared."""

    year = models.PositiveSmallIntegerField(unique=True)
    last_number = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.year}: {self.last_number}"


class Invoice(models.Model):
    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.PROTECT, related_name="invoices"
    )
    # The calendar month in the organization's time zone, as "YYYY-MM", and its bounds.
    period = models.CharField(max_length=7)
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    currency = models.CharField(max_length=3)
    status = models.CharField(
        max_length=16, choices=InvoiceStatus.choices, default=InvoiceStatus.DRAFT
    )
    number = models.CharField(max_length=32, unique=True, null=True, blank=True)
    usage_amount = models.BigIntegerField(default=0)
    adjustment_amount = models.BigIntegerField(default=0)
    subtotal = models.BigIntegerField(default=0)
    discount_amount = models.BigIntegerField(default=0)
    tax_amount = models.BigIntegerField(default=0)
    total = models.BigIntegerField(default=0)
    # Paid from the prepaid balance (prepaid organizations' usage was debited per batch).
    credits_applied = models.BigIntegerField(default=0)
    # What the customer owes before credit notes and payments: total - credits applied.
    amount_due_initial = models.BigIntegerField(default=0)
    amount_due_initial_minor = models.BigIntegerField(default=0)
    # Sum of credit notes (micro and minor, kept under the invoice's row lock).
    credited = models.BigIntegerField(default=0)
    credited_minor = models.BigIntegerField(default=0)
    # The part of the credit notes that reduced what was due (the rest was refunded).
    due_reduced_minor = models.BigIntegerField(default=0)
    # Sum of succeeded payments, in minor units (refunds are credit notes' business).
    paid_minor = models.BigIntegerField(default=0)
    tax_rate_ppm = models.PositiveIntegerField(default=0)
    discount_ppm = models.PositiveIntegerField(default=0)
    # The buyer as it was at finalization (immutable afterwards).
    buyer = models.JSONField(default=dict, blank=True)
    calls = models.BigIntegerField(default=0)
    issued_at = models.DateTimeField(null=True, blank=True)
    due_at = models.DateTimeField(null=True, blank=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    voided_at = models.DateTimeField(null=True, blank=True)
    refreshed_at = models.DateTimeField(default=tz.now)
    created_at = models.DateTimeField(default=tz.now)
    pdf = models.BinaryField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ("-period_start", "-id")
        constraints = [
            # One live invoice per organization and month; a voided one can be re-issued.
            models.UniqueConstraint(
                fields=["organization", "period"],
                condition=~Q(status="void"),
                name="invoicing_invoice_one_live_per_period",
            )
        ]
        indexes = [
            models.Index(fields=["organization", "-period_start"]),
            models.Index(fields=["status", "period"]),
        ]

    def __str__(self) -> str:
        return self.number or f"draft {self.organization_id} {self.period}"

    @property
    def is_finalized(self) -> bool:
        return self.status != InvoiceStatus.DRAFT

    @property
    def amount_due_minor(self) -> int:
        """What is still to be paid, in minor units (never below zero)."""
        if self.status in (InvoiceStatus.VOID, InvoiceStatus.UNCOLLECTIBLE):
            return 0
        return max(0, self.amount_due_initial_minor - self.due_reduced_minor - self.paid_minor)


class LineKind(TextChoices):
    USAGE = "usage", _("Usage")
    ADJUSTMENT = "adjustment", _("Re-rating adjustment")
    DISCOUNT = "discount", _("Discount")
    TAX = "tax", _("Tax")
    CREDITS = "credits", _("Credits applied")


class TokenClass(TextChoices):
    INPUT = "input", _("Input")
    CACHE_READ = "cache_read", _("Cache read")
    CACHE_WRITE = "cache_write", _("Cache write")
    OUTPUT = "output", _("Output")


class InvoiceLine(models.Model):
    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="lines")
    position = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=LineKind.choices)
    description = models.CharField(max_length=255)
    model = models.CharField(max_length=128, blank=True)
    token_class = models.CharField(max_length=16, choices=TokenClass.choices, blank=True)
    price_id = models.BigIntegerField(null=True, blank=True)
    quantity = models.BigIntegerField(default=0)
    # Effective price per million tokens (list price times the discount it was rated with).
    unit_price_per_mtok = models.BigIntegerField(null=True, blank=True)
    amount = models.BigIntegerField()
    # The re-rating adjustments this line bills (ids), for adjustment lines.
    adjustment_ids = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ("invoice", "position")
        constraints = [
            models.UniqueConstraint(fields=["invoice", "position"], name="invoicing_line_position")
        ]

    def __str__(self) -> str:
        return self.description


def line_description(line) -> str:
    """A line's description for a page in the active language: a usage line
    (model and token class) is worded again, as ``compute`` words it in
    English (``sim-chat · input tokens``); any other line (adjustments,
    discount, tax, credits; a credit note's lines) keeps its stored text."""
    kind, model = getattr(line, "kind", ""), getattr(line, "model", "")
    token_class = getattr(line, "token_class", "")
    text = line.description
    if kind == LineKind.USAGE and model and token_class in TokenClass.values:
        return _usage_text(model, token_class)
    if kind == LineKind.DISCOUNT and text.startswith("Discount "):
        return gettext("Discount %(rate)s") % {"rate": text.removeprefix("Discount ")}
    if kind == LineKind.TAX and text.startswith("Tax "):
        return gettext("Tax %(rate)s") % {"rate": text.removeprefix("Tax ")}
    if kind == LineKind.CREDITS and text == "Paid from the prepaid balance":
        return gettext("Paid from the prepaid balance")
    found = _ADJUSTMENT_TEXT.fullmatch(text) if kind == LineKind.ADJUSTMENT else None
    if found:
        worded = gettext("Re-rating adjustment #%(run)s (%(calls)s calls)") % {
            "run": found["run"],
            "calls": found["calls"],
        }
        return worded + (f": {found['reason']}" if found["reason"] else "")
    return text


def _usage_text(model: str, token_class: str) -> str:
    label = str(TokenClass(token_class).label).lower()
    return gettext("%(model)s · %(token_class)s tokens") % {"model": model, "token_class": label}


_USAGE_TEXT = re.compile(r"(?P<model>.+) · (?P<label>input|cache read|cache write|output) tokens")
_INCIDENT_TEXT = re.compile(
    r"Incident credit: (?P<calls>\d+) calls, status (?P<low>\d+)-(?P<high>\d+), "
    r"(?:node (?P<node>\d+)|all nodes), (?P<start>[\d-]+ [\d:]+) to (?P<end>[\d-]+ [\d:]+) UTC"
)


def credit_description(text: str) -> str:
    """A credit note line's description (as the services word it, in
    English) for a page in the active language; anything else as stored."""
    if text == "Credit":
        return gettext("Credit")
    if text.startswith("Credit: "):
        inner = text.removeprefix("Credit: ")
        if found := _USAGE_TEXT.fullmatch(inner):
            inner = _usage_text(found["model"], found["label"].replace(" ", "_"))
        return gettext("Credit: %(line)s") % {"line": inner}
    if text == "Discount on the credited amount":
        return gettext("Discount on the credited amount")
    if text.startswith("Tax ") and text.endswith(" on the credited amount"):
        rate = text.removeprefix("Tax ").removesuffix(" on the credited amount")
        return gettext("Tax %(rate)s on the credited amount") % {"rate": rate}
    if found := _INCIDENT_TEXT.fullmatch(text):
        where = (
            gettext("node %(node)s") % {"node": found["node"]}
            if found["node"]
            else gettext("all nodes")
        )
        return gettext(
            "Incident credit: %(calls)s calls, status %(low)s-%(high)s, %(where)s,"
            " %(start)s to %(end)s UTC"
        ) % {**found.groupdict(), "where": where}
    return sla_credit_description(text) or text


# ``compute``'s wording of an adjustment line: run, calls, and the reason if any.
_ADJUSTMENT_TEXT = re.compile(
    r"Re-rating adjustment #(?P<run>\d+) \((?P<calls>\d+) calls\)(?:: (?P<reason>.*))?", re.S
)


class InvoiceEvent(models.Model):
    """Everything that happened to an invoice that a customer or auditor may ask about."""

    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=32)
    params = models.JSONField(default=dict, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=tz.now)

    class Meta:
        ordering = ("created_at", "id")

    def __str__(self) -> str:
        return f"{self.invoice_id} {self.type}"


class RunStatus(TextChoices):
    IN_PROGRESS = "in_progress", _("In progress")
    DONE = "done", _("Done")


class InvoiceRun(models.Model):
    """The monthly drafting of every organization's invoice. Organizations are
    processed in id order, one transaction each; ``processed_through`` is the
    last organization id done, so a rerun after a crash continues there."""

    period = models.CharField(max_length=7, unique=True)
    status = models.CharField(
        max_length=16, choices=RunStatus.choices, default=RunStatus.IN_PROGRESS
    )
    processed_through = models.BigIntegerField(default=0)
    drafted = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(default=tz.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"run {self.period} ({self.status})"


class PaymentMethod(TextChoices):
    STRIPE = "stripe", _("Card (Stripe)")
    BANK_TRANSFER = "bank_transfer", _("Bank transfer")
    PREPAID = "prepaid_balance", _("Prepaid balance")
    OTHER = "other", _("Other")


class PaymentKind(TextChoices):
    INVOICE = "invoice", _("Invoice payment")
    TOP_UP = "top_up", _("Top-up")
    REFUND = "refund", _("Refund")


class PaymentStatus(TextChoices):
    PENDING = "pending", _("Pending")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    DISPUTED = "disputed", _("Disputed")


class Payment(models.Model):
    """Money that moved, or is meant to: an invoice payment, a top-up or a
    refund. Amounts are in the currency's minor unit (what Stripe moves)."""

    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.PROTECT, related_name="payments"
    )
    invoice = models.ForeignKey(
        Invoice, null=True, blank=True, on_delete=models.PROTECT, related_name="payments"
    )
    credit_note = models.ForeignKey(
        "invoicing.CreditNote",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="payments",
    )
    kind = models.CharField(max_length=16, choices=PaymentKind.choices)
    method = models.CharField(max_length=16, choices=PaymentMethod.choices)
    status = models.CharField(
        max_length=16, choices=PaymentStatus.choices, default=PaymentStatus.PENDING
    )
    currency = models.CharField(max_length=3)
    amount_minor = models.BigIntegerField()
    # A payment received or paid by hand (bank transfer, other) is known by its
    # reference: unique in the organization (``invoicing_payment_reference_unique``),
    # so the same transfer cannot be recorded twice. Card payments repeat the
    # invoice number (a failed attempt and its retry) and are not constrained.
    reference = models.CharField(max_length=128, blank=True)
    # The day the money moved (received, or paid out for a refund), as finance
    # recorded it or Stripe confirmed it; null while pending.
    paid_on = models.DateField(null=True, blank=True)
    stripe_payment_intent_id = models.CharField(max_length=64, blank=True, db_index=True)
    stripe_refund_id = models.CharField(max_length=64, blank=True)
    failure_message = models.CharField(max_length=255, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    # The console form's one-time token for a card top-up: a second submit
    # of the same form (a double click) finds this payment instead of
    # charging the card again.
    request_key = models.CharField(max_length=64, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=tz.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-created_at", "-id")
        indexes = [models.Index(fields=["organization", "-created_at"])]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "request_key"],
                condition=~Q(request_key=""),
                name="invoicing_payment_request_key_unique",
            ),
            models.UniqueConstraint(
                fields=["organization", "reference"],
                condition=~Q(reference="") & ~Q(method="stripe"),
                name="invoicing_payment_reference_unique",
            ),
        ]

    def __str__(self) -> str:
        amount = format_amount(self.amount_minor, self.currency, unit="minor")
        return f"{self.kind} {amount} ({self.status})"


class CreditNoteEffect(TextChoices):
    """What a credit note did, in the customer's words (the labels are on
    invoices, credit notes and their PDFs)."""

    REDUCE_DUE = "reduce_due", _("Reduces the amount due")
    REFUND_CARD = "refund_card", _("Refunded to the card")
    REFUND_BALANCE = "refund_balance", _("Credited to the prepaid balance")
    REFUND_MANUAL = "refund_manual", _("Refund by bank transfer")


class CreditNote(models.Model):
    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="credit_notes")
    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.PROTECT, related_name="credit_notes"
    )
    number = models.CharField(max_length=40, unique=True)
    sequence = models.PositiveSmallIntegerField()
    currency = models.CharField(max_length=3)
    amount = models.BigIntegerField()
    amount_minor = models.BigIntegerField()
    # Of the minor amount: how much reduced what was due, how much is refunded.
    due_reduction_minor = models.BigIntegerField(default=0)
    refund_minor = models.BigIntegerField(default=0)
    effect = models.CharField(max_length=16, choices=CreditNoteEffect.choices)
    reason = models.TextField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=tz.now)

    class Meta:
        ordering = ("-created_at", "-id")
        constraints = [
            models.UniqueConstraint(fields=["invoice", "sequence"], name="invoicing_cn_sequence"),
            models.CheckConstraint(condition=Q(amount__gt=0), name="invoicing_cn_positive"),
        ]

    def __str__(self) -> str:
        return self.number


class CreditNoteLine(models.Model):
    credit_note = models.ForeignKey(CreditNote, on_delete=models.CASCADE, related_name="lines")
    invoice_line = models.ForeignKey(
        InvoiceLine, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    description = models.CharField(max_length=255)
    amount = models.BigIntegerField()
    # For an incident credit: the calls it covers.
    request_ids = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return self.description


class StripeEvent(models.Model):
    """Every Stripe webhook event received, by id: a replay finds it and does nothing."""

    event_id = models.CharField(max_length=255, unique=True)
    type = models.CharField(max_length=64)
    payload = models.JSONField()
    handled = models.BooleanField(default=False)
    outcome = models.CharField(max_length=255, blank=True)
    received_at = models.DateTimeField(default=tz.now)

    class Meta:
        ordering = ("-received_at",)

    def __str__(self) -> str:
        return f"{self.event_id} {self.type}"
