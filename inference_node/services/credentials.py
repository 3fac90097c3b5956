"""Writes of a channel's key pool: add, edit, enable / disable and remove an
API key (by a person, with an ``Actor``), and ``credential_refused``, which the
gateway calls when a vendor refuses a key (401 / 403).

Decisions:

* A key's secret is write-only and never changes: to rotate, add the new key
  and remove the old one. Audit parameters carry the key's hint, never it.
* A vendor channel keeps at least one key: removing the last one is refused
  (disable it instead, which takes it out of rotation at once).
* When no active key is left, a vendor channel turns unhealthy with
  ``ALL_KEYS_DISABLED`` (a "down" badge in the console); an enabled or added
  key brings it back to "unknown" (routable, the next probe confirms).
* Locks are taken node first, then key, everywhere, so concurrent changes of
  one pool never deadlock.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from accounts.facade import (
    Actor,
    Conflict,
    FieldErrors,
    NotFound,
    Perm,
    ValidationFailed,
    audit_record,
    changed,
)
from console.kernel.crypto import hint
from inference_node.models import Credential, CredentialStatus, Node
from inference_node.selectors import get_node
from inference_node.services._common import (
    after_change,
    mark_down_if_keyless,
    revive_if_keyed,
    touch,
)
from inference_node.services.validation import (
    MAX_CREDENTIALS,
    clean_credential_fields,
    clean_secret,
)

CREDENTIAL_FIELDS = ("label", "weight", "rpm_limit", "tpm_limit", "max_concurrency")
MAX_REASON = 200
# Marked for translation; raised as _(KEEP_ONE_KEY) (English under /api/).
KEEP_ONE_KEY = gettext_noop(
    "A vendor channel needs at least one API key: add the new key before removing this "
    "one, or disable it."
)


def _clean_fields(data: dict) -> dict:
    errors = FieldErrors()
    out = {}
    for name in CREDENTIAL_FIELDS:
        if name in data:
            value = errors.run(name, clean_credential_fields, {name: data[name]})
            if value is not None:
                out.update(value)
    errors.raise_if_any()
    return out


def _for_change(actor: Actor, credential_id) -> tuple[Node, Credential]:
    """The key and its node, both locked, if the actor may manage the node."""
    actor.require(Perm.NODES_MANAGE)
    try:
        node_id = Credential.objects.filter(pk=credential_id).values_list("node_id", flat=True)[0]
    except (IndexError, ValueError, TypeError):
        raise NotFound(_("No such API key in this organization.")) from None
    node = get_node(actor, node_id, for_change=True, lock=True)
    credential = Credential.objects.select_for_update().filter(pk=credential_id, node=node).first()
    if credential is None:  # removed meanwhile
        raise NotFound(_("No such API key in this organization."))
    return node, credential


def _describe(credential: Credential, node: Node) -> dict:
    return {"node": node.pk, "node_name": node.name, "hint": credential.secret_hint}


def credential_add(
    *,
    actor: Actor,
    node_id: int,
    secret: str,
    label: str = "",
    weight: int = 1,
    rpm_limit: int | None = None,
    tpm_limit: int | None = None,
    max_concurrency: int | None = None,
) -> Credential:
    """Add one API key to a node's pool (active at once)."""
    actor.require(Perm.NODES_MANAGE)
    errors = FieldErrors()
    clean = errors.run("secret", clean_secret, secret)
    fields = _clean_fields(
        {
            "label": label,
            "weight": weight,
            "rpm_limit": rpm_limit,
            "tpm_limit": tpm_limit,
            "max_concurrency": max_concurrency,
        }
    )
    errors.raise_if_any()
    with transaction.atomic():
        node = get_node(actor, node_id, for_change=True, lock=True)
        pool = list(node.credentials.all())
        # Conflicts with the pool as it is (409), not malformed input: the same
        # request is fine on another channel or once a key is removed.
        if len(pool) >= MAX_CREDENTIALS:
            full = _("A channel holds at most %(max)s API keys.") % {"max": MAX_CREDENTIALS}
            raise Conflict(full, code="key_pool_full", fields={"secret": [full]})
        if any(c.secret == clean for c in pool):
            twice = _("This API key is already in the pool.")
            raise Conflict(twice, code="duplicate_key", fields={"secret": [twice]})
        credential = Credential.objects.create(
            node=node, secret=clean, secret_hint=hint(clean), **fields
        )
        audit_record(
            actor=actor,
            action="credential.add",
            target=credential,
            params={**_describe(credential, node), **fields},
        )
        if not revive_if_keyed(node):
            touch(node)
        after_change()
    return credential


