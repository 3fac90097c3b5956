"""Celery tasks: thin calls into the delivery services."""

from __future__ import annotations

from celery import shared_task

from console.features.webhooks.delivery import deliver_due as _deliver_due
from console.features.webhooks.delivery import delivery_attempt


@shared_task(
    name="webhooks.deliver",
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=60,
    time_limit=90,
)
def deliver(delivery_id: int) -> str:
    """One attempt of one delivery (a no-op unless it is pending and due)."""
    delivery = delivery_attempt(delivery_id=delivery_id)
    return delivery.status if delivery else "skipped"


@shared_task(name="webhooks.deliver_due", acks_late=True, soft_time_limit=60, time_limit=90)
def deliver_due() -> int:
    """Beat: enqueue the deliveries whose retry is due."""
    return _deliver_due()
