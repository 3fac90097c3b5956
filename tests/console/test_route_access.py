"""Who may open each console and API route: every route of the URL
configuration (``tests/console/routes.py`` walks and classifies them) is
requested by an anonymous visitor, by a member of each role, by a member of
another organization and by a user without one.

What is checked, for every route:

* nobody ever gets a 500 (an exception in a view fails the sweep);
* anonymous: pages redirect to the login page, the API answers 401/403,
  public routes answer, the Stripe webhook answers 400 without a signature,
  the Django admin sends everyone (staff aside) to its own login;
* each role: a page or endpoint its permissions do not open answers 403 (or
  405 for a method the route does not take), one they open does not;
* object routes filled with another organization's objects answer 404 (403
  for a role the route is closed to): never 200, never a redirect that acted;
  the same routes filled with the member's own organization's objects open
  (so the 404 is the isolation, not a broken fixture).

The gateway's paths (``/v1/*``, ``/v1beta/*``) are not Django URLs; they are
covered by ``tests/gateway_bridge/test_key_isolation.py`` through the real
gateway.
"""

from __future__ import annotations

import pytest
from django.urls import resolve

from accounts.models import Role
from tests.console.routes import (
    ROLES,
    Sweep,
    build_world,
    classified,
    client_for,
    fill,
    methods_to_try,
    param_kind,
    snapshot,
    sweep_anonymous,
    sweep_member,
    url_for,
)
from tests.factories import UserFactory


@pytest.fixture
def world(db, settings):
    yield from build_world(settings)


def test_every_route_isclassified():
    routes = classified()
    # The walk reaches every kind of route: console, partials, exports, API, webhook, admin.
    keys = {r.key for r in routes}
    for expected in ("console:overview", "usage:calls_export", "api-key-detail", "stripe-webhook"):
        assert expected in keys
    assert any(r.access.kind == "admin" for r in routes)
    # Every filled URL resolves back to its own pattern.
    for route in routes:
        if route.access.kind == "admin":
            continue
        values = {p: "1" if param_kind(route, p) != "call" else "req-1" for p in route.params}
        if route.key == "accounts:invitation_accept":
            values = {"token": "abc"}
        match = resolve(fill(route.template, values))
        local = route.key.rsplit(":", 1)[-1]
        assert match.url_name == local, (route.key, match.url_name)


def test_anonymous_visitors(world):
    sweep = Sweep()
    sweep_anonymous(sweep, classified(), world["a"])
    assert not sweep.failures, sweep.report()


@pytest.mark.parametrize("role", ROLES)
def test_each_role(world, role):
    sweep = Sweep()
    a, b = world["a"], world["b"]
    before = snapshot(b.org)
    sweep_member(sweep, classified(), a.members[role], role, a, b, role)
    assert not sweep.failures, sweep.report()
    assert snapshot(b.org) == before, "a request changed another organization's data"


def test_member_of_another_organization(world):
    """Org B's owner: everything of org A is out of reach, its own opens."""
    sweep = Sweep()
    a, b = world["a"], world["b"]
    before = snapshot(a.org)
    sweep_member(sweep, classified(), b.members[Role.OWNER], Role.OWNER, b, a, "outsider")
    assert not sweep.failures, sweep.report()
    assert snapshot(a.org) == before, "a request changed another organization's data"


def test_a_user_without_an_organization_is_refused_everywhere(world):
    sweep = Sweep()
    client = client_for()
    client.force_login(UserFactory())
    for route in classified():
        if route.access.kind not in ("page", "api"):
            continue
        url = url_for(route, world["a"])
        for method in methods_to_try(route):
            r = sweep.send(client, method, url, api=route.access.kind == "api")
            if route.key in ("accounts:password_change", "accounts:two_factor"):
                sweep.expect("no-org", method, url, r, {200, 302}, "own sign-in settings")
            else:
                sweep.expect("no-org", method, url, r, {403, 404, 405}, "no organization")
    assert not sweep.failures, sweep.report()