def credential_update(*, actor: Actor, credential_id: int, **fields) -> Credential:
    """Change a key's label, weight or limits (``CREDENTIAL_FIELDS``); never its secret."""
    actor.require(Perm.NODES_MANAGE)
    if "secret" in fields:
        raise ValidationFailed.from_fields(
            {"secret": _("A key's secret cannot be changed: add a new key and remove this one.")}
        )
    unknown = set(fields) - set(CREDENTIAL_FIELDS)
    if unknown:
        raise ValidationFailed.from_fields(dict.fromkeys(sorted(unknown), _("Unknown field.")))
    values = _clean_fields(fields)
    with transaction.atomic():
        node, credential = _for_change(actor, credential_id)
        diff = changed(credential, values)
        if diff:
            credential.save()
            audit_record(
                actor=actor,
                action="credential.update",
                target=credential,
                params={**_describe(credential, node), **diff},
            )
            touch(node)
            after_change()
    return credential


def credential_remove(*, actor: Actor, credential_id: int) -> None:
    """Delete a key from its pool (refused for a vendor channel's last key)."""
    with transaction.atomic():
        node, credential = _for_change(actor, credential_id)
        if node.is_vendor and not node.credentials.exclude(pk=credential.pk).exists():
            raise Conflict(_(KEEP_ONE_KEY), code="last_key")
        params = {**_describe(credential, node), "label": credential.label}
        audit_record(actor=actor, action="credential.remove", target=credential, params=params)
        credential.delete()
        if not mark_down_if_keyless(node):
            touch(node)
        after_change()


def credential_set_status(*, actor: Actor, credential_id: int, status: str) -> Credential:
    """Enable (active) or disable a key by a person. Disabling the last active
    key of a vendor channel takes the channel down."""
    if status not in CredentialStatus.values:
        raise ValidationFailed.from_fields({"status": _("Choose active or disabled.")})
    with transaction.atomic():
        node, credential = _for_change(actor, credential_id)
        before = credential.status
        if before == status:
            return credential
        credential.status = status
        if status == CredentialStatus.DISABLED:
            credential.disabled_reason = f"disabled by {actor.user.email}"[:300]
            credential.disabled_at = timezone.now()
        else:
            credential.disabled_reason = ""
            credential.disabled_at = None
        credential.save()
        action = "credential.enable" if status == CredentialStatus.ACTIVE else "credential.disable"
        audit_record(
            actor=actor,
            action=action,
            target=credential,
            params={**_describe(credential, node), "status": [before, status]},
        )
        moved = (
            revive_if_keyed(node)
            if status == CredentialStatus.ACTIVE
            else mark_down_if_keyless(node)
        )
        if not moved:
            touch(node)
        after_change()
    return credential


def _reason(status, message, *secrets: str) -> str:
    """ "<status>: <message>", the message cut to ``MAX_REASON`` characters and
    any of ``secrets`` it quotes replaced by its hint (a vendor may echo the
    key it refused)."""
    text = " ".join(str(message or "").split())
    for secret in secrets:
        if secret:
            text = text.replace(secret, hint(secret))
    return f"{status}: {text[:MAX_REASON]}".strip()


def credential_refused(*, credential_id: int, status: int, message: str) -> bool:
    """The vendor refused this key (the gateway saw a 401 or 403): disable it
    with the reason "<status>: <message>" (at most 200 characters of the
    message, the key replaced by its hint if the vendor quoted it), record ``credential.disable`` by
    "system", take the channel down if no active key is left, and publish the
    change. Returns True when this call disabled the key; False when it was
    already disabled or no longer exists (a repeat is a no-op).

    Safe from any thread (a gateway worker's: its own transaction and
    database connection; it needs no request or event loop) and under
    concurrent calls for the same key (the rows are locked; one wins)."""
    node_id = Credential.objects.filter(pk=credential_id).values_list("node_id", flat=True).first()
    if node_id is None:
        return False
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(pk=node_id).first()
        credential = (
            Credential.objects.select_for_update().filter(pk=credential_id, node_id=node_id).first()
        )
        if node is None or credential is None or credential.status == CredentialStatus.DISABLED:
            return False
        reason = _reason(status, message, credential.secret, node.token)
        credential.status = CredentialStatus.DISABLED
        credential.disabled_reason = reason
        credential.disabled_at = timezone.now()
        credential.save(update_fields=["status", "disabled_reason", "disabled_at", "updated_at"])
        audit_record(
            actor=None,
            action="credential.disable",
            target=credential,
            organization=node.organization,
            params={**_describe(credential, node), "reason": reason, "by": "gateway"},
        )
        if not mark_down_if_keyless(node):
            touch(node)
        after_change()
    return True
