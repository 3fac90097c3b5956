"""The SLA ledger: an organization's availability target, and each closed
month's measurement against it.

Availability is a share in parts per million (``999_000`` is 99.9 %),
integers only. A month's ``SlaMonth`` row is written once the month is
evaluated (``invoicing.services.sla``): met, or breached with a drafted
credit that finance approves (the credit note is issued then, through the
existing credit-note mechanism) or dismisses."""

from __future__ import annotations

import re

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone as tz
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from console.kernel.choices import TextChoices


class SlaTarget(models.Model):
    """Platform staff's override of the platform defaults
    (``settings.SLA_AVAILABILITY_TARGET_PPM``, ``settings.SLA_TTFT_P99_MS``)
    for one organization."""

    organization = models.OneToOneField(
        "accounts.Organization", on_delete=models.CASCADE, related_name="sla_target"
    )
    availability_ppm = models.PositiveIntegerField()
    # The bound on the month's p99 time to first token, ms (0: none; null: the default).
    ttft_p99_ms = models.PositiveIntegerField(null=True, blank=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(default=tz.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(availability_ppm__gte=500_000, availability_ppm__lte=1_000_000),
                name="invoicing_sla_target_range",
            )
        ]

    def __str__(self) -> str:
        return f"{self.organization_id}: {self.availability_ppm} ppm"


class SlaStatus(TextChoices):
    MET = "met", _("Target met")
    DRAFTED = "drafted", _("Credit drafted")
    APPROVED = "approved", _("Credit approved")
    DISMISSED = "dismissed", _("Credit dismissed")


class SlaMonth(models.Model):
    """One organization's calendar month (in its time zone), evaluated: one
    row per organization and month, so evaluating again never drafts a
    second credit."""

    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.PROTECT, related_name="sla_months"
    )
    period = models.CharField(max_length=7)
    calls = models.BigIntegerField(default=0)
    failed_calls = models.BigIntegerField(default=0)
    availability_ppm = models.PositiveIntegerField(default=1_000_000)
    target_ppm = models.PositiveIntegerField()
    # The month's p99 time to first token (ms, from the hourly sketches; null: no
    # streamed call measured one) and the bound it was held to (0: none).
    ttft_p99_ms = models.PositiveIntegerField(null=True, blank=True)
    ttft_bound_ms = models.PositiveIntegerField(default=0)
    # The share of the invoice credited (0 when the target was met).
    credit_rate_ppm = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=SlaStatus.choices, default=SlaStatus.MET)
    # Set when finance approves: the amount credited and the note that credits it.
    credit_amount = models.BigIntegerField(default=0)
    credit_note = models.OneToOneField(
        "invoicing.CreditNote",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="sla_month",
    )
    evaluated_at = models.DateTimeField(default=tz.now)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-period", "-id")
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "period"], name="invoicing_sla_month_one_per_period"
            )
        ]

    def __str__(self) -> str:
        return f"{self.organization_id} {self.period} ({self.status})"

    @property
    def breached(self) -> bool:
        return self.status != SlaStatus.MET


def percent_text(ppm: int) -> str:
    """``999_000`` → ``"99.9 %"``; up to four decimals, never rounded up
    (99.8999 % must not read as the 99.9 % it missed)."""
    whole, frac = divmod(ppm, 10_000)
    digits = f"{frac:04d}".rstrip("0")
    return f"{whole}.{digits} %" if digits else f"{whole} %"


# The credit note line an SLA credit issues (stored in English, worded again
# for the reader by ``sla_credit_description``).
SLA_CREDIT_TEXT = (
    "SLA credit {period}: availability {availability} (target {target}), "
    "{rate} of the invoice, {failed} failed calls"
)
SLA_TTFT_TEXT = ", p99 TTFT {ttft} ms over the {bound} ms bound"
_SLA_CREDIT_RE = re.compile(
    r"SLA credit (?P<period>\d{4}-\d{2}): availability (?P<availability>[\d.]+ %) "
    r"\(target (?P<target>[\d.]+ %)\), (?P<rate>[\d.]+ %) of the invoice, "
    r"(?P<failed>\d+) failed calls"
    r"(?:, p99 TTFT (?P<ttft>\d+) ms over the (?P<bound>\d+) ms bound)?"
)


def sla_credit_description(text: str) -> str | None:
    """An SLA credit line in the active language, or None for other text."""
    found = _SLA_CREDIT_RE.fullmatch(text)
    if not found:
        return None
    worded = (
        gettext(
            "SLA credit %(period)s: availability %(availability)s (target %(target)s), "
            "%(rate)s of the invoice, %(failed)s failed calls"
        )
        % found.groupdict()
    )
    if found["ttft"]:
        worded += gettext(", p99 TTFT %(ttft)s ms over the %(bound)s ms bound") % {
            "ttft": found["ttft"],
            "bound": found["bound"],
        }
    return worded
