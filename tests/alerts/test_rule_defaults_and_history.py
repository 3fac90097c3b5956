"""A spend-cap rule made without percents watches 50, 80 and 100 % of each cap
(as documented), and the history shows an alert's value and threshold as two
different figures when they differ, however small."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from accounts.models import Role
from console.features.alerts.models import AlertRule, Incident, Kind, Scope
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner_client(client, org):
    client.force_login(MembershipFactory(organization=org, role=Role.OWNER).user)
    return client


def test_a_spend_cap_rule_created_through_the_api_without_percents_gets_50_80_100(
    owner_client,
):
    created = owner_client.post(
        "/api/v1/alert-rules/",
        {"name": "org caps", "kind": "spend_cap", "scope": "org"},
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    assert created.json()["percents"] == [50, 80, 100]
    assert AlertRule.objects.get(name="org caps").percents == [50, 80, 100]


def test_a_spend_cap_rule_saved_on_the_form_with_no_percents_gets_50_80_100(owner_client):
    response = owner_client.post(
        reverse("alerts:rule_new"),
        {"name": "form caps", "kind": "spend_cap", "scope": "org", "percents": "", "enabled": "on"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert AlertRule.objects.get(name="form caps").percents == [50, 80, 100]


def test_the_history_shows_a_small_value_and_its_threshold_apart(owner_client, org):
    rule = AlertRule.objects.create(
        organization=org, name="tiny cap", kind=Kind.SPEND_CAP, scope=Scope.ORG, percents=[50]
    )
    Incident.objects.create(
        rule=rule,
        organization_id=org.pk,
        subject="org",
        subject_label="Acme",
        threshold_key="50",
        period="d:2026-12-04",
        value=Decimal(5500),  # 0.0055 USD: both round to 0.01 USD
        threshold=Decimal(5000),
    )
    page = owner_client.get(reverse("alerts:history")).content.decode()
    assert "0.0055 USD" in page and "0.005 USD" in page
    assert page.count("0.01 USD") == 0
