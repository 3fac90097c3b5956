"""Recording events and delivering them: the hook receiver, one attempt of a
delivery, the due sweep, replays and test sends.

An attempt *claims* its delivery first (a short transaction that moves
``next_attempt_at`` a lease ahead), then sends with no lock held, then
records the result: a slow endpoint holds no row lock, two workers never
send the same delivery at once, and a worker lost mid-send leaves the
delivery to the sweep once the lease runs out. Deliveries are separate rows
and separate tasks, so one failing destination never delays another.
"""

from __future__ import annotations

import logging
import random
import secrets
from datetime import timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils import timezone as tz
from django.utils import translation
from django.utils.translation import gettext

from accounts.facade import Membership, Organization, Role
from console.features.webhooks import formats, signing
from console.features.webhooks.models import (
    TEST_EVENT,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
    Destination,
    DestinationKind,
    DestinationState,
    OutboundEvent,
)
from console.features.webhooks.sender import Sent, post
from console.kernel.celery import registered_task

logger = logging.getLogger(__name__)

# How long a claimed delivery is left to its worker before the sweep takes it back.
CLAIM_LEASE = timedelta(seconds=120)
SWEEP_BATCH = 500


def _retry_window() -> timedelta:
    return timedelta(hours=settings.WEBHOOK_RETRY_HOURS)


def backoff_seconds(attempts: int) -> float:
    """Full jitter: a random wait up to base * 2**(attempts - 1), capped."""
    ceiling = min(
        settings.WEBHOOK_RETRY_MAX_DELAY_SECONDS,
        settings.WEBHOOK_RETRY_BASE_SECONDS * 2 ** max(0, min(attempts - 1, 30)),
    )
    return random.uniform(1.0, max(1.0, ceiling))  # noqa: S311 - jitter, not a secret


def _enqueue(delivery_ids: list[int]) -> None:
    """Hand each delivery to a worker; a broker that cannot take one leaves it
    to the due sweep (beat, every ``WEBHOOK_SWEEP_SECONDS``)."""
    task = registered_task("webhooks.deliver")
    for delivery_id in delivery_ids:
        try:
            task.delay(delivery_id)
        except Exception:
            logger.exception("could not enqueue webhook delivery %s", delivery_id)


def outbound_event_record(
    *, organization_id: int, event_type: str, data: dict, event_id: str, **_ignored
) -> OutboundEvent | None:
    """The ``console.kernel.hooks.OUTBOUND_EVENT`` receiver: store the event once per
    (organization, event_id) and one delivery per enabled destination that
    subscribes to its type, sent after the caller's transaction commits. A
    repeated event id changes nothing. Never fails the caller: a fault is
    logged and the caller's work stands."""
    try:
        with transaction.atomic():
            event, created = _event_get_or_create(organization_id, event_type, data, event_id)
            if not created:
                return event
            now = tz.now()
            ids = [
                Delivery.objects.create(
                    event=event,
                    destination=d,
                    created_at=now,
                    next_attempt_at=now,
                    retry_until=now + _retry_window(),
                ).pk
                for d in Destination.objects.filter(organization_id=organization_id, enabled=True)
                if d.subscribes(event_type)
            ]
    except Exception:
        logger.exception("could not record outbound event %s for org %s", event_id, organization_id)
        return None
    if ids:
        transaction.on_commit(lambda: _enqueue(ids))
    return event


def _event_get_or_create(organization_id, event_type, data, event_id):
    existing = OutboundEvent.objects.filter(
        organization_id=organization_id, event_id=str(event_id)
    ).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            return OutboundEvent.objects.create(
                organization_id=organization_id,
                event_id=str(event_id)[:200],
                type=str(event_type)[:64],
                data=data or {},
            ), True
    except IntegrityError:  # the same id, recorded by a concurrent caller
        return OutboundEvent.objects.get(
            organization_id=organization_id, event_id=str(event_id)
        ), False


