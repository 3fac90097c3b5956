"""Helpers the finance console's page tests share: signing in as a member,
the page's HTML, the message a redirect leads to, who may open billing, and a
saved card as Stripe describes it."""

from __future__ import annotations

from types import SimpleNamespace

from accounts.models import Role

BILLING_ROLES = [Role.OWNER, Role.ADMIN, Role.FINANCE]
OTHER_ROLES = [Role.DEVELOPER, Role.VIEWER]
VISA = SimpleNamespace(id="pm_1", brand="visa", last4="4242", exp_month=12, exp_year=2034)


def as_member(client, membership):
    client.force_login(membership.user)
    return client


def html(response) -> str:
    return response.content.decode()


def follow_messages(client, response) -> str:
    assert response.status_code == 302, response.status_code
    return html(client.get(response.url))


def preview_and_confirm(client, url: str, data: dict):
    """A credit note as finance issues one: the form posted (a preview,
    nothing issued yet), then confirmed with the preview's token. Returns
    the confirming response."""
    import re

    preview = client.post(url, data)
    page = html(preview)
    assert preview.status_code == 200 and 'id="credit-note-confirm"' in page, page[-2000:]
    token = re.search(r'name="confirm" value="([^"]+)"', page).group(1)
    return client.post(url, {**data, "confirm": token})
