"""Small things people notice: the time zone chosen from a list, the last
owner not offered what would be refused, and an invitation link to copy."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from accounts.models import Invitation, Role
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db


def test_the_time_zone_is_chosen_from_a_list_common_ones_first(client, org, owner):
    client.force_login(owner.user)
    html = client.get(reverse("accounts:organization_settings")).content.decode()
    select = re.search(r'<select name="timezone"[^>]*>(.*?)</select>', html, re.S).group(1)
    zones = re.findall(r'<option value="([^"]+)"', select)
    assert zones[:2] == ["UTC", "Asia/Shanghai"]
    assert "Europe/Berlin" in zones and "America/Argentina/Buenos_Aires" in zones
    assert '<optgroup label="Common">' in select

    response = client.post(
        reverse("accounts:organization_settings"), {"name": org.name, "timezone": "Asia/Tokyo"}
    )
    assert response.status_code == 302
    org.refresh_from_db()
    assert org.timezone == "Asia/Tokyo"

    response = client.post(
        reverse("accounts:organization_settings"), {"name": org.name, "timezone": "Mars/Olympus"}
    )
    assert "Select a valid choice" in response.content.decode()
    org.refresh_from_db()
    assert org.timezone == "Asia/Tokyo"


def _row(html: str, email: str) -> str:
    start = html.index(f'<tr data-email="{email}">')
    return html[start : html.index("</tr>", start)]


def test_the_last_owner_is_not_offered_remove_or_change_role(client, org, owner, admin):
    client.force_login(owner.user)
    html = client.get(reverse("accounts:members")).content.decode()
    mine = _row(html, owner.user.email)
    assert "Remove…" not in mine and "<select" not in mine
    assert "The only owner" in mine
    theirs = _row(html, admin.user.email)
    assert "Remove…" in theirs and "<select" in theirs

    # With a second owner, both may be changed or removed.
    second = MembershipFactory(organization=org, role=Role.OWNER)
    html = client.get(reverse("accounts:members")).content.decode()
    for m in (owner, second):
        row = _row(html, m.user.email)
        assert "Remove…" in row and "<select" in row and "The only owner" not in row


def test_the_invitation_link_is_shown_once_with_a_copy_button(client, org, admin, finance):
    client.force_login(admin.user)
    response = client.post(
        reverse("accounts:members"),
        {"email": "new@example.com", "role": Role.DEVELOPER},
        follow=True,
    )
    assert response.redirect_chain == [(reverse("accounts:members"), 302)]
    html = response.content.decode()
    link = re.search(r'<input type="text" id="invite-link" value="([^"]+)" readonly>', html)
    assert link, html
    assert 'data-copy-target="invite-link"' in html
    assert "<script>" not in html and "onclick" not in html  # the CSP forbids inline script
    token = link.group(1).rstrip("/").rsplit("/", 1)[1]
    assert Invitation.objects.filter(organization=org, email="new@example.com").exists()
    # The one answer that shows the link is never stored by the browser or a proxy.
    assert response["Cache-Control"] == "no-store"

    # The link works...
    assert client.get(link.group(1)).status_code == 200
    # ...and is not shown again, to the inviter or anyone else.
    again = client.get(reverse("accounts:members")).content.decode()
    assert token not in again and 'id="invite-link"' not in again
    # Without the link, the members page is an ordinary one.
    assert "no-store" not in client.get(reverse("accounts:members")).get("Cache-Control", "")
    client.force_login(finance.user)
    assert token not in client.get(reverse("accounts:members")).content.decode()
