from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest

from accounts.actors import Actor
from accounts.models import Role
from tests.factories import MembershipFactory, OrganizationFactory

ROLES = [r.value for r in Role]


@pytest.fixture(scope="session", autouse=True)
def collected_static():
    """The static files collected as in production (hashed names, gzip and
    brotli copies, console.staticassets): every page's {% static %} reads the
    manifest, strictly, so a template naming a missing file fails its test.
    Kept across runs in var/test-static beside the code and collected again
    only when a source file changed, whatever CONSOLE_VAR_DIR a run uses."""
    from django.conf import settings
    from django.test.utils import override_settings

    from console.staticassets import collect_static

    root = Path(settings.BASE_DIR) / "var" / "test-static"
    with override_settings(STATIC_ROOT=root):
        collect_static()
        yield root


@pytest.fixture(scope="session")
def live_server(request, collected_static):
    """pytest-django's live server, except that static files are served as in
    production: by WhiteNoise from the collected files (hashed names,
    compressed copies, a long cache), not by Django's finder-based handler,
    which knows no hashed name."""
    from pytest_django.live_server_helper import LiveServer

    addr = (
        request.config.getvalue("liveserver")
        or os.getenv("DJANGO_LIVE_TEST_SERVER_ADDRESS")
        or "localhost"
    )
    server = LiveServer(addr, start=False)
    server.thread.static_handler = lambda application: application  # WhiteNoise's middleware
    server.start()
    yield server
    server.stop()


def pytest_collection_modifyitems(config, items):
    """CI runs the suite twice: on PostgreSQL and Redis, then embedded (SQLite,
    the filesystem broker, local caches). Its second pass sets
    ``CONSOLE_TEST_PASS=embedded-delta`` and runs only what can differ there:
    the browser tests (the UI in Chromium, the same pages either way) and the
    ``engine_independent`` ones (their own Redis servers, PDF rendering) are
    left out. A plain ``python -m pytest`` runs everything."""
    if os.environ.get("CONSOLE_TEST_PASS") != "embedded-delta":
        return
    keep, drop = [], []
    for item in items:
        same = item.get_closest_marker("browser") or item.get_closest_marker("engine_independent")
        (drop if same else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix) -> None:
    """A ``replica`` alias mirroring ``default`` (its own connection to the test
    database), for the read-replica tests: the router uses it only where
    ``DATABASE_REPLICA_URL`` is set, which no other test does."""
    import copy

    from django.conf import settings
    from django.db import connections

    if "replica" not in settings.DATABASES:
        replica = copy.deepcopy(settings.DATABASES["default"])
        replica["TEST"] = {"MIRROR": "default"}
        settings.DATABASES["replica"] = replica
        connections.settings["replica"] = connections.settings.get("replica", replica)


@pytest.fixture(autouse=True)
def _test_settings(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.API_KEY_PEPPER = "test-pepper-not-secret"
    settings.INVITATION_TTL_HOURS = 72
    # The tests' nodes, tenants' included, are simulators on 127.0.0.1: staff's
    # allow setting on. The SSRF tests (tests/inference_node/test_addresses.py,
    # tests/gateway_bridge/test_ssrf.py) turn the default rule back on.
    settings.NODE_ALLOW_PRIVATE_URLS = True


@pytest.fixture(autouse=True)
def _english_until_asked():
    """A request activates its user's language in the thread and leaves it
    there: a test that signed in a Chinese reader must not make the next
    test's services answer in Chinese."""
    from django.utils import translation

    translation.activate("en")
    yield
    translation.activate("en")


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Django's cache outlives a test (and, in Redis, the whole run): a login
    failure counted or a probe lock taken by one test must not reach the next
    test, nor the next run that reuses the same factory e-mail addresses."""
    from tests.services import clear_cache

    clear_cache()
    yield
    clear_cache()


@pytest.fixture(autouse=True)
def _broker_for_workers(request):
    """A test that starts a real worker needs the configured broker: RabbitMQ
    (``CELERY_BROKER_URL=amqp://...``) must answer, or the test is skipped
    with the reason (failed under CI)."""
    if request.node.get_closest_marker("celery_worker") is not None:
        from tests.services import require_broker

        require_broker()


@pytest.fixture(autouse=True)
def invitation_email_delay():
    """No broker in unit tests: the Celery ``delay`` is a mock."""
    with mock.patch("accounts.tasks.send_invitation_email.delay") as delay:
        yield delay


@pytest.fixture
def org(db):
    return OrganizationFactory(name="Acme", slug="acme")


@pytest.fixture
def other_org(db):
    return OrganizationFactory(name="Globex", slug="globex")


def _member(organization, role):
    return MembershipFactory(organization=organization, role=role)


@pytest.fixture
def owner(org):
    return _member(org, Role.OWNER)


@pytest.fixture
def admin(org):
    return _member(org, Role.ADMIN)


@pytest.fixture
def finance(org):
    return _member(org, Role.FINANCE)


@pytest.fixture
def developer(org):
    return _member(org, Role.DEVELOPER)


@pytest.fixture
def viewer(org):
    return _member(org, Role.VIEWER)


@pytest.fixture
def members(owner, admin, finance, developer, viewer):
    """One membership of ``org`` per role, keyed by role."""
    return {
        Role.OWNER: owner,
        Role.ADMIN: admin,
        Role.FINANCE: finance,
        Role.DEVELOPER: developer,
        Role.VIEWER: viewer,
    }


@pytest.fixture
def other_owner(other_org):
    return _member(other_org, Role.OWNER)


@pytest.fixture
def other_members(other_org, other_owner):
    """One membership of ``other_org`` per role, keyed by role."""
    out = {Role.OWNER: other_owner}
    for role in ROLES:
        if role != Role.OWNER:
            out[role] = _member(other_org, role)
    return out


@pytest.fixture
def actor_for():
    def make(membership, ip: str | None = "203.0.113.5") -> Actor:
        return Actor(membership, ip)

    return make


@pytest.fixture
def browser_page():
    """A headless Chromium page and its collected JavaScript errors."""
    from tests.services import chromium_page

    yield from chromium_page()
