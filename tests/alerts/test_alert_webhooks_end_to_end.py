"""Alerts to a signed webhook, end to end: a key's spend crosses 50 / 80 / 100 %
of its daily cap through the real usage ingest, beat's evaluation fires the
alerts, and the outbound webhooks app delivers them to a real receiver on
127.0.0.1 that checks every request with the documented
``console.features.webhooks.signing.verify``. A receiver that is down for a while
(a closed port, then 503s) gets every event once it is back, none twice."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest
from django.utils import timezone as tz

from accounts.models import ApiKey
from console.features.alerts.models import AlertRule, Kind, Scope
from console.features.alerts.services import evaluate
from console.features.webhooks import delivery as delivery_module
from console.features.webhooks.models import Delivery, DeliveryStatus
from console.features.webhooks.services import destination_create
from tests.alerts.conftest import calls
from tests.webhooks.conftest import (  # noqa: F401 - autouse fixtures of the webhooks tests
    Receiver,
    _fast_webhooks,
    inline_deliveries,
)

COST = 240  # micro-units of one test call (as in test_evaluate.py)


def make_due() -> None:
    """Time passes until every pending retry is due (as the webhooks tests do)."""
    Delivery.objects.filter(status=DeliveryStatus.PENDING).update(
        next_attempt_at=tz.now() - timedelta(seconds=1)
    )


def sweep() -> int:
    """Beat's due sweep once, after the backoff has run out."""
    make_due()
    return delivery_module.deliver_due()


def ids_of(requests: list[dict]) -> list[str]:
    return [r["headers"]["Webhook-Id"] for r in requests]


@pytest.fixture
def live_receiver():
    r = Receiver().start()
    yield r
    r.stop()


@pytest.mark.django_db(transaction=True)
def test_a_daily_cap_crossed_50_80_100_percent_reaches_a_signed_webhook_and_a_receiver_down_gets_every_event_once(
    org, owner_actor, key, outbound, live_receiver
):
    receiver = live_receiver
    destination, secret = destination_create(
        actor=owner_actor,
        name="Ops pager",
        kind="webhook",
        url=receiver.url,
        events=["alert.fired"],
    )
    receiver.secret = secret
    ApiKey.objects.filter(pk=key.pk).update(spend_cap_daily=10 * COST)
    AlertRule.objects.create(
        organization=org,
        name="prod key daily cap",
        kind=Kind.SPEND_CAP,
        scope=Scope.KEY,
        api_key=key,
        percents=[50, 80, 100],
    )
    # Two whole days in the past (the ingest refuses calls from the future).
    today = datetime.combine(tz.now().astimezone(UTC).date(), time(), tzinfo=UTC)
    day1, day2 = today - timedelta(days=2), today - timedelta(days=1)

    # Day 1: 50 %, 80 %, 100 %, each evaluated as beat would (twice: no storm).
    for n, at in ((5, 1), (3, 2), (2, 3)):
        calls(key, n, at=day1 + timedelta(hours=at))
        evaluate(now=day1 + timedelta(hours=at, minutes=30))
        evaluate(now=day1 + timedelta(hours=at, minutes=31))

    assert len(receiver.requests) == 3
    for got in receiver.requests:
        assert got["verified"] == got["headers"]["Webhook-Id"] == got["json"]["id"]
        assert got["json"]["type"] == "alert.fired"
        assert got["json"]["organization"] == org.slug
    assert [r["json"]["data"]["threshold_key"] for r in receiver.requests] == ["50", "80", "100"]
    assert [r["json"]["data"]["value"] for r in receiver.requests] == [
        str(5 * COST),
        str(8 * COST),
        str(10 * COST),
    ]
    assert ids_of(receiver.requests) == [e["event_id"] for e in outbound.fired]
    assert set(Delivery.objects.values_list("status", flat=True)) == {DeliveryStatus.SUCCEEDED}

    # The receiver goes down (nothing listens on its port).
    receiver.stop()
    # Day 2: the daily cap starts again (the three resolve: not subscribed, not
    # sent), and the key crosses 50 % again.
    evaluate(now=day2 + timedelta(minutes=1))
    assert len(outbound.resolved) == 3
    calls(key, 5, at=day2 + timedelta(hours=1))
    evaluate(now=day2 + timedelta(hours=1, minutes=30))
    assert len(outbound.fired) == 4
    pending = Delivery.objects.get(status=DeliveryStatus.PENDING)
    assert "cannot connect" in pending.last_error
    assert pending.next_attempt_at > tz.now()  # backed off
    assert sweep() == 1  # retried, still down
    pending.refresh_from_db()
    assert (pending.status, pending.attempts) == (DeliveryStatus.PENDING, 2)

    # It is back, but answering 503 for a while; the key crosses 80 % meanwhile.
    receiver.mode = (503, b"maintenance")
    receiver.start()
    calls(key, 3, at=day2 + timedelta(hours=2))
    evaluate(now=day2 + timedelta(hours=2, minutes=30))
    assert len(outbound.fired) == 5
    sweep()
    refused = receiver.requests[3:]
    assert refused and all(r["verified"] == r["headers"]["Webhook-Id"] for r in refused)
    assert Delivery.objects.filter(status=DeliveryStatus.PENDING).count() == 2

    # Healthy again: the next sweep delivers both, and nothing is sent again.
    receiver.mode = "ok"
    back = len(receiver.requests)
    assert sweep() == 2
    assert sweep() == 0
    evaluate(now=day2 + timedelta(hours=3))  # nothing new crossed
    assert sweep() == 0

    delivered = receiver.requests[:3] + receiver.requests[back:]
    delivered_ids = ids_of(delivered)
    fired_ids = [e["event_id"] for e in outbound.fired]
    assert len(delivered_ids) == len(set(delivered_ids)) == 5
    assert set(delivered_ids) == set(fired_ids)
    assert all(r["verified"] == r["headers"]["Webhook-Id"] for r in delivered)
    assert sorted(r["json"]["data"]["threshold_key"] for r in receiver.requests[back:]) == [
        "50",
        "80",
    ]
    assert set(Delivery.objects.values_list("status", flat=True)) == {DeliveryStatus.SUCCEEDED}
    # The delivery log shows the outage: no answer, then 503, then 200.
    first_retried = Delivery.objects.get(event__event_id=fired_ids[3])
    assert [a.status_code for a in first_retried.attempt_log.order_by("at", "id")] == [
        None,
        None,
        503,
        200,
    ]
    assert Delivery.objects.filter(destination=destination).count() == 5
