"""Fixtures for the alert tests: a receiver on ``console.kernel.hooks.OUTBOUND_EVENT``
that records every event an evaluation sends (what the outbound webhooks app
would deliver), and calls ingested through the real usage ingest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from accounts.actors import Actor
from accounts.models import Role
from console.kernel import hooks
from tests.factories import MembershipFactory, issue_key
from tests.usage.factories import event
from usage.ingest import ingest_events
from usage.ingest.directory import invalidate_directory
from usage.prices import invalidate_price_book
from usage.seed import seed_catalog

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


class Outbound:
    """Every OUTBOUND_EVENT fired, as the webhooks app receives it; an event
    id seen twice is one delivery (the hook's contract)."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def __call__(self, **kwargs) -> None:
        self.events.append(kwargs)

    def of(self, event_type: str) -> list[dict]:
        return [e for e in self.events if e["event_type"] == event_type]

    @property
    def fired(self) -> list[dict]:
        return self.of("alert.fired")

    @property
    def resolved(self) -> list[dict]:
        return self.of("alert.resolved")

    def clear(self) -> None:
        self.events.clear()


@pytest.fixture
def outbound():
    receiver = Outbound()
    hooks.OUTBOUND_EVENT.connect(receiver)
    yield receiver
    hooks.OUTBOUND_EVENT.disconnect(receiver)


@pytest.fixture(autouse=True)
def _fresh_usage_caches(settings):
    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 300
    invalidate_price_book()
    invalidate_directory()
    yield
    invalidate_price_book()
    invalidate_directory()


@pytest.fixture
def catalog(db):
    seed_catalog()


@pytest.fixture
def owner_actor(owner):
    return Actor(owner, "127.0.0.1")


@pytest.fixture
def developer(org):
    return MembershipFactory(organization=org, role=Role.DEVELOPER)


@pytest.fixture
def key(owner_actor, catalog):
    k, _raw = issue_key(owner_actor, name="prod")
    return k


def calls(key, n: int, *, at: datetime, spacing=timedelta(seconds=1), **fields) -> list[dict]:
    """Ingest ``n`` calls of ``key`` starting at ``at`` (the real ingest:
    call records, rollups, the prepaid debit)."""
    events = [event(key, started_at=at + spacing * i, **fields) for i in range(n)]
    ingest_events(events)
    return events
