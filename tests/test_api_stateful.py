"""Schemathesis's stateful testing against the REST API: sequences of calls
that follow the schema's links (an id a create or list answers, fed to the
operations that take it: retrieve, update, rotate, revoke, delete), every
answer checked as ``tests.test_api_fuzz`` checks a single call (the same
``CHECKS``, the same ``RULES_BEYOND_THE_SCHEMA``). Positive and negative
inputs, in process through the WSGI application, bounded and derandomized.

``FUZZ_COVERAGE=1`` adds schemathesis's coverage phase (its deterministic
boundary and wrong-type cases for every parameter and property, a few
thousand calls: about a minute and a half on two cores, so not by default)."""

from __future__ import annotations

import os

import pytest
from django.db import transaction
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.config import GenerationConfig
from schemathesis.core.failures import FailureGroup

from tests.test_api_fuzz import (  # noqa: F401 - fixtures
    CHECKS,
    EXAMPLES,
    OPERATIONS,
    SCHEMA,
    in_test_transaction,
    owner_token,
)

pytestmark = pytest.mark.django_db

# Scenarios x steps: a few hundred calls, some seconds.
SCENARIOS = max(EXAMPLES // 2, 5)
STEPS = 6


def test_linked_calls_get_the_answers_the_schema_describes(owner_token):  # noqa: F811
    headers = {"Authorization": f"Bearer {owner_token}"}
    statuses: list[int] = []

    class Machine(SCHEMA.as_state_machine()):
        # Each scenario starts from the same data (a savepoint rolled back at its
        # end): links draw from earlier answers, and Hypothesis needs a scenario
        # replayed to draw the same way.
        def setup(self):
            self._savepoint = transaction.savepoint()

        def teardown(self):
            transaction.savepoint_rollback(self._savepoint)

        def get_call_kwargs(self, case):
            return {"headers": headers}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            statuses.append(response.status_code)
            case.validate_response(response, checks=CHECKS, headers=headers)

    Machine.run(
        settings=settings(
            max_examples=SCENARIOS,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
    )
    assert statuses, "no call was made"
    # Links were followed: some call succeeded, not every one was refused.
    assert any(200 <= status < 300 for status in statuses), statuses


@pytest.mark.skipif(not os.environ.get("FUZZ_COVERAGE"), reason="FUZZ_COVERAGE=1 runs it")
@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_coverage_phase_cases(operation, owner_token):  # noqa: F811
    headers = {"Authorization": f"Bearer {owner_token}"}
    failures = []
    for case in operation.schema.iter_coverage_cases(
        operation,
        generation_modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
        generation_config=GenerationConfig(),
    ):
        response = case.call(headers=headers)
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except FailureGroup as exc:
            failures.append(f"{case.as_curl_command()}\n{exc}")
    assert not failures, "\n\n".join(failures[:3])
