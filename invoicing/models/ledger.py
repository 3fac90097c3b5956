"""The prepaid balance: an append-only ledger per organization. The balance
is the sum of the entries; nothing is ever updated or deleted (corrections
are new entries)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone as tz
from django.utils.translation import gettext_lazy as _

from console.kernel.choices import TextChoices
from console.kernel.money import format_amount


class LedgerKind(TextChoices):
    TOP_UP = "top_up", _("Top-up")
    USAGE = "usage", _("Usage")
    REFUND = "refund", _("Refund")
    GRANT = "grant", _("Grant")
    ADJUSTMENT = "adjustment", _("Adjustment")
    CREDIT_NOTE = "credit_note", _("Credit note")


class LedgerEntry(models.Model):
    """One movement of an organization's prepaid balance, in signed micro-units.

    ``reference`` makes each movement idempotent: the same (organization, kind,
    reference) can be written once (a top-up's payment intent, an ingest
    batch's digest, a credit note's number)."""

    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.PROTECT, related_name="ledger_entries"
    )
    kind = models.CharField(max_length=16, choices=LedgerKind.choices)
    amount = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    reference = models.CharField(max_length=128)
    reason = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=tz.now)

    class Meta:
        ordering = ("-created_at", "-id")
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "kind", "reference"], name="invoicing_ledger_unique_ref"
            )
        ]
        indexes = [models.Index(fields=["organization", "-created_at", "-id"])]

    def __str__(self) -> str:
        sign = "+" if self.amount > 0 else ""
        amount = format_amount(self.amount, self.currency)
        return f"{self.organization_id} {self.kind} {sign}{amount}"


class DocumentLanguage(TextChoices):
    """The language of an organization's invoice and credit-note PDFs (they
    are the buyer's documents, so the organization chooses, not whoever
    downloads them). Each language is named in itself."""

    EN = "en", "English"
    ZH_HANS = "zh-hans", "简体中文"


class BillingProfile(models.Model):
    """What an invoice says about its buyer, and the organization's billing terms."""

    organization = models.OneToOneField(
        "accounts.Organization", on_delete=models.CASCADE, related_name="billing_profile"
    )
    legal_name = models.CharField(max_length=200, blank=True)
    address = models.TextField(blank=True)
    tax_id = models.CharField(max_length=64, blank=True)
    # Tax rate in parts per million: 200_000 = 20 %.
    tax_rate_ppm = models.PositiveIntegerField(default=0)
    # Where invoices and low-balance notices go; empty = owners, admins and finance.
    billing_email = models.EmailField(blank=True)
    # Notify when the prepaid balance falls below this (micro-units); null = never.
    low_balance_threshold = models.BigIntegerField(null=True, blank=True)
    # Set when the notice for the current crossing was sent; cleared when the
    # balance is back at or above the threshold (so one notice per crossing).
    low_balance_notified_at = models.DateTimeField(null=True, blank=True)
    payment_terms_days = models.PositiveSmallIntegerField(default=14)
    # An invoice-level discount on the subtotal, in parts per million (its own line).
    invoice_discount_ppm = models.PositiveIntegerField(default=0)
    stripe_customer_id = models.CharField(max_length=64, blank=True)
    # The language of the invoice and credit-note PDFs (frozen on an invoice at finalization).
    document_language = models.CharField(
        max_length=16, choices=DocumentLanguage.choices, default=DocumentLanguage.EN
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.legal_name or str(self.organization_id)
