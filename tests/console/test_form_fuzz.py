"""Console forms: whatever is typed, never a 500. Every console route that
takes a POST (``tests/console/routes.py`` walks them), as the owner, with
the fields its page shows set to arbitrary and hostile values."""

from __future__ import annotations

import re

import pytest

from accounts.models import Role
from tests.console.routes import (
    build_world,
    classified,
    client_for,
    url_for,
)

_INPUT_NAME = re.compile(r'<(?:input|select|textarea)[^>]*\sname="([^"]+)"')
# Field names of POST-only buttons, which have no page of their own to read them from.
COMMON_FIELDS = (
    "name", "role", "reason", "amount", "reference", "grace_seconds", "organization",
    "period", "status", "members", "revoke", "action", "full", "email", "kind",
)  # fmt: skip


@pytest.fixture
def world(db, settings):
    yield from build_world(settings)


HOSTILE = [
    "", "0", "-1", "1.5", "1e309", "9" * 30, "NaN", "inf", "2025-13-45", "acme",
    "a\x00b", "<script>", "\uff11\uff12", "1,000",
]  # fmt: skip


def _form_values():
    from hypothesis import strategies as st

    return st.one_of(
        st.text(max_size=20),
        st.sampled_from(HOSTILE),
        st.integers(-(2**70), 2**70).map(str),
    )


def _post_form(client, user, url, data, failures: list[str]) -> None:
    client.force_login(user)
    try:
        response = client.post(url, data)
    except Exception as exc:
        failures.append(f"POST {url} {data!r}: raised {type(exc).__name__}: {exc}")
        return
    if response.status_code >= 500:
        failures.append(f"POST {url} {data!r}: {response.status_code}")


def _fuzz_form(client, user, url, fields, failures: list[str]) -> None:
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=5, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data=fields)
    def post(data):
        _post_form(client, user, url, data, failures)

    post()


def test_console_forms_never_answer_500(world):
    """Every console route that takes a POST, as the owner, with the fields its
    page shows (and common ones) set to arbitrary and hostile values: a form
    error, a message or a refusal, never a 500."""
    from hypothesis import strategies as st

    a = world["a"]
    failures: list[str] = []
    for route in classified():
        if route.access.kind != "page" or route.key in ("accounts:logout",):
            continue
        url = url_for(route, a)
        client = client_for(a.members[Role.OWNER])
        page = client.get(url)
        if page.status_code not in (200, 405):
            continue
        names = set(COMMON_FIELDS)
        if page.status_code == 200 and "text/html" in page.get("Content-Type", ""):
            names |= set(_INPUT_NAME.findall(page.content.decode())) - {"csrfmiddlewaretoken"}
        fields = st.dictionaries(st.sampled_from(sorted(names)), _form_values(), max_size=8)

        # Every field at once with each hostile value, then arbitrary mixes.
        owner = a.members[Role.OWNER].user
        for value in HOSTILE:
            _post_form(client, owner, url, dict.fromkeys(names, value), failures)
        _fuzz_form(client, owner, url, fields, failures)
    assert not failures, "\n".join(failures[:30])
