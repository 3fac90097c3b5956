"""A real Celery worker, on the configured broker (Redis under CI, kombu's
filesystem transport embedded), sends the invitation e-mail."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from django.conf import settings

from accounts.actors import Actor
from accounts.services import invitation_create
from accounts.tasks import send_invitation_email
from tests.services import start_celery_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery_worker]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def worker(tmp_path):
    mail_dir = Path(settings.EMAIL_FILE_PATH)
    mail_dir.mkdir(parents=True, exist_ok=True)
    for old in mail_dir.glob("*"):
        old.unlink()
    proc = start_celery_worker(
        ROOT,
        EMAIL_BACKEND="django.core.mail.backends.filebased.EmailBackend",
        CONSOLE_BASE_URL="http://127.0.0.1:8000",
    )
    yield proc, mail_dir
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_worker_sends_invitation_email_with_one_time_link(owner, worker, settings):
    proc, mail_dir = worker
    invitation, raw = invitation_create(
        actor=Actor(owner), email="newbie@example.com", role="viewer"
    )
    # Publish to the real broker (the unit-test fixture only mocks ``delay``).
    send_invitation_email.apply_async(args=[invitation.pk, raw])
    deadline = time.monotonic() + 45
    body = ""
    while time.monotonic() < deadline and not body:
        if proc.poll() is not None:
            pytest.fail(f"worker exited early:\n{proc.stdout.read()}")
        for f in mail_dir.glob("*.log"):
            body = f.read_text()
        time.sleep(0.25)
    assert body, "the worker sent no e-mail within 45 s"
    assert "newbie@example.com" in body
    assert f"/invite/{raw}/" in body
    assert "as viewer" in body
