"""Card refunds go to a Celery task after commit, never to Stripe inside the
request; an outage retries with a backoff, a refused broker leaves it to
the beat retry (``services.refunds``, ``tasks.execute_refund``)."""

from __future__ import annotations

import pytest

from accounts.models import Role

pytestmark = pytest.mark.django_db


def test_a_card_refund_is_enqueued_after_commit_not_run_in_the_request(
    card_invoice, stripe_on, members, actor_for, refund_worker, django_capture_on_commit_callbacks
):
    from unittest import mock

    from invoicing.models import Payment, PaymentKind, PaymentStatus
    from invoicing.services import credit_note_create, invoice_collect
    from invoicing.services import refunds as refunds_module

    assert invoice_collect(invoice_id=card_invoice.pk) == "succeeded"
    refund_worker.side_effect = None  # a broker that takes the task, no worker yet
    with (
        mock.patch.object(refunds_module, "refund_execute") as in_request,
        django_capture_on_commit_callbacks(execute=True) as callbacks,
    ):
        credit_note_create(
            invoice_id=card_invoice.pk,
            actor=actor_for(members[Role.FINANCE]),
            amount=1_000_000,
            reason="slow",
        )
    refund = Payment.objects.get(kind=PaymentKind.REFUND)
    assert callbacks and in_request.call_count == 0
    refund_worker.assert_called_once_with(refund.pk)
    assert refund.status == PaymentStatus.PENDING
    # The worker then sends it, once.
    from invoicing.tasks import execute_refund

    assert execute_refund.apply(args=[refund.pk]).get() == "succeeded"
    assert execute_refund.apply(args=[refund.pk]).get() == "already_succeeded"
    assert len(stripe_on.refunds(refund.stripe_payment_intent_id)) == 1


def test_the_refund_task_retries_an_outage_with_a_backoff(
    card_invoice, stripe_on, members, actor_for
):
    from unittest import mock

    from celery.exceptions import Retry

    from invoicing import stripe_adapter
    from invoicing.models import Payment, PaymentKind, PaymentStatus
    from invoicing.services import credit_note_create, invoice_collect
    from invoicing.tasks import execute_refund

    assert execute_refund.name == "invoicing.execute_refund"
    assert execute_refund.acks_late and execute_refund.reject_on_worker_lost
    invoice_collect(invoice_id=card_invoice.pk)
    credit_note_create(
        invoice_id=card_invoice.pk,
        actor=actor_for(members[Role.FINANCE]),
        amount=2_000_000,
        reason="x",
    )  # not committed here: nothing enqueued
    refund = Payment.objects.get(kind=PaymentKind.REFUND)
    stripe_on.outage()
    with (
        mock.patch.object(execute_refund, "retry", side_effect=Retry("again")) as retry,
        pytest.raises(Retry),
    ):
        execute_refund.apply(args=[refund.pk], throw=True)
    assert isinstance(retry.call_args.kwargs["exc"], stripe_adapter.StripeUnavailable)
    assert retry.call_args.kwargs["countdown"] == 30
    refund.refresh_from_db()
    assert refund.status == PaymentStatus.PENDING


def test_a_broker_that_refuses_the_refund_leaves_it_to_the_beat_retry(
    card_invoice, stripe_on, members, actor_for, refund_worker, django_capture_on_commit_callbacks
):
    from invoicing.models import Payment, PaymentKind, PaymentStatus
    from invoicing.services import credit_note_create, invoice_collect, payments_retry_pending

    invoice_collect(invoice_id=card_invoice.pk)
    refund_worker.side_effect = ConnectionError("broker down")
    with django_capture_on_commit_callbacks(execute=True):
        credit_note_create(
            invoice_id=card_invoice.pk,
            actor=actor_for(members[Role.FINANCE]),
            amount=1_000_000,
            reason="x",
        )  # no error for the person who issued it
    refund = Payment.objects.get(kind=PaymentKind.REFUND)
    assert refund.status == PaymentStatus.PENDING
    assert payments_retry_pending(older_than_seconds=0)["refunds"] == 1
    refund.refresh_from_db()
    assert refund.status == PaymentStatus.SUCCEEDED
