"""Invitation tokens, gateway keys and access tokens never reach the logs:
not when an invitation is sent, accepted or its used link is opened again,
not in the e-mail task's broker message, not in a traceback."""

from __future__ import annotations

import logging
import re

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse

from accounts.models import Invitation, Role
from accounts.tasks import send_invitation_email
from console.kernel.redact import REDACTED, redact
from tests.factories import TEST_PASSWORD, issue_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch):
    """Invitation e-mails run at once, through Celery's own task machinery,
    with the very arguments the service enqueued."""
    queued = []

    def delay(*args):
        queued.append(args)
        send_invitation_email.apply(args=args)

    monkeypatch.setattr("accounts.tasks.send_invitation_email.delay", delay)
    return queued


def test_sending_and_accepting_an_invitation_logs_no_token(
    client, members, caplog, sent, django_capture_on_commit_callbacks
):
    caplog.set_level(logging.DEBUG)
    client.force_login(members[Role.ADMIN].user)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("accounts:members"), {"email": "new@example.com", "role": "developer"}
        )
    assert response.status_code == 302
    [message] = mail.outbox
    token = re.search(r"/invite/([^/\s]+)/", message.body).group(1)
    # The broker message carries the token sealed, never in clear.
    [(invitation_id, carried)] = sent
    assert token not in carried
    # The invitee opens the link and accepts, creating an account.
    link = reverse("accounts:invitation_accept", args=[token])
    invitee = Client()
    assert invitee.get(link).status_code == 200
    response = invitee.post(link, {"full_name": "New", "password": TEST_PASSWORD + "x"})
    assert response.status_code == 302
    assert Invitation.objects.get(pk=invitation_id).accepted_at is not None
    # Opening the used link again: Django logs the 410 with its path, masked.
    assert Client().get(link).status_code == 410
    assert f"/invite/{REDACTED}/" in caplog.text
    assert token not in caplog.text
    for record in caplog.records:
        assert token not in record.getMessage()


def test_keys_and_tokens_in_a_message_or_a_traceback_are_masked(admin_actor, caplog):
    _, raw = issue_key(admin_actor, "logged")
    logger = logging.getLogger("tests.secrets")
    with caplog.at_level(logging.INFO):
        logger.warning("a client sent %s", raw)
        try:
            raise ValueError(f"cannot use {raw}")
        except ValueError:
            logger.exception("failed")
    assert raw not in caplog.text
    public = raw.split("_")[0]
    assert f"{public}_{REDACTED}" in caplog.text  # which key: still said


def test_redact_leaves_ordinary_text_alone():
    text = "GET /invitations/12/ by sk-team@example.com took 5 ms; pat_ratio=0.5"
    assert redact(text) == text
    assert redact("/invite/AbC-123_x/ then") == f"/invite/{REDACTED}/ then"
