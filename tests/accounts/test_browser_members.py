"""Members in real headless Chromium, under the Content-Security-Policy: the
organization switcher submits on change (console.js, no inline handler), an
inline script is refused, and removing a member hands their key over through
the confirmation page, with no JavaScript error on the way."""

from __future__ import annotations

import pytest

from accounts.models import ApiKey, Membership, Role
from tests.factories import MembershipFactory, OrganizationFactory, issue_key
from tests.services import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_switch_organization_and_hand_a_leavers_key_over(
    live_server, owner, developer, actor_for, browser_page
):
    page, errors = browser_page
    other = OrganizationFactory(name="Zeta Labs", slug="zeta")
    MembershipFactory(organization=other, user=owner.user, role=Role.OWNER)
    key, _ = issue_key(actor_for(developer), "nightly-batch")
    sign_in(page, live_server.url, owner.user)

    # The switcher submits itself on change, through console.js.
    page.select_option("#org-select", str(other.pk))
    page.wait_for_selector("#org-select option[selected]:has-text('Zeta Labs')", state="attached")
    page.select_option("#org-select", str(owner.organization_id))
    page.wait_for_selector(
        f"#org-select option[selected]:has-text('{owner.organization.name}')", state="attached"
    )

    # An inline script (as injected markup would be) is refused by the policy.
    page.goto(f"{live_server.url}/members/")
    page.evaluate(
        "() => { const s = document.createElement('script');"
        " s.textContent = 'window.injected = 1'; document.body.appendChild(s); }"
    )
    assert page.evaluate("() => window.injected") is None
    assert any("Content Security Policy" in e for e in errors)
    errors.clear()

    # Remove the developer, handing their key to the owner.
    page.click(f"tr[data-email='{developer.user.email}'] a.button.danger")
    page.wait_for_selector("#member-keys li:has-text('nightly-batch')")
    page.check("input[name=keys][value=hand_over]")
    page.select_option("#id_hand_over_to", str(owner.pk))
    page.click("#member-remove-form button[type=submit]")
    page.wait_for_selector(f"text={developer.user.email} removed.")
    assert not Membership.objects.filter(pk=developer.pk).exists()
    assert ApiKey.objects.get(pk=key.pk).owner_id == owner.user_id
    assert errors == []
