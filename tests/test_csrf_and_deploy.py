"""Browser-facing defences: CSRF on every state-changing console request,
the production settings (``check --deploy`` clean, secure cookies and
headers), and login rate limiting."""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import Role
from tests.console.routes import classified, methods_to_try, url_for
from tests.factories import TEST_PASSWORD, MembershipFactory, OrganizationFactory

ROOT = Path(__file__).resolve().parent.parent


# --- CSRF -----------------------------------------------------------------------------------


@pytest.fixture
def csrf_world(db):
    from accounts.actors import Actor
    from accounts.services import invitation_create, sub_account_create
    from tests.factories import issue_key
    from tests.inference_node.factories import NodeFactory

    org = OrganizationFactory(name="Acme", slug="acme-csrf")
    owner = MembershipFactory(organization=org, role=Role.OWNER)
    viewer = MembershipFactory(organization=org, role=Role.VIEWER)
    actor = Actor(owner, "203.0.113.5")
    key, _ = issue_key(actor)
    invitation, _ = invitation_create(actor=actor, email="new@acme.example", role="viewer")
    values = {
        "membership": viewer.pk,
        "invitation": invitation.pk,
        "sub_account": sub_account_create(actor=actor, name="team").pk,
        "api_key": key.pk,
        "node": NodeFactory(organization=org, base_url="http://127.0.0.1:9/v1").pk,
        "credential": 1,
        # Objects that need no CSRF check to be refused: any id will do.
        "call": "req-none",
        "invoice": 1,
        "credit_note": 1,
        "manual_refund": 1,
        "ledger_entry": 1,
        "load_test": 1,
        "alert_rule": 1,
        "alert_incident": 1,
        "webhook_destination": 1,
        "webhook_delivery": 1,
        "webhook_event": 1,
        "bogus_token": "not-a-token",
    }
    from types import SimpleNamespace

    return SimpleNamespace(org=org, owner=owner, values=values)


def _csrf_client(membership=None) -> Client:
    client = Client(enforce_csrf_checks=True)
    if membership is not None:
        client.force_login(membership.user)
    return client


def test_every_state_changing_console_request_needs_the_csrf_token(csrf_world):
    """POST/PATCH/DELETE without a token, signed in (and signed out for the
    public forms): 403 from the CSRF check on every console route and on the
    API with session authentication. The Stripe webhook is the one exemption
    (its signature is the proof) and the Django admin checks CSRF itself."""
    failures = []
    checked = 0
    for route in classified():
        access = route.access
        if access.kind in ("webhook",):
            continue
        url = url_for(route, csrf_world)
        for method in methods_to_try(route):
            if method == "GET":
                continue
            for who, client in (
                ("owner", _csrf_client(csrf_world.owner)),
                ("anonymous", _csrf_client()),
            ):
                if who == "anonymous" and access.kind not in ("public", "admin"):
                    continue  # anonymous gets the login redirect or 401 first
                kwargs = {"content_type": "application/json", "data": "{}"}
                if access.kind != "api":
                    kwargs = {"data": {"name": "x", "organization": csrf_world.org.pk}}
                response = getattr(client, method.lower())(url, **kwargs)
                checked += 1
                if response.status_code == 405:
                    continue
                body = response.content.decode(errors="replace")
                if response.status_code != 403 or "CSRF" not in body:
                    failures.append(f"{who}: {method} {url} -> {response.status_code}")
    assert checked > 40
    assert not failures, "state-changing requests accepted without a CSRF token:\n" + "\n".join(
        failures
    )


def test_the_csrf_token_from_the_page_is_accepted(csrf_world):
    """The positive control: the token the page renders (and htmx sends as
    X-CSRFToken from base.html) passes the check."""
    client = _csrf_client(csrf_world.owner)
    page = client.get(reverse("accounts:sub_accounts"))
    token = page.context["csrf_token"]
    assert f'"X-CSRFToken": "{token}"' in page.content.decode()
    switch = reverse("accounts:organization_switch")
    data = {"organization": csrf_world.org.pk}
    assert client.post(switch, data).status_code == 403
    assert client.post(switch, data, headers={"X-CSRFToken": str(token)}).status_code == 302
    assert client.post(switch, {**data, "csrfmiddlewaretoken": str(token)}).status_code == 302


