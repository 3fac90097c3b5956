"""Fixtures shared by the usage tests."""

from __future__ import annotations

import pytest

from accounts.models import ApiKey
from tests.factories import SubAccountFactory
from usage.ingest.directory import invalidate_directory
from usage.prices import invalidate_price_book
from usage.seed import seed_catalog


@pytest.fixture(autouse=True)
def _fresh_usage_caches(settings):
    """Ingest caches prices, organizations and keys per process; a test's
    rolled-back rows must not leak into the next test through them."""
    settings.USAGE_MAX_FUTURE_SKEW_SECONDS = 300
    settings.USAGE_RETENTION_DAYS = 0
    invalidate_price_book()
    invalidate_directory()
    yield
    invalidate_price_book()
    invalidate_directory()


@pytest.fixture
def catalog(db):
    """The seeded catalogue (the data migration ran it; this repeats it for
    databases flushed by transactional tests)."""
    seed_catalog()


def _key(organization, name, sub_account=None) -> ApiKey:
    # Ingest needs only the row; the key-issuing service is tested in accounts.
    return ApiKey.objects.create(
        organization=organization,
        sub_account=sub_account,
        name=name,
        public_id=f"t{ApiKey.objects.count():09d}{name[:4]}"[:16],
        secret_hash="0" * 64,
    )


@pytest.fixture
def team(org):
    return SubAccountFactory(organization=org, name="team-a")


@pytest.fixture
def key(org):
    """An org-level key of ``org`` (no sub-account)."""
    return _key(org, "main")


@pytest.fixture
def team_key(org, team):
    return _key(org, "team", team)


@pytest.fixture
def other_key(other_org):
    return _key(other_org, "globex")


@pytest.fixture
def make_key():
    return _key


@pytest.fixture
def a():
    """Organization "Acme" with a mix of calls (see tests/usage/log_fixtures.py)."""
    from tests.usage.log_fixtures import mixed_calls, tenant

    t = tenant("Acme", "acme")
    mixed_calls(t)
    return t


@pytest.fixture
def b():
    """A second organization, "Globex", with its own calls and node."""
    from tests.usage.log_fixtures import mixed_calls, tenant

    t = tenant("Globex", "globex", node_name="gpu-b")
    mixed_calls(t)
    return t


@pytest.fixture
def worker():
    """A real Celery worker on the configured broker and the test database."""
    import subprocess
    from pathlib import Path

    from tests.services import start_celery_worker

    proc = start_celery_worker(Path(__file__).resolve().parents[2])
    yield proc
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
