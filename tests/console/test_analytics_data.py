"""Data for the analytics tests: an organization with synthetic calls pushed
through the real ingest path (so the rollups are the real ones), members of
every role, and a developer who owns exactly one of the keys."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from accounts.models import ApiKey, Membership, Organization, Role
from tests.factories import MembershipFactory
from usage.ingest import ingest_events
from usage.percentiles import EXACT_BELOW
from usage.synth import batched, ensure_org, generate

START = datetime(2025, 2, 3, tzinfo=UTC)
HOURS = 48
END = START + timedelta(hours=HOURS)
# A custom range covering the data, in the organization's (UTC) time.
RANGE = {"range": "custom", "from": "2025-02-03T00:00", "to": "2025-02-05T00:00"}


@dataclass
class Dataset:
    org: Organization
    members: dict[str, Membership]
    dev_key: ApiKey
    key_ids: list[int]


def build(slug: str = "analytics", *, calls: int = 3000, seed: int = 7) -> Dataset:
    org, keys = ensure_org(slug)
    events = generate(keys, start=START, hours=HOURS, calls=calls, seed=seed, end_limit=END)
    for chunk in batched(events, 500):
        ingest_events(chunk)
    members = {role: MembershipFactory(organization=org, role=role) for role in Role.values}
    dev_key = ApiKey.objects.get(pk=keys[2].key_id)
    dev_key.owner = members[Role.DEVELOPER].user
    dev_key.save(update_fields=["owner"])
    return Dataset(org, members, dev_key, [k.key_id for k in keys])


def exact_ms(values, q: float) -> float:
    """The exact quantile with the sketches' rank rule."""
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))] / 1000


def shown_ms(values, q: float, series_calls: int) -> float:
    """What a chart of ``series_calls`` calls shows for a bucket's ``values``:
    the nearest rank (exact) below ``EXACT_BELOW`` calls, else the sketches'
    rank rule (within 1 %)."""
    if series_calls >= EXACT_BELOW:
        return exact_ms(values, q)
    ordered = sorted(values)
    return ordered[max(1, math.ceil(round(q * len(ordered), 9))) - 1] / 1000


# --- fixtures (imported by the other analytics test modules) ----------------


@pytest.fixture
def fresh_usage_caches(settings):
    """Ingest caches prices, organizations and keys per process; a test's
    rolled-back rows must not leak into the next test through them."""
    from usage.ingest.directory import invalidate_directory
    from usage.prices import invalidate_price_book
    from usage.seed import seed_catalog

    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 300
    invalidate_price_book()
    invalidate_directory()
    seed_catalog()
    yield
    invalidate_price_book()
    invalidate_directory()


@pytest.fixture
def data(db, fresh_usage_caches) -> Dataset:
    return build()


@pytest.fixture
def other(db, fresh_usage_caches) -> Dataset:
    return build("analytics-other", calls=800, seed=99)
