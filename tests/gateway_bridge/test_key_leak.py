"""The key-leak guard: a gateway key's secret is shown once, when it is issued
or rotated, and never again. Keys are issued, used (good and bad calls on all
three protocols, the key in every place a client may put it), rotated and
revoked through the console and the API; then every place a secret could
have been written is searched for every raw key: the log records (captured
at DEBUG), the gateway's error bodies, the console pages shown after the
secret page, the usage events and the spool, every table of the database
(the audit log, call records and dead letters included)."""

from __future__ import annotations

import json
import logging
import re

import pytest
from django.apps import apps
from django.test import Client
from django.urls import reverse

from accounts.forms import ApiKeyForm
from tests.gateway_bridge.test_gateway_openai import raw_request
from usage.ingest import ingest_events

pytestmark = pytest.mark.django_db(transaction=True)

RAW_KEY = re.compile(r"sk-[A-Za-z0-9]+_[A-Za-z0-9_\-]+")
CHAT = {"model": "sim-chat-small", "messages": [{"role": "user", "content": "Hello there"}]}


def _secret_of(raw: str) -> str:
    return raw.split("_", 1)[1]


def _one_raw_key(html: str) -> str:
    keys = set(RAW_KEY.findall(html))
    assert len(keys) == 1, keys
    return keys.pop()


def _calls(gw, raw: str, bodies: list[bytes]) -> None:
    """Good and bad calls with ``raw`` on every protocol, the key in every
    place a client may send it; the answers' bodies go to ``bodies``."""
    wrong = raw[:-4] + ("AAAA" if not raw.endswith("AAAA") else "BBBB")
    json_headers = {"Content-Type": "application/json"}
    gemini_hello = {"contents": [{"role": "user", "parts": [{"text": "Hello there"}]}]}
    messages = {**CHAT, "max_tokens": 8}
    cases = [
        ("POST", "/v1/chat/completions", CHAT, {"Authorization": f"Bearer {raw}"}),
        ("POST", "/v1/chat/completions", CHAT, {"Authorization": f"Bearer {wrong}"}),
        ("POST", "/v1/chat/completions", {**CHAT, "bogus": 1}, {"Authorization": f"Bearer {raw}"}),
        ("POST", "/v1/chat/completions", {**CHAT, "model": "nope"}, {"Authorization": f"Bearer {raw}"}),
        ("POST", "/v1/chat/completions", {**CHAT, "stream": True}, {"Authorization": f"Bearer {raw}"}),
        ("GET", "/v1/models", None, {"Authorization": f"Bearer {raw}"}),
        ("POST", "/v1/messages", messages, {"x-api-key": raw, "anthropic-version": "2023-06-01"}),
        ("POST", "/v1/messages", messages, {"x-api-key": wrong, "anthropic-version": "2023-06-01"}),
        ("POST", "/v1/messages", {"model": "sim-chat-small"}, {"x-api-key": raw}),
        ("POST", f"/v1beta/models/sim-chat-small:generateContent?key={raw}", gemini_hello, {}),
        ("POST", f"/v1beta/models/sim-chat-small:generateContent?key={wrong}", gemini_hello, {}),
        ("POST", "/v1beta/models/sim-chat-small:generateContent", {"contents": 1}, {"x-goog-api-key": raw}),
        ("POST", "/v1beta/models/sim-chat-small:streamGenerateContent?alt=sse", gemini_hello, {"x-goog-api-key": raw}),
        ("POST", "/v1/embeddings", {"model": "sim-embed", "input": raw}, {"Authorization": f"Bearer {raw}"}),
    ]  # fmt: skip
    for method, path, body, headers in cases:
        _status, _headers, data = raw_request(gw, method, path, body, {**json_headers, **headers})
        bodies.append(data)
    # A body that is not JSON at all, with the key inside it.
    _status, _headers, data = raw_request(
        gw,
        "POST",
        "/v1/chat/completions",
        raw_body=f"{{{raw}",
        headers={"Authorization": f"Bearer {raw}"},
    )
    bodies.append(data)


def _database_text() -> str:
    """Every row of every table of the project's apps, as text."""
    out = []
    for label in ("accounts", "usage", "inference_node", "invoicing", "gateway_bridge"):
        try:
            config = apps.get_app_config(label)
        except LookupError:
            continue
        for model in config.get_models():
            for row in model.objects.all().values():
                out.append(f"{model.__name__}: {row!r}")
    return "\n".join(out)


