"""Writing the prepaid ledger.

Every movement is a new ``LedgerEntry`` keyed by (organization, kind,
reference), so a retried or redelivered write is a no-op. After a
non-usage movement commits, ``console.kernel.hooks.BALANCE_CHANGED`` fires (the
gateway connects to it and re-reads the balance); usage debits are the
gateway's own settled reservations, so it already knows them. Usage debits
come from ``console.kernel.hooks.CALLS_INGESTED`` (``InvoicingConfig.ready``
connects ``ledger_usage_debit``), with usage's per-organization totals."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils import timezone as tz
from django.utils import translation
from django.utils.translation import gettext as _

from accounts.facade import (
    BillingMode,
    Membership,
    Organization,
    Perm,
    Role,
    ValidationFailed,
    audit_record,
)
from console.kernel import hooks
from console.kernel.hooks import UsageTotals
from console.kernel.money import format_amount
from invoicing.models import BillingProfile, LedgerEntry, LedgerKind
from invoicing.rules import usage_debit_reason
from invoicing.selectors import prepaid_balance

logger = logging.getLogger(__name__)

# Callers that are not usage ingest must pass an explicit, human-meaningful reason.
_NEEDS_REASON = {LedgerKind.ADJUSTMENT, LedgerKind.GRANT}
# No single movement is larger than this (a typo guard: 10 million currency units).
MAX_ENTRY = 10_000_000 * 1_000_000


def _notify_balance_changed(organization_id: int, delta: int) -> None:
    try:
        hooks.BALANCE_CHANGED.fire(organization_id=organization_id, delta=delta)
    except Exception:  # the ledger has committed; a gateway refresh will catch up
        logger.exception("balance_changed notification failed for org %s", organization_id)


def ledger_entry_create(
    *,
    organization_id: int,
    kind: str,
    amount: int,
    reference: str,
    reason: str = "",
    created_by=None,
    currency: str | None = None,
) -> tuple[LedgerEntry, bool]:
    """Append one entry; ``(entry, created)``. An entry with the same
    (organization, kind, reference) already stored is returned unchanged."""
    if kind not in LedgerKind.values:
        raise ValidationFailed.from_fields({"kind": f"Unknown ledger entry kind {kind!r}."})
    if type(amount) is not int:
        raise ValidationFailed.from_fields({"amount": "Amounts are integer micro-units."})
    if amount == 0:
        raise ValidationFailed.from_fields({"amount": _("A ledger entry cannot be zero.")})
    if abs(amount) > MAX_ENTRY:
        raise ValidationFailed.from_fields({"amount": _("That amount is too large.")})
    if not reference or len(reference) > 128:
        raise ValidationFailed.from_fields({"reference": "A reference of 1-128 characters."})
    if kind in _NEEDS_REASON and not reason.strip():
        raise ValidationFailed.from_fields({"reason": _("Give a reason for this entry.")})
    with transaction.atomic():
        existing = LedgerEntry.objects.filter(
            organization_id=organization_id, kind=kind, reference=reference
        ).first()
        if existing is not None:
            return existing, False
        if currency is None:
            currency = Organization.objects.values_list("currency", flat=True).get(
                pk=organization_id
            )
        try:
            with transaction.atomic():
                entry = LedgerEntry.objects.create(
                    organization_id=organization_id,
                    kind=kind,
                    amount=amount,
                    currency=currency,
                    reference=reference,
                    reason=reason,
                    created_by=created_by,
                )
        except IntegrityError:
            # A concurrent writer stored the same reference first.
            return LedgerEntry.objects.get(
                organization_id=organization_id, kind=kind, reference=reference
            ), False
        if kind != LedgerKind.USAGE:
            transaction.on_commit(lambda: _notify_balance_changed(organization_id, amount))
        transaction.on_commit(lambda: low_balance_check(organization_id=organization_id))
    return entry, True


# A manual entry without a reference of its own repeats an identical one
# (same member, kind, amount and reason) only after this long: sooner, it is
# a double submit or a retried request, and the first entry is returned.
MANUAL_REPEAT_WINDOW = timedelta(minutes=10)


def _manual_reference(*, actor, kind: str, amount: int, reason: str) -> tuple[str, str]:
    """``(prefix, reference)`` for a manual entry that came without one: the
    prefix is a digest of what was asked, the suffix the time."""
    asked = f"{actor.membership.pk}\n{kind}\n{amount}\n{reason.strip()}"
    prefix = f"manual:{hashlib.sha256(asked.encode()).hexdigest()[:32]}:"
    return prefix, f"{prefix}{tz.now().timestamp():.6f}"


def prepaid_adjust(
    *,
    actor,
    amount: int,
    reason: str,
    kind: str = LedgerKind.ADJUSTMENT,
    reference: str | None = None,
) -> LedgerEntry:
    """A finance member's manual grant or adjustment, with a reason (audited).

    Idempotent: ``reference`` (the console form sends a one-time token) makes
    a resubmitted form one entry. Without one, the same member asking for the
    same kind, amount and reason again within ``MANUAL_REPEAT_WINDOW`` gets
    the first entry back instead of a second one."""
    actor.require(Perm.BILLING_MANAGE)
    if kind not in (LedgerKind.ADJUSTMENT, LedgerKind.GRANT):
        raise ValidationFailed.from_fields({"kind": _("Only grants and adjustments are manual.")})
    with transaction.atomic():
        ref = reference
        if not ref:
            # The organization's row serializes two submits of the same form.
            Organization.objects.select_for_update().filter(pk=actor.organization_id).first()
            prefix, ref = _manual_reference(actor=actor, kind=kind, amount=amount, reason=reason)
            repeat = (
                LedgerEntry.objects.filter(
                    organization_id=actor.organization_id,
                    kind=kind,
                    reference__startswith=prefix,
                    created_at__gte=tz.now() - MANUAL_REPEAT_WINDOW,
                )
                .order_by("-created_at", "-id")
                .first()
            )
            if repeat is not None:
                return repeat
        entry, created = ledger_entry_create(
            organization_id=actor.organization_id,
            kind=kind,
            amount=amount,
            reference=ref,
            reason=reason,
            created_by=actor.user,
        )
        if created:
            audit_record(
                actor=actor,
                action=f"ledger.{kind}",
                target=entry,
                params={
                    "amount": format_amount(amount, entry.currency, exact=True),
                    "reason": reason,
                },
            )
    return entry


def _batch_reference(request_ids: Sequence[str]) -> str:
    digest = hashlib.sha256("\n".join(sorted(request_ids)).encode()).hexdigest()
    return f"ingest:{digest[:48]}"


def ledger_usage_debit(*, totals: Sequence[UsageTotals]) -> int:
    """The receiver of ``console.kernel.hooks.CALLS_INGESTED``: usage ingest calls it
    inside its transaction with the totals of the calls it has just stored,
    one per organization. Writes one negative usage entry per prepaid
    organization, the sum of the calls' costs. The reference is a digest of
    the calls' request ids, so the same calls can never be debited twice (a
    redelivered batch inserts nothing and does not get here). Returns the
    number of entries written."""
    per_org = {t.organization_id: t for t in totals}
    if not per_org:
        return 0
    prepaid = dict(
        Organization.objects.filter(
            pk__in=list(per_org), billing_mode=BillingMode.PREPAID
        ).values_list("pk", "currency")
    )
    entries = [
        LedgerEntry(
            organization_id=org_id,
            kind=LedgerKind.USAGE,
            amount=-t.cost,
            currency=prepaid[org_id],
            reference=_batch_reference(t.request_ids),
            reason=usage_debit_reason(t.calls),
        )
        for org_id, t in sorted(per_org.items())
        if org_id in prepaid and t.cost
    ]
    if entries:
        LedgerEntry.objects.bulk_create(entries, ignore_conflicts=True)
        watched = set(
            BillingProfile.objects.filter(
                organization_id__in=[e.organization_id for e in entries],
                low_balance_threshold__isnull=False,
                low_balance_notified_at__isnull=True,
            ).values_list("organization_id", flat=True)
        )
        for org_id in sorted(watched):
            transaction.on_commit(lambda o=org_id: low_balance_check(organization_id=o))
    return len(entries)


def _recipients(organization_id: int, profile: BillingProfile) -> list[str]:
    if profile.billing_email:
        return [profile.billing_email]
    return sorted(
        Membership.objects.filter(
            organization_id=organization_id,
            role__in=[Role.OWNER, Role.ADMIN, Role.FINANCE],
            user__is_active=True,
        ).values_list("user__email", flat=True)
    )


def _by_language(organization_id: int, addresses: list[str]) -> dict[str, list[str]]:
    """The recipients grouped by the language their mail is written in: each
    member's own saved console language (``User.language``, issue 18; the
    site's default, English, when they chose none). An address that is no
    member's (a billing e-mail such as accounts@…) gets the language of the
    organization's first owner who chose one, else the site's default."""
    members = Membership.objects.filter(organization_id=organization_id, user__is_active=True)
    saved = {
        email.lower(): language or settings.LANGUAGE_CODE
        for email, language in members.values_list("user__email", "user__language")
    }
    owner = (
        members.filter(role=Role.OWNER)
        .exclude(user__language="")
        .order_by("pk")
        .values_list("user__language", flat=True)
        .first()
    )
    fallback = owner or settings.LANGUAGE_CODE
    groups: dict[str, list[str]] = {}
    for address in addresses:
        groups.setdefault(saved.get(address.lower(), fallback), []).append(address)
    return groups


def _low_balance_mail(org, balance: int, threshold_micro: int) -> tuple[str, str]:
    """The notice's subject and body in the active language."""
    subject = _("%(org)s: prepaid balance is low") % {"org": org.name}
    body = _(
        "The prepaid balance of %(org)s is %(balance)s, below your threshold of %(threshold)s.\n"
        "Top up at %(url)s to keep calls flowing.\n"
    ) % {
        "org": org.name,
        "balance": format_amount(balance, org.currency),
        "threshold": format_amount(threshold_micro, org.currency),
        "url": f"{settings.CONSOLE_BASE_URL}/billing/balance/",
    }
    return subject, body


