"""Schemathesis against the REST API's own OpenAPI description
(``/api/v1/schema/``): for every operation, generated inputs (valid and
invalid bodies, query strings and path ids) get answers the schema
describes. Every check this schemathesis offers for single calls runs
(``CHECKS``): no 500, documented status codes, content types, headers and
bodies, invalid input refused, valid input accepted.

Valid input is accepted unless the refusal names only a field whose rule no
schema can state (``RULES_BEYOND_THE_SCHEMA``: a referenced object that does
not exist, a duplicate name, a date in the past, a private address, a model
name outside the catalogue); any
other refusal of schema-valid input fails the test.

Calls are made in process through the WSGI application, as an owner with a
personal access token; the owner's organization has one object of each
kind, so some generated ids hit something. Bounded and derandomized (a
fixed number of examples per operation, no deadline) to stay fast and
repeatable."""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis import checks as st_checks

from accounts.actors import Actor
from accounts.models import Role
from tests.factories import MembershipFactory, OrganizationFactory, issue_key

pytestmark = pytest.mark.django_db


def _load_schema():
    # Schemathesis's own pytest plugin does not run under pytest 9 (it reads a
    # pytest internal that is gone), so the operations are parametrized here and
    # each one's strategy is drawn with plain Hypothesis.
    from django.core.wsgi import get_wsgi_application

    return schemathesis.openapi.from_wsgi("/api/v1/schema/", get_wsgi_application())


SCHEMA = _load_schema()
OPERATIONS = [op.ok() for op in SCHEMA.get_all_operations()]


def _cases(operation):
    modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
    strategies = []
    for mode in modes:
        try:
            strategies.append(operation.as_strategy(generation_mode=mode))
        except Exception:  # noqa: S112 - an operation that cannot be made invalid
            continue
    return st.one_of(strategies)


# FUZZ_EXAMPLES raises the count for a deeper run (e.g. FUZZ_EXAMPLES=300).
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))

# Fields whose rule depends on data, not on the shape of the request.
_IDS = {"sub_account", "key", "node", "invoice", "hand_over_to", "members"}
_ALERT_FIELDS = {
    "name", "kind", "scope", "api_key", "sub_account", "node", "model", "percents", "threshold",
    "amount", "window_minutes", "min_calls",
}  # fmt: skip
RULES_BEYOND_THE_SCHEMA: dict[str, set[str]] = {
    "GET /api/v1/calls/": _IDS | {"before", "after", "from", "to"},
    "GET /api/v1/calls/export.csv": _IDS | {"from", "to"},
    # A range's end after its start; a tag key when grouping by tag.
    "GET /api/v1/spend/attribution/": _IDS | {"from", "to", "tag_key"},
    "POST /api/v1/keys/": _IDS | {"name", "expires_at", "ip_allowlist", "allowed_models"},
    "PATCH /api/v1/keys/{id}/": {"name", "expires_at", "ip_allowlist", "allowed_models"},
    "POST /api/v1/sub-accounts/": {"name", "allowed_models"},
    "PATCH /api/v1/sub-accounts/{id}/": {"name", "members", "allowed_models"},
    "DELETE /api/v1/members/{id}/": {"hand_over_to", "keys"},
    "PATCH /api/v1/members/{id}/": {"role"},
    "POST /api/v1/invitations/": {"email", "role"},
    "POST /api/v1/credit-notes/": {"invoice", "lines", "amount", "non_field_errors"},
    "POST /api/v1/invoices/{id}/payments/": {"reference", "amount_minor", "paid_on"},
    # The model must be an enabled chat model of the catalogue; steps x seconds per step
    # must fit CAPACITY_MAX_DURATION_SECONDS.
    "POST /api/v1/load-tests/": {"model", "steps", "step_seconds"},
    "POST /api/v1/nodes/": {
        "base_url", "preset", "kind", "api_path", "health_check", "models", "labels",
        "credentials", "name", "token",
    },
    # A URL's address, an e-mail destination's recipients, a unique name.
    "POST /api/v1/webhooks/destinations/": {"name", "url", "recipients", "events", "language"},
    "PATCH /api/v1/webhooks/destinations/{id}/": {"name", "url", "recipients", "events"},
    "PATCH /api/v1/nodes/{id}/": {
        "base_url", "preset", "kind", "api_path", "health_check", "models", "labels", "name",
        "token",
    },
    # What an alert rule needs depends on its kind and scope (which subject, which
    # threshold, a window or not): rules across fields, beyond a schema.
    "POST /api/v1/alert-rules/": _ALERT_FIELDS,
    "PATCH /api/v1/alert-rules/{id}/": _ALERT_FIELDS,
}  # fmt: skip


