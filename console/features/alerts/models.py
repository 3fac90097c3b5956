"""Alert rules and their incidents (the alert history).

A rule watches one kind of condition over a scope (a key, a sub-account, a
model, a node, or the whole organization). Evaluation (``services.evaluate``)
turns a rule into observations, one per subject, threshold and period (a
key's daily cap at 80 % today is one); an observation whose condition holds
opens an ``Incident`` unless one is open for it already, and an open
incident whose condition no longer holds is resolved. At most one incident
per (rule, subject, threshold, period) is open at a time (a constraint), so
a retried or concurrent evaluation never fires twice.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone as tz
from django.utils.translation import gettext_lazy as _

from console.kernel.choices import TextChoices


class Kind(TextChoices):
    SPEND_CAP = "spend_cap", _("Spend reaches a share of a cap")
    BALANCE_LOW = "balance_low", _("Prepaid balance below an amount")
    BALANCE_RUNWAY = "balance_runway", _("Prepaid balance runs out within days")
    ERROR_RATE = "error_rate", _("Error rate above a threshold")
    LATENCY_P99 = "latency_p99", _("Latency p99 above a threshold")
    TTFT_P99 = "ttft_p99", _("Time to first token p99 above a threshold")
    UPSTREAM_DOWN = "upstream_down", _("Node or channel down, or a credential disabled")
    RATE_NEAR_LIMIT = "rate_near_limit", _("Requests or tokens per minute near a key's limit")
    INVOICE_OVERDUE = "invoice_overdue", _("Invoice overdue")


class Scope(TextChoices):
    ORG = "org", _("Whole organization")
    KEY = "key", _("One API key")
    SUB_ACCOUNT = "sub_account", _("One sub-account")
    MODEL = "model", _("One model")
    NODE = "node", _("One node or channel")


# The scopes each kind may watch (the first is the form's default).
KIND_SCOPES: dict[str, tuple[str, ...]] = {
    Kind.SPEND_CAP: (Scope.KEY, Scope.SUB_ACCOUNT, Scope.ORG),
    Kind.BALANCE_LOW: (Scope.ORG,),
    Kind.BALANCE_RUNWAY: (Scope.ORG,),
    Kind.ERROR_RATE: (Scope.MODEL, Scope.NODE, Scope.ORG),
    Kind.LATENCY_P99: (Scope.MODEL, Scope.NODE, Scope.ORG),
    Kind.TTFT_P99: (Scope.MODEL, Scope.NODE, Scope.ORG),
    Kind.UPSTREAM_DOWN: (Scope.NODE, Scope.ORG),
    Kind.RATE_NEAR_LIMIT: (Scope.KEY, Scope.ORG),
    Kind.INVOICE_OVERDUE: (Scope.ORG,),
}
# What a developer may set up: rules on their own keys only.
DEVELOPER_KINDS = (Kind.SPEND_CAP, Kind.RATE_NEAR_LIMIT)
WINDOWED_KINDS = (Kind.ERROR_RATE, Kind.LATENCY_P99, Kind.TTFT_P99)


class AlertRule(models.Model):
    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.CASCADE, related_name="alert_rules"
    )
    name = models.CharField(max_length=120)
    kind = models.CharField(max_length=24, choices=Kind.choices)
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.ORG)
    api_key = models.ForeignKey(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    sub_account = models.ForeignKey(
        "accounts.SubAccount", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    node = models.ForeignKey(
        "inference_node.Node", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    model = models.CharField(max_length=128, blank=True)
    # spend_cap: the shares of each cap that fire, whole percents 1-100.
    percents = models.JSONField(default=list, blank=True)
    # By kind: error rate in percent, p99 in milliseconds, runway in days, the
    # share of a rate limit in percent.
    threshold = models.DecimalField(max_digits=14, decimal_places=3, null=True, blank=True)
    # balance_low: micro-units of the organization's currency.
    amount = models.BigIntegerField(null=True, blank=True)
    window_minutes = models.PositiveIntegerField(default=15)
    min_calls = models.PositiveIntegerField(default=20)
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=tz.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name", "id")
        indexes = [models.Index(fields=["enabled", "organization"])]

    def __str__(self) -> str:
        return self.name


class Incident(models.Model):
    """One crossing of a rule by one subject: fired, and resolved once the
    condition cleared. ``value`` and ``threshold`` are as the rule's kind
    counts them (micro-units, percent, milliseconds, days)."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="incidents")
    organization_id = models.BigIntegerField()
    # What crossed: "key:12", "sub_account:3", "model:gpt-4o", "node:7", "org" ...
    subject = models.CharField(max_length=160)
    subject_label = models.CharField(max_length=240, blank=True)
    # Which of the rule's thresholds ("80", "rpm") and period ("d:2026-12-04").
    threshold_key = models.CharField(max_length=32, blank=True)
    period = models.CharField(max_length=32, blank=True)
    value = models.DecimalField(max_digits=24, decimal_places=3, null=True, blank=True)
    threshold = models.DecimalField(max_digits=24, decimal_places=3, null=True, blank=True)
    resolved_value = models.DecimalField(max_digits=24, decimal_places=3, null=True, blank=True)
    fired_at = models.DateTimeField(default=tz.now)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-fired_at", "-id")
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "subject", "threshold_key", "period"],
                condition=Q(resolved_at__isnull=True),
                name="alerts_one_open_incident",
            )
        ]
        indexes = [models.Index(fields=["organization_id", "-fired_at"])]

    def __str__(self) -> str:
        return f"{self.rule_id} {self.subject} {self.threshold_key} {self.period}"

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None
