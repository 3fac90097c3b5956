"""The API schema (every app's endpoints, invoicing included) generates and
validates without a warning."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_the_api_schema_generates_without_warnings(tmp_path):
    from django.core.management import call_command

    out = tmp_path / "schema.yml"
    # --fail-on-warn: a colliding enum name (StatusE75Enum) or any other warning fails
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema = out.read_text()
    assert "SubAccountStatusEnum" in schema and "NodeStatusEnum" in schema
    assert "StatusE75Enum" not in schema