def _claim(delivery_id: int, *, force: bool) -> Delivery | None:
    now = tz.now()
    with transaction.atomic():
        # A disabled destination's deliveries wait (until their window ends); a
        # test send or a replay (``force``) goes out anyway.
        pending = Delivery.objects.filter(pk=delivery_id, status=DeliveryStatus.PENDING)
        if not force:
            pending = pending.filter(destination__enabled=True)
        delivery = pending.select_for_update(of=("self",)).first()
        if delivery is None:
            return None
        if not force and delivery.next_attempt_at and delivery.next_attempt_at > now:
            return None
        delivery.next_attempt_at = now + CLAIM_LEASE
        delivery.attempts += 1
        delivery.save(update_fields=["next_attempt_at", "attempts", "updated_at"])
    return Delivery.objects.select_related("event", "destination__organization").get(pk=delivery_id)


def _member_languages(organization_id: int) -> dict[str, tuple[str, str]]:
    """Each active member's e-mail (lowercased) -> (role, language)."""
    rows = Membership.objects.filter(
        organization_id=organization_id, user__is_active=True
    ).values_list("user__email", "role", "user__language")
    return {
        email.lower(): (role, language or settings.LANGUAGE_CODE) for email, role, language in rows
    }


def email_recipients(destination: Destination) -> dict[str, list[str]]:
    """language -> addresses: members named by their role get their own
    language, other addresses the destination's (a member's own if theirs)."""
    members = _member_languages(destination.organization_id)
    roles = {r for r in destination.recipients if r in Role.values}
    chosen: dict[str, str] = {}
    for email, (role, language) in members.items():
        if role in roles:
            chosen[email] = language
    for address in destination.recipients:
        if address not in Role.values and "@" in address:
            key = address.lower()
            chosen.setdefault(key, members.get(key, ("", destination.language))[1])
    groups: dict[str, list[str]] = {}
    for address, language in sorted(chosen.items()):
        groups.setdefault(language, []).append(address)
    return groups


def _send_email(delivery: Delivery) -> Sent:
    destination, event = delivery.destination, delivery.event
    org = destination.organization
    groups = email_recipients(destination)
    if not groups:
        return Sent(False, None, "no recipients", 0)
    for language, addresses in groups.items():
        text = formats.event_text(event.type, event.data, org.name, language)
        subject = text.splitlines()[0]
        try:
            send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, addresses)
        except Exception as exc:
            return Sent(False, None, f"mail: {type(exc).__name__}: {exc}", 0)
    return Sent(True, None, "", 0)


def send(delivery: Delivery) -> Sent:
    """One attempt's request, by the destination's kind."""
    destination, event = delivery.destination, delivery.event
    org = destination.organization
    if not destination.url and destination.kind != DestinationKind.EMAIL:
        return Sent(False, None, "the destination's URL cannot be read (CONSOLE_SECRET_KEYS?)", 0)
    if destination.kind == DestinationKind.EMAIL:
        return _send_email(delivery)
    if destination.kind == DestinationKind.WEBHOOK:
        if not destination.secret:
            return Sent(False, None, "the signing secret cannot be read (CONSOLE_SECRET_KEYS?)", 0)
        body = formats.envelope(event, org.slug)
        headers = signing.sign(destination.secret, event.event_id, body)
        return post(url=destination.url, body=body, headers=headers, organization_id=org.pk)
    text = formats.event_text(event.type, event.data, org.name, destination.language)
    sent = post(
        url=destination.url,
        body=formats.chat_body(destination.kind, text),
        headers={},
        organization_id=org.pk,
    )
    if sent.ok:
        refusal = formats.chat_refusal(destination.kind, sent.answer)
        if refusal:
            return Sent(False, sent.status_code, refusal, sent.duration_ms, sent.answer)
    return sent


