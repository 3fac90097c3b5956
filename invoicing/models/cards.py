"""Cards on file: one row per attempt to save a card through a Stripe SetupIntent."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone as tz
from django.utils.translation import gettext_lazy as _

from console.kernel.choices import TextChoices


class CardSetupStatus(TextChoices):
    PENDING = "pending", _("Pending")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")


class CardSetup(models.Model):
    """Saving a card on file: our row for one SetupIntent. Committed before
    Stripe hears of it, so the SetupIntent's idempotency key and metadata
    name it (``card-setup-{id}-seti``); the browser's word and the webhook's
    are both checked against it (organization, customer) before the card
    becomes the customer's default. Its status makes applying it idempotent:
    only a pending setup changes the default card, once."""

    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.CASCADE, related_name="card_setups"
    )
    status = models.CharField(
        max_length=16, choices=CardSetupStatus.choices, default=CardSetupStatus.PENDING
    )
    stripe_setup_intent_id = models.CharField(max_length=64, blank=True)
    stripe_customer_id = models.CharField(max_length=64, blank=True)
    stripe_payment_method_id = models.CharField(max_length=64, blank=True)
    failure_message = models.CharField(max_length=255, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=tz.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-created_at", "-id")
        constraints = [
            models.UniqueConstraint(
                fields=["stripe_setup_intent_id"],
                condition=~Q(stripe_setup_intent_id=""),
                name="invoicing_card_setup_seti_unique",
            )
        ]
        indexes = [models.Index(fields=["organization", "-created_at"])]

    def __str__(self) -> str:
        return f"card setup {self.pk} ({self.status})"
