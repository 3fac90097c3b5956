"""Absolute links a person follows from outside the console (a password
reset e-mail, an invitation link to copy) start with ``CONSOLE_BASE_URL``,
never with the Host the request came with."""

from __future__ import annotations

import re

import pytest
from django.core import mail
from django.urls import reverse

from accounts.models import Role, User

pytestmark = pytest.mark.django_db

PUBLIC = "https://console.example.com"


def test_the_password_reset_link_uses_the_public_address(client, settings):
    settings.CONSOLE_BASE_URL = PUBLIC
    User.objects.create_user("ada@example.com", "old-password-for-ada-1")
    client.post(reverse("accounts:password_reset"), {"email": "ada@example.com"})
    assert len(mail.outbox) == 1
    body = mail.outbox[0].body
    assert f"{PUBLIC}/" in body and "testserver" not in body


def test_the_invitation_link_uses_the_public_address(client, settings, org, admin):
    settings.CONSOLE_BASE_URL = PUBLIC
    client.force_login(admin.user)
    response = client.post(
        reverse("accounts:members"),
        {"email": "new@example.com", "role": Role.DEVELOPER},
        follow=True,
    )
    link = re.search(r'id="invite-link" value="([^"]+)"', response.content.decode())
    assert link and link.group(1).startswith(f"{PUBLIC}/")