def _send_low_balance(org, balance: int, threshold_micro: int, to: list[str]) -> None:
    """One mail per language among the recipients, each in theirs."""
    for language, addresses in _by_language(org.pk, to).items():
        with translation.override(language):
            subject, body = _low_balance_mail(org, balance, threshold_micro)
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, addresses)


def low_balance_check(*, organization_id: int) -> bool:
    """Send the low-balance notice once per crossing below the threshold;
    re-arm when the balance is back at or above it. True when a notice went."""
    with transaction.atomic():
        profile = (
            BillingProfile.objects.select_for_update()
            .filter(organization_id=organization_id, low_balance_threshold__isnull=False)
            .select_related("organization")
            .first()
        )
        if profile is None:
            return False
        balance = prepaid_balance(organization_id)
        below = balance < profile.low_balance_threshold
        if not below:
            if profile.low_balance_notified_at is not None:
                profile.low_balance_notified_at = None
                profile.save(update_fields=["low_balance_notified_at", "updated_at"])
            return False
        if profile.low_balance_notified_at is not None:
            return False
        profile.low_balance_notified_at = tz.now()
        profile.save(update_fields=["low_balance_notified_at", "updated_at"])
        org = profile.organization
        to = _recipients(organization_id, profile)
        threshold = profile.low_balance_threshold
        if to:
            transaction.on_commit(lambda: _send_low_balance(org, balance, threshold, to))
    return True
