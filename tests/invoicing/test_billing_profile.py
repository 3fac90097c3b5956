"""Billing settings through ``billing_profile_update``: rights, audit, and
commercial terms that only platform staff may set."""

from __future__ import annotations

import pytest

from accounts.models import AuditEvent, Role

pytestmark = pytest.mark.django_db


def test_billing_profile_update_checks_rights_audits_and_refuses_terms_to_tenants(
    org, members, actor_for
):
    from accounts.errors import PermissionDenied, ValidationFailed
    from invoicing.models import BillingProfile
    from invoicing.services import billing_profile_update

    finance = actor_for(members[Role.FINANCE])
    with pytest.raises(PermissionDenied):
        billing_profile_update(actor=actor_for(members[Role.DEVELOPER]), legal_name="Evil")
    profile = billing_profile_update(
        actor=finance, legal_name=" Acme GmbH ", billing_email="ap@acme.example"
    )
    assert (profile.legal_name, profile.billing_email) == ("Acme GmbH", "ap@acme.example")
    audit = AuditEvent.objects.get(action="billing_profile.update")
    assert audit.params == {"changed": ["billing_email", "legal_name"]}
    # Commercial terms are the platform's: a tenant gets field errors, nothing changes
    with pytest.raises(ValidationFailed) as exc:
        billing_profile_update(
            actor=finance, tax_rate_ppm=0, invoice_discount_ppm=500_000, payment_terms_days=90
        )
    assert set(exc.value.fields) == {"tax_rate_ppm", "invoice_discount_ppm", "payment_terms_days"}
    with pytest.raises(ValidationFailed) as bad:
        billing_profile_update(actor=finance, billing_email="nope", stripe_customer_id="cus_x")
    assert set(bad.value.fields) == {"billing_email", "stripe_customer_id"}
    profile = BillingProfile.objects.get(organization=org)
    assert (profile.invoice_discount_ppm, profile.payment_terms_days) == (0, 14)
    assert profile.stripe_customer_id == ""
    assert AuditEvent.objects.filter(action="billing_profile.update").count() == 1
    # Platform staff may set them
    staff = members[Role.OWNER]
    staff.user.is_staff = True
    staff.user.save(update_fields=["is_staff"])
    profile = billing_profile_update(
        actor=actor_for(staff), invoice_discount_ppm=50_000, payment_terms_days=30
    )
    assert (profile.invoice_discount_ppm, profile.payment_terms_days) == (50_000, 30)
