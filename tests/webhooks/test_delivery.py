"""Events fired through console.kernel.hooks reach a real receiver on loopback,
signed, once; failures are retried with backoff, then the destination is
marked failing, and nothing blocks another destination."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core import mail
from django.db import connection, transaction
from django.utils import timezone as tz

from console.features.webhooks import delivery as delivery_module
from console.features.webhooks import signing
from console.features.webhooks.models import (
    Delivery,
    DeliveryStatus,
    Destination,
    DestinationState,
    OutboundEvent,
)
from console.features.webhooks.services import destination_create, destination_test
from console.kernel import hooks
from tests.webhooks.conftest import Receiver


def fire(org, event_id="evt_1", event_type="invoice.paid", data=None):
    with transaction.atomic():
        hooks.OUTBOUND_EVENT.fire(
            organization_id=org.pk,
            event_type=event_type,
            data=data
            if data is not None
            else {"number": "INV-1", "amount_minor": 1250, "currency": "USD"},
            event_id=event_id,
        )


def webhook(actor, receiver, name="Ops", events=("all",)):
    destination, secret = destination_create(
        actor=actor, name=name, kind="webhook", url=receiver.url, events=list(events)
    )
    receiver.secret = secret
    return destination


def make_due():
    Delivery.objects.filter(status=DeliveryStatus.PENDING).update(
        next_attempt_at=tz.now() - timedelta(seconds=1)
    )


@pytest.fixture
def actor(owner, actor_for):
    return actor_for(owner)


@pytest.mark.django_db(transaction=True)
def test_an_event_is_delivered_once_signed_and_the_receiver_verifies_it(org, actor, receiver):
    destination = webhook(actor, receiver)

    fire(org, "evt_1")
    fire(org, "evt_1")  # the same event id again: nothing more

    assert len(receiver.requests) == 1
    got = receiver.requests[0]
    assert got["verified"] == "evt_1"
    assert got["headers"]["Webhook-Id"] == "evt_1"
    assert got["json"]["type"] == "invoice.paid"
    assert got["json"]["organization"] == org.slug
    assert got["json"]["data"]["number"] == "INV-1"
    assert OutboundEvent.objects.filter(organization=org).count() == 1
    d = Delivery.objects.get(destination=destination)
    assert (d.status, d.attempts, d.last_status_code) == (DeliveryStatus.SUCCEEDED, 1, 200)
    # A tampered body or an old timestamp is refused by the documented verify.
    with pytest.raises(signing.SignatureError):
        signing.verify(receiver.secret, got["headers"], got["body"] + b" ")
    with pytest.raises(signing.SignatureError):
        signing.verify(
            receiver.secret,
            got["headers"],
            got["body"],
            now=int(got["headers"]["Webhook-Timestamp"]) + 301,
        )


@pytest.mark.django_db(transaction=True)
def test_a_destination_receives_only_the_event_types_it_subscribes_to(org, actor, receiver):
    webhook(actor, receiver, events=["topup.succeeded"])
    fire(org, "evt_a", "invoice.paid")
    fire(org, "evt_b", "topup.succeeded")
    assert [r["json"]["id"] for r in receiver.requests] == ["evt_b"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("mode", "reason"),
    [("500", "HTTP 500"), ("slow", "timed out"), ("redirect", "redirect to http://127.0.0.1:9/")],
)
def test_a_failing_receiver_is_retried_with_backoff_then_marked_failing_while_another_gets_its_delivery(
    org, actor, receiver, other_receiver, mode, reason
):
    bad = webhook(actor, receiver, name="Bad")
    good_dest, good_secret = destination_create(
        actor=actor, name="Good", kind="webhook", url=other_receiver.url, events=["all"]
    )
    other_receiver.secret = good_secret
    receiver.mode = mode

    fire(org, "evt_1")

    assert [r["verified"] for r in other_receiver.requests] == ["evt_1"]
    d = Delivery.objects.get(destination=bad)
    assert d.status == DeliveryStatus.PENDING
    assert d.next_attempt_at > tz.now()  # backed off, not hammered
    assert reason in d.last_error
    # Beat's sweep sends nothing before the retry is due...
    assert delivery_module.deliver_due() == 0
    # ... and retries once it is: after WEBHOOK_FAILING_AFTER (3) failures in a row
    # the destination is failing, with the reason.
    for _ in range(2):
        make_due()
        delivery_module.deliver_due()
    d.refresh_from_db()
    bad.refresh_from_db()
    assert d.attempts == 3
    assert [a.status_code for a in d.attempt_log.all()] == (
        [500] * 3 if mode == "500" else [302] * 3 if mode == "redirect" else [None] * 3
    )
    assert bad.state == DestinationState.FAILING
    assert reason in bad.state_reason
    assert Delivery.objects.get(destination=good_dest).status == DeliveryStatus.SUCCEEDED

    # The receiver recovers: the next retry succeeds and the destination is healthy again.
    receiver.mode = "ok"
    make_due()
    delivery_module.deliver_due()
    d.refresh_from_db()
    bad.refresh_from_db()
    assert d.status == DeliveryStatus.SUCCEEDED
    assert bad.state == DestinationState.HEALTHY


@pytest.mark.django_db(transaction=True)
def test_backoff_grows_with_full_jitter_and_a_delivery_is_abandoned_after_the_window(
    org, actor, receiver, settings
):
    settings.WEBHOOK_RETRY_BASE_SECONDS = 10
    settings.WEBHOOK_RETRY_MAX_DELAY_SECONDS = 100
    waits = [delivery_module.backoff_seconds(n) for n in (1, 2, 3, 8, 8, 8)]
    assert 1 <= waits[0] <= 10 and 1 <= waits[1] <= 20 and 1 <= waits[2] <= 40
    assert all(1 <= w <= 100 for w in waits[3:])

    webhook(actor, receiver)
    receiver.mode = "500"
    fire(org, "evt_1")
    d = Delivery.objects.get()
    assert d.retry_until - d.created_at == timedelta(hours=24)
    Delivery.objects.filter(pk=d.pk).update(retry_until=tz.now() - timedelta(seconds=1))
    make_due()
    delivery_module.deliver_due()
    d.refresh_from_db()
    assert d.status == DeliveryStatus.ABANDONED
    assert d.next_attempt_at is None
    assert delivery_module.deliver_due() == 0


@pytest.mark.django_db(transaction=True)
def test_a_receiver_down_for_a_while_gets_every_event_once_it_is_back_none_twice(org, actor):
    receiver = Receiver()  # its port is chosen, nothing listens yet
    webhook(actor, receiver)
    for n in range(3):
        fire(org, f"evt_{n}")
    fire(org, "evt_1")  # a repeat of an id already fired
    assert Delivery.objects.count() == 3
    assert all("cannot connect" in d.last_error for d in Delivery.objects.all())

    receiver.start()
    try:
        make_due()
        delivery_module.deliver_due()
        make_due()  # a second sweep finds nothing left to send
        assert delivery_module.deliver_due() == 0
        assert sorted(r["verified"] for r in receiver.requests) == ["evt_0", "evt_1", "evt_2"]
        assert set(Delivery.objects.values_list("status", flat=True)) == {DeliveryStatus.SUCCEEDED}
    finally:
        receiver.stop()


@pytest.mark.django_db(transaction=True)
def test_a_claimed_delivery_is_not_sent_twice(org, actor, receiver, inline_deliveries, monkeypatch):
    webhook(actor, receiver)
    monkeypatch.setattr(delivery_module, "_enqueue", lambda ids: None)
    fire(org, "evt_1")
    d = Delivery.objects.get()
    first = delivery_module.delivery_attempt(delivery_id=d.pk)
    again = delivery_module.delivery_attempt(delivery_id=d.pk)  # a redelivered task
    assert first.status == DeliveryStatus.SUCCEEDED and again is None
    assert len(receiver.requests) == 1


@pytest.mark.django_db
def test_deliveries_are_enqueued_only_after_the_callers_transaction_commits(
    org, actor, receiver, inline_deliveries, django_capture_on_commit_callbacks
):
    webhook(actor, receiver)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        fire(org, "evt_1")
    assert inline_deliveries == [] and receiver.requests == []
    for callback in callbacks:
        callback()
    assert [r["verified"] for r in receiver.requests] == ["evt_1"]


@pytest.mark.django_db
def test_an_event_fired_in_a_rolled_back_transaction_is_not_recorded(org, actor, receiver):
    webhook(actor, receiver)

    def fire_then_fail():
        with transaction.atomic():
            fire(org, "x")
            raise RuntimeError

    with pytest.raises(RuntimeError):
        fire_then_fail()
    assert OutboundEvent.objects.count() == 0 and receiver.requests == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("kind", "shape"),
    [
        ("slack", lambda b: b["text"]),
        ("feishu", lambda b: b["msg_type"] == "text" and b["content"]["text"]),
        ("dingtalk", lambda b: b["msgtype"] == "text" and b["text"]["content"]),
        ("wecom", lambda b: b["msgtype"] == "text" and b["text"]["content"]),
    ],
)
def test_chat_destinations_get_their_apps_message_format_in_the_destinations_language(
    org, actor, receiver, kind, shape
):
    destination_create(
        actor=actor, name=kind, kind=kind, url=receiver.url, events=["all"], language="zh-hans"
    )
    fire(org, "evt_1", "invoice.paid", {"number": "INV-7", "amount_minor": 1250, "currency": "USD"})
    text = shape(receiver.requests[0]["json"])
    assert "发票已付款" in text and "INV-7" in text and "12.50 USD" in text
    assert "Webhook-Signature" not in receiver.requests[0]["headers"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("kind", "answer", "reason"),
    [
        (
            "dingtalk",
            {"errcode": 310000, "errmsg": "sign not match"},
            "error 310000: sign not match",
        ),
        ("wecom", {"errcode": 93000, "errmsg": "invalid webhook url"}, "error 93000"),
        ("feishu", {"code": 19021, "msg": "sign match fail"}, "error 19021: sign match fail"),
    ],
)
def test_a_chat_apps_json_error_answer_is_a_failure(org, actor, receiver, kind, answer, reason):
    destination_create(actor=actor, name=kind, kind=kind, url=receiver.url, events=["all"])
    receiver.mode = (200, json.dumps(answer).encode())
    fire(org, "evt_1")
    d = Delivery.objects.get()
    assert d.status == DeliveryStatus.PENDING and d.last_status_code == 200
    assert reason in d.last_error


@pytest.mark.django_db
def test_an_email_destination_mails_members_by_role_in_their_language(
    org, actor, finance, receiver
):
    finance.user.language = "zh-hans"
    finance.user.save()
    destination_create(
        actor=actor,
        name="Mail",
        kind="email",
        recipients="finance\nbooks@example.com",
        events=["invoice.paid"],
    )
    hooks.OUTBOUND_EVENT.fire(
        organization_id=org.pk,
        event_type="invoice.paid",
        data={"number": "INV-9"},
        event_id="evt_mail",
    )
    delivery_module.delivery_attempt(delivery_id=Delivery.objects.get().pk)
    by_to = {tuple(m.to): m for m in mail.outbox}
    assert "发票已付款" in by_to[(finance.user.email,)].subject
    assert "Invoice paid" in by_to[("books@example.com",)].subject
    assert Delivery.objects.get().status == DeliveryStatus.SUCCEEDED


@pytest.mark.django_db(transaction=True)
def test_send_test_reports_the_result_and_is_not_retried(org, actor, receiver):
    destination = webhook(actor, receiver)
    ok = destination_test(actor=actor, destination_id=destination.pk)
    assert ok.status == DeliveryStatus.SUCCEEDED and receiver.requests[0]["json"]["type"] == "test"
    assert receiver.requests[0]["verified"]
    receiver.mode = "500"
    failed = destination_test(actor=actor, destination_id=destination.pk)
    assert failed.status == DeliveryStatus.FAILED and failed.last_error == "HTTP 500"
    assert failed.next_attempt_at is None


@pytest.mark.django_db
def test_the_url_and_secret_are_sealed_at_rest(org, actor, receiver):
    destination = webhook(actor, receiver)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT url, secret FROM webhooks_destination WHERE id = %s", [destination.pk]
        )
        url, secret = cursor.fetchone()
    assert "127.0.0.1" not in url and "token=abc" not in url
    assert receiver.secret not in secret and secret.startswith("gAAAAA")
    assert Destination.objects.get().url == receiver.url


@pytest.mark.django_db
def test_deliveries_go_to_the_registered_task_and_a_refusing_broker_leaves_them_to_the_sweep(
    settings,
):
    from unittest import mock

    from console.kernel.celery import registered_task
    from tests.webhooks.conftest import REAL_ENQUEUE

    assert settings.CELERY_BEAT_SCHEDULE["webhooks-deliver-due"]["task"] == "webhooks.deliver_due"
    task = registered_task("webhooks.deliver")
    with mock.patch.object(task, "delay") as delay:
        REAL_ENQUEUE([7, 8])
    assert [c.args for c in delay.call_args_list] == [(7,), (8,)]
    with mock.patch.object(task, "delay", side_effect=OSError("broker down")) as delay:
        REAL_ENQUEUE([1, 2])  # logged, never raised to the caller whose work committed
    assert delay.call_count == 2


@pytest.mark.django_db(transaction=True)
def test_a_disabled_destination_gets_nothing_until_it_is_enabled_again(org, actor, receiver):
    from console.features.webhooks.services import destination_update

    destination = webhook(actor, receiver)
    destination_update(actor=actor, destination_id=destination.pk, enabled=False)
    fire(org, "evt_1")  # not subscribed while disabled: no delivery at all
    assert Delivery.objects.count() == 0
    destination_update(actor=actor, destination_id=destination.pk, enabled=True)
    receiver.mode = "500"
    fire(org, "evt_2")
    destination_update(actor=actor, destination_id=destination.pk, enabled=False)
    receiver.mode = "ok"
    make_due()
    assert delivery_module.deliver_due() == 0  # its retry waits while disabled
    destination_update(actor=actor, destination_id=destination.pk, enabled=True)
    make_due()
    delivery_module.deliver_due()
    assert [r["verified"] for r in receiver.requests] == ["evt_2", "evt_2"]
    assert Delivery.objects.get().status == DeliveryStatus.SUCCEEDED
