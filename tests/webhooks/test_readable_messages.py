"""Every destination kind's message, for every alert rule kind and the billing
events, reads as text a person understands: the rule, the subject, the value
and the threshold apart, the period, what to do, and a link to the console's
public address (``CONSOLE_BASE_URL``), in English and Simplified Chinese."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from decimal import Decimal
from types import SimpleNamespace

import pytest

from console.features.alerts.models import KIND_SCOPES, AlertRule, Incident, Kind
from console.features.alerts.services import FIRED, RESOLVED, event_data
from console.features.webhooks import formats
from console.features.webhooks.models import DestinationKind, EventType
from console.kernel import hooks
from invoicing.services import outbound

PUBLIC = "https://console.example.com"
NOW = datetime(2026, 12, 4, 9, 30, tzinfo=UTC)

# kind -> (value, threshold, threshold_key, period, what the value and threshold read as)
INCIDENTS = {
    Kind.SPEND_CAP: ("4000", "5000", "80", "d:2026-12-04", ("0.004", "0.005")),
    Kind.BALANCE_LOW: ("2000000", "5000000", "", "", ("2.00", "5.00")),
    Kind.BALANCE_RUNWAY: ("2.5", "7", "", "", ("2.5", "7")),
    Kind.ERROR_RATE: ("12.5", "5", "", "", ("12.5 %", "5 %")),
    Kind.LATENCY_P99: ("2300", "1500", "", "", ("2300 ms", "1500 ms")),
    Kind.TTFT_P99: ("900", "500", "", "", ("900 ms", "500 ms")),
    Kind.UPSTREAM_DOWN: (None, None, "health", "", None),
    Kind.RATE_NEAR_LIMIT: ("92", "90", "rpm", "", ("92 %", "90 %")),
    Kind.INVOICE_OVERDUE: ("12050", None, "", "", ("120.50", "—")),
}
CHATS = (
    DestinationKind.SLACK,
    DestinationKind.FEISHU,
    DestinationKind.DINGTALK,
    DestinationKind.WECOM,
)


@pytest.fixture(autouse=True)
def _public_console(settings):
    settings.CONSOLE_BASE_URL = PUBLIC


def _texts(event_type: str, data: dict, language: str) -> dict[str, str]:
    """What a person reads at each destination kind."""
    text = formats.event_text(event_type, data, "Acme", language)
    out = {DestinationKind.EMAIL: text}
    for kind in CHATS:
        body = json.loads(formats.chat_body(kind, text))
        out[kind] = (body.get("text") if kind == DestinationKind.SLACK else None) or (
            body.get("content", {}).get("text") or body.get("text", {}).get("content")
        )
    return out


def _assert_readable(text: str) -> None:
    assert "{'" not in text and "': " not in text, text
    assert "localhost" not in text and "127.0.0.1" not in text, text
    assert PUBLIC + "/" in text, text


def _incident(org, kind: str, *, resolved: bool) -> tuple[Incident, AlertRule]:
    value, threshold, key, period, _ = INCIDENTS[kind]
    rule = AlertRule.objects.create(
        organization=org, name=f"watch {kind}", kind=kind, scope=KIND_SCOPES[kind][-1]
    )
    incident = Incident.objects.create(
        rule=rule,
        organization_id=org.pk,
        subject="org",
        subject_label="Acme (whole organization)",
        threshold_key=key,
        period=period,
        value=None if value is None else Decimal(value),
        threshold=None if threshold is None else Decimal(threshold),
        fired_at=NOW,
        resolved_at=NOW if resolved else None,
    )
    return incident, rule


@pytest.mark.parametrize("language", ["en", "zh-hans"])
@pytest.mark.parametrize("kind", list(Kind.values))
def test_alert_messages_name_rule_value_threshold_and_public_link(db, org, kind, language):
    incident, rule = _incident(org, kind, resolved=False)
    data = event_data(incident, rule)
    expected = INCIDENTS[kind][4]
    for event_type in (FIRED, RESOLVED):
        for destination_kind, text in _texts(event_type, data, language).items():
            _assert_readable(text)
            assert rule.name in text, (destination_kind, text)
            assert "Acme (whole organization)" in text
            if expected is None:
                assert "health" not in text.splitlines()[-2]
                assert len(text.splitlines()) >= 5
            else:
                value, threshold = expected
                after = [re.split(r": |\uff1a", line, maxsplit=1)[-1] for line in text.splitlines()]
                assert any(a.startswith(value) for a in after), text
                assert any(a.startswith(threshold) for a in after), text
    english = formats.event_text(FIRED, data, "Acme", "en")
    chinese = formats.event_text(FIRED, data, "Acme", "zh-hans")
    assert english != chinese
    envelope = json.loads(
        formats.envelope(
            SimpleNamespace(event_id="e1", type=FIRED, created_at=NOW, data=data), "acme"
        )
    )
    assert envelope["data"]["rule_name"] == rule.name
    assert envelope["data"]["console_url"].startswith(PUBLIC + "/")


def test_a_spend_cap_alert_says_which_share_of_which_cap(db, org):
    incident, rule = _incident(org, Kind.SPEND_CAP, resolved=False)
    text = formats.event_text(FIRED, event_data(incident, rule), "Acme", "en")
    assert "80 % of the cap for the day 2026-12-04" in text
    assert "Value: 0.004 USD" in text and "Threshold: 0.005 USD" in text
    assert "raise its cap" in text


@pytest.fixture
def billing_events():
    seen: list[dict] = []

    def receiver(**kwargs):
        seen.append(kwargs)

    hooks.OUTBOUND_EVENT.connect(receiver)
    invoice = SimpleNamespace(
        pk=7,
        organization_id=1,
        number="INV-2026-0007",
        period="2026-11",
        currency="USD",
        paid_minor=12050,
        amount_due_minor=12050,
        total=120_500_000,
        due_at=NOW,
    )
    for event_type in (
        EventType.INVOICE_FINALIZED,
        EventType.INVOICE_PAID,
        EventType.INVOICE_OVERDUE,
    ):
        outbound.invoice_event(invoice, event_type)
    outbound.credit_note_issued(
        SimpleNamespace(
            pk=3,
            organization_id=1,
            number="CN-2026-0003",
            invoice=invoice,
            invoice_id=7,
            currency="USD",
            amount_minor=1000,
            reason="Outage credit",
        )
    )
    outbound.topup_succeeded(
        SimpleNamespace(
            pk=9,
            organization_id=1,
            method="card",
            currency="USD",
            amount_minor=5000,
        )
    )
    hooks.OUTBOUND_EVENT.disconnect(receiver)
    return seen


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_billing_event_messages_are_readable_with_amount_and_public_link(billing_events, language):
    assert len(billing_events) == 5
    for event in billing_events:
        for text in _texts(event["event_type"], event["data"], language).values():
            _assert_readable(text)
            assert " USD" in text
        assert event["data"]["console_url"].startswith(PUBLIC + "/billing/")
