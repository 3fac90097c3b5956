"""Fixtures shared by the accounts tests."""

from __future__ import annotations

import pytest

from accounts import throttle
from accounts.models import ApiKey, AuditEvent, Invitation, Membership, SubAccount
from tests.factories import SubAccountFactory

# Model names the accounts tests allow-list: in the catalogue, as every
# allow-list entry must be (``accounts.services._common``).
TEST_MODELS = ("gpt-a", "gpt-b", "gpt-c", "gpt-z", "m-a", "m-b", "m-small", "m-large", "m-huge")


@pytest.fixture(autouse=True)
def _catalogue_models(request):
    if "db" not in request.fixturenames and not any(request.node.iter_markers("django_db")):
        return
    request.getfixturevalue("db")
    from usage.models import CatalogModel

    for name in TEST_MODELS:
        CatalogModel.objects.get_or_create(name=name, defaults={"display_name": name})


@pytest.fixture
def admin_actor(admin, actor_for):
    return actor_for(admin)


@pytest.fixture
def owner_actor(owner, actor_for):
    return actor_for(owner)


@pytest.fixture
def sub(org):
    return SubAccountFactory(
        organization=org,
        name="team-a",
        allowed_models=["gpt-a", "gpt-b"],
        spend_cap_daily=10_000_000,
        spend_cap_monthly=100_000_000,
        rpm_limit=100,
        tpm_limit=50_000,
    )


class Snapshot:
    """Row counts of everything a service may write, to prove nothing partial was saved."""

    MODELS = (ApiKey, AuditEvent, Invitation, Membership, SubAccount)

    def __init__(self):
        self.counts = self.take()

    def take(self):
        return {m.__name__: m.objects.count() for m in self.MODELS}

    def unchanged(self):
        return self.take() == self.counts


@pytest.fixture
def clock(monkeypatch):
    """The sign-in throttle's clock, standing still until a test moves it."""

    class Clock:
        now = 1_800_000_000.0

        def advance(self, seconds: float) -> None:
            self.now += seconds

    c = Clock()
    monkeypatch.setattr(throttle, "_now", lambda: c.now)
    return c
