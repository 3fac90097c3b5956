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
