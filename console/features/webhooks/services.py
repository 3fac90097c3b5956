"""Destinations: create, change, delete, rotate a signing secret, send a
test, replay a delivery. Owners and admins manage them (``ORG_MANAGE``);
whoever sees billing (finance too) may read the delivery log."""

from __future__ import annotations

import secrets
import socket
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils.translation import gettext as _

from accounts.facade import (
    Actor,
    FieldErrors,
    NotFound,
    Perm,
    Role,
    audit_record,
    clean_unique_name,
)
from console.features.webhooks.delivery import (
    delivery_retry_now,
    destination_test_send,
    outbound_event_record,
)
from console.features.webhooks.models import (
    ALL_EVENTS,
    Delivery,
    Destination,
    DestinationKind,
    DestinationState,
    EventType,
)
from inference_node.facade import guarded, literal_refusal, refuse_internal_host

__all__ = [
    "delivery_replay",
    "destination_create",
    "destination_delete",
    "destination_rotate_secret",
    "destination_test",
    "destination_update",
    "outbound_event_record",
    "url_display",
]

MANAGE = Perm.ORG_MANAGE
VIEW_LOG = Perm.BILLING_VIEW
SECRET_PREFIX = "whsec_"  # noqa: S105 - a format marker, not a secret
MAX_RECIPIENTS = 20


def new_signing_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def url_display(url: str) -> str:
    """What may be shown of a destination's URL: its scheme and host, the rest
    masked (chat webhook URLs carry their token in the path or query)."""
    if not url:
        return ""
    parts = urlsplit(url)
    rest = "/…" if (parts.path.strip("/") or parts.query) else ""
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}{rest}"


def clean_url(value, *, kind: str, organization_id: int) -> str:
    url = (value or "").strip()
    if not url:
        raise ValueError(_("Enter the URL to send to."))
    if len(url) > 2000:
        raise ValueError(_("Use at most %(max)s characters.") % {"max": 2000})
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise ValueError(_("Enter a valid URL, e.g. https://hooks.example.com/console.")) from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(_("Use an http:// or https:// URL."))
    if not parts.hostname:
        raise ValueError(_("The URL needs a host name."))
    if parts.username or parts.password:
        raise ValueError(_("Put no credentials in the URL."))
    if parts.fragment:
        raise ValueError(_("The URL takes no fragment."))
    if guarded(organization_id):
        refuse_internal_address(parts.hostname)
    return url