def positive_data_acceptance(ctx, response, case):
    """Schemathesis's check, except for a 400 that names only fields listed
    for the operation in ``RULES_BEYOND_THE_SCHEMA``."""
    if response.status_code == 400:
        try:
            fields = set((response.json()["error"].get("fields") or {"": None}).keys())
        except (ValueError, KeyError, AttributeError):
            fields = {""}
        if fields <= RULES_BEYOND_THE_SCHEMA.get(case.operation.label, set()):
            return None
    return st_checks.positive_data_acceptance(ctx, response, case)


CHECKS = [
    st_checks.not_a_server_error,
    st_checks.status_code_conformance,
    st_checks.content_type_conformance,
    st_checks.response_headers_conformance,
    st_checks.response_schema_conformance,
    st_checks.negative_data_rejection,
    positive_data_acceptance,
    st_checks.missing_required_header,
    st_checks.unsupported_method,
    st_checks.use_after_free,
    st_checks.ensure_resource_availability,
]


@pytest.fixture
def in_test_transaction():
    """As Django's test client does: a request through the real WSGI handler
    must not close the test's connection (it lives in the test's transaction)."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def owner_token(db, settings, in_test_transaction):
    """A personal access token of an owner whose organization has a key, a
    sub-account, an invitation and a node (ids 1.. are likely to exist)."""
    from accounts.services import (
        invitation_create,
        personal_access_token_issue,
        sub_account_create,
    )
    from tests.inference_node.factories import NodeFactory

    settings.STRIPE_SECRET_KEY = ""  # the API never reaches Stripe here
    org = OrganizationFactory(name="Fuzz", slug="fuzz")
    owner = MembershipFactory(organization=org, role=Role.OWNER)
    actor = Actor(owner, "203.0.113.5")
    MembershipFactory(organization=org, role=Role.VIEWER)
    sub_account_create(actor=actor, name="team")
    issue_key(actor)
    invitation_create(actor=actor, email="new@fuzz.example", role="viewer")
    NodeFactory(organization=org, base_url="http://127.0.0.1:9/v1", serves=["sim-chat-small"])
    _token, raw = personal_access_token_issue(actor=actor, name="fuzz")
    return raw


@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_every_answer_is_the_one_the_schema_describes(operation, owner_token):
    headers = {"Authorization": f"Bearer {owner_token}"}
    statuses: list[int] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(case=_cases(operation))
    def run(case):
        # (The node's URL is a closed loopback port: a node test fails at once.)
        response = case.call(headers=headers)
        statuses.append(response.status_code)
        case.validate_response(response, checks=CHECKS, headers=headers)

    run()
    # The token was accepted: the fuzz reached the views, not just authentication.
    assert any(status not in (401, 403) for status in statuses), statuses


def test_every_api_operation_is_fuzzed():
    labels = {op.label for op in OPERATIONS}
    assert len(labels) >= 30
    for expected in (
        "GET /api/v1/keys/",
        "POST /api/v1/keys/{id}/rotate/",
        "POST /api/v1/keys/{id}/secret/",
        "DELETE /api/v1/members/{id}/",
        "POST /api/v1/invoices/{id}/payments/",
        "GET /api/v1/calls/",
    ):
        assert expected in labels, sorted(labels)
    assert set(RULES_BEYOND_THE_SCHEMA) <= labels, set(RULES_BEYOND_THE_SCHEMA) - labels