def test_raw_keys_never_leak(gw, tenant, caplog, settings, tmp_path):
    # Everything at DEBUG, SQL included (Django logs queries with DEBUG on).
    settings.DEBUG = True
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django.db.backends")
    owner = Client()
    owner.force_login(tenant.owner.user)
    bodies: list[bytes] = []
    pages_after: list[str] = []
    raws = [tenant.raw]

    # Issued on the console: the secret page shows it once.
    form = {"name": "console-key", "priority": str(ApiKeyForm.base_fields["priority"].initial)}
    page = owner.post(reverse("accounts:api_key_create"), form)
    assert page.status_code == 200
    console_raw = _one_raw_key(page.content.decode())
    raws.append(console_raw)
    key_id = apps.get_model("accounts", "ApiKey").objects.get(name="console-key").pk
    # Issued through the API with a personal access token.
    from accounts.services import personal_access_token_issue

    _token, pat = personal_access_token_issue(actor=tenant.actor, name="ci")
    raws.append(pat)  # access tokens are secrets too
    api = Client()
    created = api.post(
        "/api/v1/keys/",
        data={"name": "api-key"},
        content_type="application/json",
        headers={"Authorization": f"Bearer {pat}"},
    )
    assert created.status_code == 201, created.content
    api_raw = created.json()["key"]
    raws.append(api_raw)

    # Used, well and badly.
    for raw in (tenant.raw, console_raw, api_raw):
        _calls(gw, raw, bodies)

    # Rotated on the console (the old secret kept for a grace period), then used.
    page = owner.post(reverse("accounts:api_key_rotate", args=[key_id]), {"grace_seconds": "300"})
    assert page.status_code == 200
    rotated_raw = _one_raw_key(page.content.decode())
    assert rotated_raw != console_raw
    raws.append(rotated_raw)
    _calls(gw, rotated_raw, bodies)
    _calls(gw, console_raw, bodies)  # within its grace period
    # Rotated through the API, revoked on the console and through the API, then used.
    rotated = api.post(
        f"/api/v1/keys/{tenant.key.pk}/rotate/",
        data={"grace_seconds": 0},
        content_type="application/json",
        headers={"Authorization": f"Bearer {pat}"},
    )
    assert rotated.status_code == 200, rotated.content
    raws.append(rotated.json()["key"])
    assert owner.post(reverse("accounts:api_key_revoke", args=[key_id])).status_code == 302
    api_key_id = apps.get_model("accounts", "ApiKey").objects.get(name="api-key").pk
    revoked = api.post(
        f"/api/v1/keys/{api_key_id}/revoke/", headers={"Authorization": f"Bearer {pat}"}
    )
    assert revoked.status_code == 200, revoked.content
    for raw in raws:
        if raw.startswith("sk-"):
            _calls(gw, raw, bodies)

    # Refusals that Django logs: another id, a wrong access token.
    assert owner.post(reverse("accounts:api_key_revoke", args=[10**9])).status_code == 404
    wrong_pat = api.get("/api/v1/keys/", headers={"Authorization": f"Bearer {pat}x"})
    assert wrong_pat.status_code == 401
    bodies.append(wrong_pat.content)

    # The console pages one sees afterwards.
    for url in (
        reverse("accounts:api_keys"),
        reverse("accounts:api_key_detail", args=[key_id]),
        reverse("accounts:audit"),
        reverse("usage:calls"),
        reverse("accounts:access_tokens"),
    ):
        response = owner.get(url)
        assert response.status_code == 200, url
        pages_after.append(response.content.decode())
    for url in ("/api/v1/keys/", f"/api/v1/keys/{key_id}/", "/api/v1/calls/"):
        pages_after.append(
            api.get(url, headers={"Authorization": f"Bearer {pat}"}).content.decode()
        )

    # The usage events reach the database (a broken one goes to the dead letters).
    events = list(gw.emitter.events)
    assert len(events) > 20
    ingest_events([*events, {**events[0], "request_id": "broken", "organization_id": 10**9}])
    assert apps.get_model("usage", "DeadLetter").objects.exists()
    assert apps.get_model("usage", "CallRecord").objects.count() >= len(events)
    csv = owner.get(reverse("usage:calls_export"))
    pages_after.append(b"".join(csv.streaming_content).decode("utf-8-sig"))

    # Now look everywhere.
    places = {
        "log records": "\n".join(
            f"{r.name} {r.levelname} {r.getMessage()} {r.args!r} {getattr(r, 'exc_text', '')}"
            for r in caplog.records
        )
        + caplog.text,
        "gateway error bodies": "\n".join(b.decode(errors="replace") for b in bodies if b),
        "pages after the secret page": "\n".join(pages_after),
        "usage events": json.dumps(events),
        "database": _database_text(),
        "spool": "\n".join(
            p.read_bytes().decode(errors="replace")
            for p in (
                settings.GATEWAY_SPOOL_DIR.rglob("*") if settings.GATEWAY_SPOOL_DIR.exists() else []
            )
            if p.is_file()
        ),
    }
    # The net is wide enough: SQL with its parameters, Django's refusals, every key's row.
    logged = {r.name for r in caplog.records}
    assert {"django.db.backends", "django.request"} <= logged, logged
    assert all(
        raw.split("_", 1)[0].removeprefix("sk-") in places["database"]
        for raw in raws
        if raw.startswith("sk-")
    )
    leaks = [
        f"{where}: {raw[:12]}…"
        for raw in raws
        for where, text in places.items()
        if _secret_of(raw) in text
    ]
    assert not leaks, "raw secrets found:\n" + "\n".join(leaks)
    # Only the visible prefix is ever shown.
    assert any(
        raw.split("_", 1)[0] in "\n".join(pages_after) for raw in raws if raw.startswith("sk-")
    )
