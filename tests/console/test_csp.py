"""The Content-Security-Policy: on every console answer, with no inline
script allowed, and no template that would need one (the browser tests run
the pages under it and fail on any JavaScript error, a refused script
included)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.urls import reverse

from accounts.models import Role

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def _directives(header: str) -> dict[str, list[str]]:
    out = {}
    for part in header.split(";"):
        name, *values = part.split()
        out[name] = values
    return out


@pytest.mark.django_db
def test_every_console_answer_carries_the_policy(client, members):
    answers = [client.get(reverse("accounts:login"))]
    client.force_login(members[Role.OWNER].user)
    answers += [
        client.get(reverse("console:overview")),
        client.get(reverse("accounts:api_keys")),
        client.get("/api/v1/keys/"),
    ]
    for response in answers:
        policy = _directives(response["Content-Security-Policy"])
        assert policy["script-src"][0] == "'self'"
        assert "'unsafe-inline'" not in policy["script-src"]
        assert "'unsafe-eval'" not in policy["script-src"]
        assert policy["object-src"] == ["'none'"]
        assert policy["frame-ancestors"] == ["'none'"]
        assert policy["base-uri"] == ["'self'"]


@pytest.mark.django_db
def test_stripe_js_is_allowed_from_its_origin_only(client, settings):
    settings.STRIPE_JS_URL = "https://js.stripe.com/v3/"
    policy = _directives(client.get(reverse("accounts:login"))["Content-Security-Policy"])
    assert "https://js.stripe.com" in policy["script-src"]
    assert "https://hooks.stripe.com" in policy["frame-src"]
    assert "https://api.stripe.com" in policy["connect-src"]
    settings.STRIPE_JS_URL = "http://127.0.0.1:8420/js.stripe.com/v3/"
    policy = _directives(client.get(reverse("accounts:login"))["Content-Security-Policy"])
    assert policy["script-src"] == ["'self'", "http://127.0.0.1:8420"]
    assert "https://js.stripe.com" not in policy["script-src"]


@pytest.mark.django_db
def test_report_only_mode(client, settings):
    settings.CSP_REPORT_ONLY = True
    response = client.get(reverse("accounts:login"))
    assert "Content-Security-Policy" not in response
    assert "script-src 'self'" in response["Content-Security-Policy-Report-Only"]


def test_no_template_has_an_inline_script_or_event_handler():
    """What the policy would refuse in a browser: an inline <script> (data blocks
    of type application/json are not run) or an on...= attribute."""
    offenders = []
    for path in TEMPLATES.rglob("*.html"):
        text = path.read_text(encoding="utf-8")
        for tag in re.findall(r"<script\b[^>]*>", text):
            if "src=" not in tag and 'type="application/json"' not in tag:
                offenders.append(f"{path.relative_to(TEMPLATES)}: {tag}")
        for handler in re.findall(r"\s(on[a-z]+)\s*=\s*[\"']", text):
            offenders.append(f"{path.relative_to(TEMPLATES)}: {handler}=")
        if "javascript:" in text:
            offenders.append(f"{path.relative_to(TEMPLATES)}: javascript: URL")
    assert offenders == []