def test_the_api_with_an_access_token_needs_no_csrf_token(csrf_world):
    from accounts.actors import Actor
    from accounts.services import personal_access_token_issue

    _, raw = personal_access_token_issue(actor=Actor(csrf_world.owner), name="ci")
    client = Client(enforce_csrf_checks=True)
    response = client.post(
        "/api/v1/sub-accounts/",
        data={"name": "by-token"},
        content_type="application/json",
        headers={"Authorization": f"Bearer {raw}"},
    )
    assert response.status_code == 201, response.content


# --- production settings ------------------------------------------------------------------


def _production_env(tmp_path, **extra) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "CONSOLE_", "SECURE_", "DATABASE_", "REDIS_", "CELERY_"))
    }
    env.update(
        CONSOLE_PRODUCTION="true",
        CONSOLE_VAR_DIR=str(tmp_path),
        DJANGO_SECRET_KEY=secrets.token_urlsafe(64),
        API_KEY_PEPPER=secrets.token_urlsafe(32),
        CONSOLE_SECRET_KEYS=base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        DJANGO_ALLOWED_HOSTS="console.example.com",
        **extra,
    )
    return env


def test_check_deploy_is_clean_in_production_mode(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=_production_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "no issues" in output, output


def test_production_settings(tmp_path):
    """The values behind the clean check, read from a production process."""
    script = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({n: getattr(s, n) for n in ("
        "'DEBUG', 'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', 'SESSION_COOKIE_HTTPONLY', "
        "'CSRF_COOKIE_HTTPONLY', 'SESSION_COOKIE_SAMESITE', 'SESSION_COOKIE_NAME', "
        "'CSRF_COOKIE_NAME', 'SECURE_SSL_REDIRECT', 'SECURE_HSTS_SECONDS', "
        "'SECURE_HSTS_INCLUDE_SUBDOMAINS', 'SECURE_CONTENT_TYPE_NOSNIFF', 'X_FRAME_OPTIONS', "
        "'SECURE_REFERRER_POLICY', 'SECURE_PROXY_SSL_HEADER', 'ALLOWED_HOSTS')}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**_production_env(tmp_path), "DJANGO_SETTINGS_MODULE": "console.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    import json

    values = json.loads(result.stdout.strip().splitlines()[-1])
    assert values == {
        "DEBUG": False,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SESSION_COOKIE_HTTPONLY": True,
        "CSRF_COOKIE_HTTPONLY": True,
        "SESSION_COOKIE_SAMESITE": "Lax",
        "SESSION_COOKIE_NAME": "__Host-sessionid",
        "CSRF_COOKIE_NAME": "__Host-csrftoken",
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31536000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_CONTENT_TYPE_NOSNIFF": True,
        "X_FRAME_OPTIONS": "DENY",
        "SECURE_REFERRER_POLICY": "same-origin",
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
        "ALLOWED_HOSTS": ["console.example.com"],
    }


def test_production_refuses_to_start_without_its_secrets(tmp_path):
    env = _production_env(tmp_path)
    del env["API_KEY_PEPPER"]
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "API_KEY_PEPPER" in result.stderr


def test_security_headers_on_every_answer(client, db, settings):
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_SSL_REDIRECT = False
    response = client.get(reverse("accounts:login"), secure=True)
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert response["Strict-Transport-Security"].startswith("max-age=31536000")
    cookie = response.cookies[settings.CSRF_COOKIE_NAME]
    assert cookie["httponly"] and cookie["samesite"] == "Lax"


# --- login ----------------------------------------------------------------------------------
# The throttle (per account, per address, per known device): tests/accounts/test_login_throttle.py


@pytest.fixture
def login_user(db):
    return MembershipFactory(organization=OrganizationFactory(), role=Role.OWNER).user


def test_login_never_redirects_off_site(client, login_user):
    for target in (
        "https://evil.example/",
        "//evil.example/",
        "/\\evil.example/",
        "javascript:alert(1)",
    ):
        response = client.post(
            f"{reverse('accounts:login')}?next={target}",
            {"username": login_user.email, "password": TEST_PASSWORD, "next": target},
        )
        assert response.status_code == 302
        assert response["Location"] == reverse("console:overview"), target
        client.logout()
