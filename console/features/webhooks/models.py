"""Destinations an organization's events go to, the events, and every
delivery of an event to a destination with its attempts (the delivery log)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone as tz
from django.utils.translation import gettext_lazy as _

from accounts.facade import Organization
from console.kernel.choices import TextChoices
from console.kernel.crypto import SealedTextField


class DestinationKind(TextChoices):
    WEBHOOK = "webhook", _("Signed webhook")
    SLACK = "slack", "Slack"  # a product name, the same in every language
    FEISHU = "feishu", _("Feishu / Lark")
    DINGTALK = "dingtalk", _("DingTalk")
    WECOM = "wecom", _("WeCom")
    EMAIL = "email", _("E-mail")


class EventType(TextChoices):
    ALERT_FIRED = "alert.fired", _("Alert fired")
    ALERT_RESOLVED = "alert.resolved", _("Alert resolved")
    INVOICE_FINALIZED = "invoice.finalized", _("Invoice finalized")
    INVOICE_PAID = "invoice.paid", _("Invoice paid")
    INVOICE_OVERDUE = "invoice.overdue", _("Invoice overdue")
    CREDIT_NOTE_ISSUED = "credit_note.issued", _("Credit note issued")
    TOPUP_SUCCEEDED = "topup.succeeded", _("Top-up succeeded")


# What a destination may subscribe to besides the event types: every one.
ALL_EVENTS = "all"
# The event "send test" makes: delivered to the one destination tested only.
TEST_EVENT = "test"


class DestinationState(TextChoices):
    HEALTHY = "healthy", _("Healthy")
    FAILING = "failing", _("Failing")


class Destination(models.Model):
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="webhook_destinations"
    )
    name = models.CharField(max_length=120)
    kind = models.CharField(max_length=16, choices=DestinationKind.choices)
    # Sealed at rest; shown back only as scheme://host/… (``url_display``).
    url = SealedTextField(blank=True, default="")
    # kind=webhook: the HMAC key, shown once at creation or rotation.
    secret = SealedTextField(blank=True, default="")
    # kind=email: roles ("owner", "finance", …) and/or addresses.
    recipients = models.JSONField(default=list, blank=True)
    # Event types, or ["all"].
    events = models.JSONField(default=list, blank=True)
    # The language chat messages and e-mails to plain addresses are written in.
    language = models.CharField(max_length=16, default="en")
    enabled = models.BooleanField(default=True)
    state = models.CharField(
        max_length=16, choices=DestinationState.choices, default=DestinationState.HEALTHY
    )
    state_reason = models.CharField(max_length=500, blank=True, default="")
    consecutive_failures = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=tz.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name", "id")

    def __str__(self) -> str:
        return self.name

    def subscribes(self, event_type: str) -> bool:
        return ALL_EVENTS in self.events or event_type in self.events


class OutboundEvent(models.Model):
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="outbound_events"
    )
    event_id = models.CharField(max_length=200)
    type = models.CharField(max_length=64)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=tz.now)

    class Meta:
        ordering = ("-created_at", "-id")
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "event_id"], name="uniq_outbound_event_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.event_id}"


class DeliveryStatus(TextChoices):
    PENDING = "pending", _("Pending")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    ABANDONED = "abandoned", _("Abandoned")


class Delivery(models.Model):
    """One event to one destination. ``pending`` until an attempt succeeds
    (``succeeded``) or the retry window ends (``abandoned``); ``failed`` is a
    one-off (a test send) that is not retried."""

    event = models.ForeignKey(OutboundEvent, on_delete=models.CASCADE, related_name="deliveries")
    destination = models.ForeignKey(
        Destination, on_delete=models.CASCADE, related_name="deliveries"
    )
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True, default=tz.now)
    # Failed attempts are retried until then (24 h from creation or a replay).
    retry_until = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(default=tz.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-created_at", "-id")
        constraints = [
            models.UniqueConstraint(
                fields=["event", "destination"], name="uniq_delivery_per_destination"
            )
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="webhooks_due")]

    def __str__(self) -> str:
        return f"delivery {self.pk} ({self.status})"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    at = models.DateTimeField(default=tz.now)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)
    succeeded = models.BooleanField(default=False)

    class Meta:
        ordering = ("at", "id")

    def __str__(self) -> str:
        return f"attempt {self.pk} of delivery {self.delivery_id}"