def _resolved(host: str) -> list[str]:
    """The addresses ``host`` stands for ([] when it does not resolve; the
    inference_node check then says so)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return sorted({str(info[4][0]).split("%", 1)[0] for info in infos})


def refuse_internal_address(host: str) -> None:
    """ValueError, worded for what the admin typed, when ``host`` is (or
    resolves to) a loopback, private or reserved address; inference_node's
    address rules decide which addresses those are."""
    message = _(
        "%(host)s is on a loopback or private network (%(reason)s), which destinations "
        "may not use. Enter the public address of your endpoint or chat app."
    )
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith((".localhost", ".local", ".internal")):
        raise ValueError(message % {"host": host, "reason": _("this machine or a local name")})
    reason = literal_refusal(host)
    if reason:
        raise ValueError(message % {"host": host, "reason": _(reason)})
    for address in _resolved(host):
        reason = literal_refusal(address)
        if reason:
            raise ValueError(message % {"host": host, "reason": f"{address}: {_(reason)}"})
    refuse_internal_host(host)


def clean_events(value) -> list[str]:
    chosen = [str(v) for v in (value or [])]
    allowed = {*EventType.values, ALL_EVENTS}
    unknown = sorted(set(chosen) - allowed)
    if unknown:
        raise ValueError(_("Unknown event types: %(types)s.") % {"types": ", ".join(unknown)})
    if not chosen:
        raise ValueError(_("Choose at least one event type (or all)."))
    return [ALL_EVENTS] if ALL_EVENTS in chosen else sorted(set(chosen))


def clean_recipients(value) -> list[str]:
    items = value if isinstance(value, list) else str(value or "").replace(",", "\n").split()
    out: list[str] = []
    for raw in items:
        item = str(raw).strip()
        if not item:
            continue
        if item not in Role.values:
            try:
                validate_email(item)
            except ValidationError:
                raise ValueError(
                    _("%(item)s is neither a role nor an e-mail address.") % {"item": item[:80]}
                ) from None
        if item not in out:
            out.append(item)
    if not out:
        raise ValueError(_("Name at least one role or e-mail address."))
    if len(out) > MAX_RECIPIENTS:
        raise ValueError(_("Name at most %(n)d recipients.") % {"n": MAX_RECIPIENTS})
    return out


def clean_language(value) -> str:
    codes = [code for code, _name in settings.LANGUAGES]
    language = (value or "").strip() or settings.LANGUAGE_CODE
    if language not in codes:
        raise ValueError(_("Choose one of the console's languages."))
    return language


def _clean(errors: FieldErrors, actor: Actor, data: dict, *, instance=None) -> dict:
    out: dict = {}
    siblings = Destination.objects.filter(organization_id=actor.organization_id)
    if instance is not None:
        siblings = siblings.exclude(pk=instance.pk)
    if "name" in data or instance is None:
        out["name"] = clean_unique_name(
            errors, data.get("name"), siblings, noun=_("destination"), instance=instance
        )
    kind = data.get("kind", instance.kind if instance is not None else "")
    if instance is None:
        if kind not in DestinationKind.values:
            errors.add("kind", _("Choose a destination kind."))
            return out
        out["kind"] = kind
    if kind == DestinationKind.EMAIL:
        if "recipients" in data or instance is None:
            out["recipients"] = errors.run("recipients", clean_recipients, data.get("recipients"))
    elif "url" in data or instance is None:
        out["url"] = errors.run(
            "url",
            lambda v: clean_url(v, kind=kind, organization_id=actor.organization_id),
            data.get("url"),
        )
    if "events" in data or instance is None:
        out["events"] = errors.run("events", clean_events, data.get("events"))
    if "language" in data or instance is None:
        out["language"] = errors.run("language", clean_language, data.get("language"))
    if "enabled" in data:
        out["enabled"] = bool(data["enabled"])
    return out


def destination_create(*, actor: Actor, **data) -> tuple[Destination, str]:
    """A destination and, for a signed webhook, its secret (shown this once)."""
    actor.require(MANAGE)
    errors = FieldErrors()
    fields = _clean(errors, actor, data)
    errors.raise_if_any()
    secret = new_signing_secret() if fields["kind"] == DestinationKind.WEBHOOK else ""
    with transaction.atomic():
        destination = Destination.objects.create(
            organization_id=actor.organization_id, secret=secret, **fields
        )
        audit_record(
            actor=actor,
            action="webhook_destination.create",
            target=destination,
            params={"kind": destination.kind, "events": destination.events},
        )
    return destination, secret


def _get(actor: Actor, destination_id: int, *, lock: bool = False) -> Destination:
    qs = Destination.objects.filter(organization_id=actor.organization_id, pk=destination_id)
    destination = (qs.select_for_update() if lock else qs).select_related("organization").first()
    if destination is None:
        raise NotFound(_("No such destination in this organization."))
    return destination


def destination_update(*, actor: Actor, destination_id: int, **data) -> Destination:
    actor.require(MANAGE)
    with transaction.atomic():
        destination = _get(actor, destination_id, lock=True)
        errors = FieldErrors()
        fields = _clean(errors, actor, data, instance=destination)
        errors.raise_if_any()
        revived = (fields.get("enabled") and not destination.enabled) or (
            "url" in fields and fields["url"] != destination.url
        )
        for name, value in fields.items():
            setattr(destination, name, value)
        if revived:
            destination.state, destination.state_reason = DestinationState.HEALTHY, ""
            destination.consecutive_failures = 0
        destination.save()
        audit_record(
            actor=actor,
            action="webhook_destination.update",
            target=destination,
            params={"changed": sorted(fields)},
        )
    return destination


def destination_delete(*, actor: Actor, destination_id: int) -> None:
    actor.require(MANAGE)
    with transaction.atomic():
        destination = _get(actor, destination_id, lock=True)
        audit_record(actor=actor, action="webhook_destination.delete", target=destination)
        destination.delete()


def destination_rotate_secret(*, actor: Actor, destination_id: int) -> tuple[Destination, str]:
    """A new signing secret (shown this once); the old one stops at once."""
    actor.require(MANAGE)
    with transaction.atomic():
        destination = _get(actor, destination_id, lock=True)
        if destination.kind != DestinationKind.WEBHOOK:
            raise NotFound(_("Only signed webhooks have a signing secret."))
        secret = new_signing_secret()
        destination.secret = secret
        destination.save(update_fields=["secret", "updated_at"])
        audit_record(actor=actor, action="webhook_destination.rotate_secret", target=destination)
    return destination, secret


def destination_test(*, actor: Actor, destination_id: int) -> Delivery:
    """Send a ``test`` event to the destination now; the delivery with its result."""
    actor.require(MANAGE)
    return destination_test_send(destination=_get(actor, destination_id))


def delivery_replay(*, actor: Actor, delivery_id: int) -> Delivery:
    actor.require(MANAGE)
    if not Delivery.objects.filter(
        pk=delivery_id, destination__organization_id=actor.organization_id
    ).exists():
        raise NotFound(_("No such delivery in this organization."))
    return delivery_retry_now(organization_id=actor.organization_id, delivery_id=delivery_id)
