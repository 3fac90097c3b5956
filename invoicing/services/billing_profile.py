"""The organization's billing profile: who the invoices name, the language
of its invoice PDFs, where billing mail goes, the low-balance threshold,
and (platform staff only) the commercial terms: tax rate, invoice discount
and payment terms."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils.translation import gettext as _

from accounts.facade import Perm, ValidationFailed, audit_record
from invoicing.models import BillingProfile, DocumentLanguage
from invoicing.services.ledger import low_balance_check

# What the organization's billing members may change: field → longest text.
TENANT_FIELDS = {"legal_name": 200, "address": 1000, "tax_id": 64, "billing_email": 254}
# Commercial terms: platform staff only (field → (lowest, highest)).
STAFF_FIELDS = {
    "tax_rate_ppm": (0, 1_000_000),
    "invoice_discount_ppm": (0, 1_000_000),
    "payment_terms_days": (0, 365),
}
# No threshold above this (micro-units: a trillion currency units).
MAX_THRESHOLD = 10**18


def _is_staff(actor) -> bool:
    user = getattr(actor, "user", None)
    return bool(user is not None and user.is_active and user.is_staff)


def _clean(fields: dict, *, staff: bool) -> dict:
    errors: dict[str, str] = {}
    data: dict = {}
    for name, value in fields.items():
        if name in TENANT_FIELDS:
            text = "" if value is None else str(value).strip()
            if len(text) > TENANT_FIELDS[name]:
                errors[name] = _("At most %(count)s characters.") % {"count": TENANT_FIELDS[name]}
            elif name == "billing_email" and text:
                try:
                    validate_email(text)
                except ValidationError:
                    errors[name] = _("Enter a valid e-mail address.")
            data[name] = text
        elif name == "document_language":
            if value not in DocumentLanguage.values:
                errors[name] = _("Choose one of the languages offered.")
            data[name] = value
        elif name == "low_balance_threshold":
            if value is not None and (type(value) is not int or not 0 <= value <= MAX_THRESHOLD):
                errors[name] = _("Give the threshold as a positive amount, or none.")
            data[name] = value
        elif name in STAFF_FIELDS:
            low, high = STAFF_FIELDS[name]
            if not staff:
                errors[name] = _("Commercial terms are set by the platform's staff; ask them.")
            elif type(value) is not int or not low <= value <= high:
                errors[name] = _("A whole number from %(low)s to %(high)s.") % {
                    "low": low,
                    "high": high,
                }
            data[name] = value
        else:
            errors[name] = _("Not a billing setting.")
    if errors:
        raise ValidationFailed.from_fields(errors)
    return data


def billing_profile_update(*, actor, **fields) -> BillingProfile:
    """Change the actor's organization's billing profile (``Perm.BILLING_MANAGE``,
    one transaction, audited with the names of the changed fields). Tax rate,
    discount and payment terms are refused with a field error unless the
    actor is platform staff. A changed threshold re-arms the low-balance
    notice and checks the balance against it once committed."""

    actor.require(Perm.BILLING_MANAGE)
    data = _clean(fields, staff=_is_staff(actor))
    with transaction.atomic():
        profile, _created = BillingProfile.objects.select_for_update().get_or_create(
            organization_id=actor.organization_id
        )
        changed = {k: v for k, v in data.items() if getattr(profile, k) != v}
        if not changed:
            return profile
        for key, value in changed.items():
            setattr(profile, key, value)
        if "low_balance_threshold" in changed:
            profile.low_balance_notified_at = None
        profile.save()
        audit_record(
            actor=actor,
            action="billing_profile.update",
            target=profile,
            params={"changed": sorted(changed)},
        )
        if "low_balance_threshold" in changed and profile.low_balance_threshold is not None:
            org_id = actor.organization_id
            transaction.on_commit(lambda: low_balance_check(organization_id=org_id))
    return profile