def _record(delivery_id: int, sent: Sent) -> Delivery:
    now = tz.now()
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().select_related("event").get(pk=delivery_id)
        DeliveryAttempt.objects.create(
            delivery=delivery,
            at=now,
            status_code=sent.status_code,
            error=sent.error[:500],
            duration_ms=sent.duration_ms,
            succeeded=sent.ok,
        )
        delivery.last_status_code = sent.status_code
        delivery.last_error = sent.error[:500]
        if sent.ok:
            delivery.status, delivery.next_attempt_at = DeliveryStatus.SUCCEEDED, None
        elif delivery.retry_until is None or delivery.retry_until <= now:
            delivery.status = (
                DeliveryStatus.FAILED
                if delivery.event.type == TEST_EVENT
                else DeliveryStatus.ABANDONED
            )
            delivery.next_attempt_at = None
        else:
            delivery.next_attempt_at = min(
                delivery.retry_until, now + timedelta(seconds=backoff_seconds(delivery.attempts))
            )
        delivery.save()
        _destination_health(delivery.destination_id, sent)
    return delivery


def _destination_health(destination_id: int, sent: Sent) -> None:
    destination = Destination.objects.select_for_update().get(pk=destination_id)
    if sent.ok:
        destination.consecutive_failures = 0
        destination.state, destination.state_reason = DestinationState.HEALTHY, ""
    else:
        destination.consecutive_failures += 1
        if destination.consecutive_failures >= settings.WEBHOOK_FAILING_AFTER:
            destination.state = DestinationState.FAILING
            destination.state_reason = sent.error[:500]
    destination.save(update_fields=["consecutive_failures", "state", "state_reason", "updated_at"])


def delivery_attempt(*, delivery_id: int, force: bool = False) -> Delivery | None:
    """Send a pending delivery that is due (any pending one with ``force``)
    and record the attempt; None when there was nothing to send."""
    delivery = _claim(delivery_id, force=force)
    if delivery is None:
        return None
    try:
        sent = send(delivery)
    except Exception as exc:
        logger.exception("webhook delivery %s failed unexpectedly", delivery_id)
        sent = Sent(False, None, f"{type(exc).__name__}: {exc}", 0)
    return _record(delivery_id, sent)


def deliveries_due(*, now=None) -> list[int]:
    """The pending deliveries whose attempt is due (a retry, a lost task, an
    expired claim), oldest first, at most a batch."""
    now = now or tz.now()
    return list(
        Delivery.objects.filter(
            status=DeliveryStatus.PENDING, next_attempt_at__lte=now, destination__enabled=True
        )
        .order_by("next_attempt_at", "id")
        .values_list("pk", flat=True)[:SWEEP_BATCH]
    )


def deliver_due(*, now=None) -> int:
    """Beat: enqueue every due delivery; the number enqueued."""
    ids = deliveries_due(now=now)
    _enqueue(ids)
    return len(ids)


def delivery_retry_now(*, organization_id: int, delivery_id: int) -> Delivery:
    """Replay: a new attempt now, whatever the delivery's state; retried
    again for the usual window when it fails."""
    now = tz.now()
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().get(
            pk=delivery_id, destination__organization_id=organization_id
        )
        delivery.status = DeliveryStatus.PENDING
        delivery.next_attempt_at = now
        delivery.retry_until = now + _retry_window()
        delivery.save(update_fields=["status", "next_attempt_at", "retry_until", "updated_at"])
    return delivery_attempt(delivery_id=delivery_id, force=True) or Delivery.objects.get(
        pk=delivery_id
    )


def _test_summary(language: str) -> str:
    with translation.override(language):
        return gettext("This is a test event from the console.")


def destination_test_send(*, destination: Destination) -> Delivery:
    """A ``test`` event to this one destination, sent now (not retried)."""
    org: Organization = destination.organization
    now = tz.now()
    with transaction.atomic():
        event = OutboundEvent.objects.create(
            organization=org,
            event_id=f"test_{secrets.token_hex(8)}",
            type=TEST_EVENT,
            data={"summary": _test_summary(destination.language), "destination": destination.name},
        )
        delivery = Delivery.objects.create(
            event=event, destination=destination, next_attempt_at=now, retry_until=now
        )
    return delivery_attempt(delivery_id=delivery.pk, force=True) or delivery
