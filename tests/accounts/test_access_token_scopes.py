"""Personal access tokens with an expiry and a scope: a read-only token reads
but is refused (403, the API's error format) on anything that writes; an
expired token is refused outright."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.models import PersonalAccessToken, TokenScope
from accounts.services import personal_access_token_issue

pytestmark = pytest.mark.django_db


def _auth(raw: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def test_a_read_only_token_reads_but_never_writes(client, owner, actor_for):
    _, raw = personal_access_token_issue(
        actor=actor_for(owner), name="dashboards", scope=TokenScope.READ_ONLY
    )
    assert client.get("/api/v1/keys/", **_auth(raw)).status_code == 200

    response = client.post(
        "/api/v1/keys/", {"name": "from-a-script"}, content_type="application/json", **_auth(raw)
    )
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "read_only_token"
    assert "read-only" in error["message"]
    assert not owner.organization.api_keys.filter(name="from-a-script").exists()


def test_a_read_write_token_may_write(client, owner, actor_for):
    _, raw = personal_access_token_issue(
        actor=actor_for(owner), name="deploys", scope=TokenScope.READ_WRITE
    )
    response = client.post(
        "/api/v1/keys/", {"name": "from-a-script"}, content_type="application/json", **_auth(raw)
    )
    assert response.status_code == 201, response.content


def test_an_expired_token_is_refused(client, owner, actor_for):
    token, raw = personal_access_token_issue(
        actor=actor_for(owner), name="short", expires_at=timezone.now() + timedelta(minutes=5)
    )
    assert client.get("/api/v1/keys/", **_auth(raw)).status_code == 200
    PersonalAccessToken.objects.filter(pk=token.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    response = client.get("/api/v1/keys/", **_auth(raw))
    assert response.status_code == 401
    assert "expired" in response.json()["error"]["message"]


def test_the_tokens_page_creates_with_scope_and_expiry_and_lists_them(client, owner):
    client.force_login(owner.user)
    page = client.get(reverse("accounts:access_tokens")).content.decode()
    assert 'name="scope" value="read"' in page and 'name="expires"' in page

    before = timezone.now()
    response = client.post(
        reverse("accounts:access_tokens"), {"name": "ci", "scope": "read", "expires": "30"}
    )
    html = response.content.decode()
    token = PersonalAccessToken.objects.get(name="ci")
    assert token.scope == TokenScope.READ_ONLY
    assert before + timedelta(days=30) <= token.expires_at <= timezone.now() + timedelta(days=30)
    row = html[html.index('<tr data-token="ci">') :]
    row = row[: row.index("</tr>")]
    assert "Read only" in row and token.expires_at.strftime("%Y-%m-%d") in row
    assert '<span class="badge active">active</span>' in row

    client.post(
        reverse("accounts:access_tokens"), {"name": "forever", "scope": "write", "expires": "never"}
    )
    forever = PersonalAccessToken.objects.get(name="forever")
    assert forever.expires_at is None and forever.scope == TokenScope.READ_WRITE

    PersonalAccessToken.objects.filter(pk=token.pk).update(
        expires_at=timezone.now() - timedelta(days=1)
    )
    html = client.get(reverse("accounts:access_tokens")).content.decode()
    row = html[html.index('<tr data-token="ci">') :]
    assert '<span class="badge expired">expired</span>' in row[: row.index("</tr>")]
