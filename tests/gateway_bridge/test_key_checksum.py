"""Through the real gateway: a mistyped checksummed key gets the usual 401 (the
OpenAI, Anthropic and Gemini formats, the same code and message as an unknown
key) with no hashing, key-cache or database work, and is counted like any
refused key; a key issued before the checksum (created in the database as it
was then) still works; a newly issued key works."""

from __future__ import annotations

import json
import secrets

import pytest

from accounts import keys
from accounts.models import ApiKey
from gateway_bridge import state_db as gateway_state
from gateway_bridge.pipeline import auth
from tests.gateway_bridge.test_gateway_openai import raw_request

pytestmark = pytest.mark.django_db(transaction=True)

# (protocol, method, path, headers for a key)
ROUTES = [
    ("openai", "GET", "/v1/models", lambda raw: {"Authorization": f"Bearer {raw}"}),
    (
        "anthropic",
        "POST",
        "/v1/messages",
        lambda raw: {"x-api-key": raw, "anthropic-version": "2023-06-01"},
    ),
    (
        "gemini",
        "POST",
        "/v1beta/models/sim-chat-small:generateContent",
        lambda raw: {"x-goog-api-key": raw},
    ),
]
BODIES = {
    "anthropic": {
        "model": "sim-chat-small",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
    },
    "gemini": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
}


@pytest.fixture
def key_work(gw, monkeypatch):
    """Every hash, key-cache look-up and database key look-up the gateway does."""
    seen: list[tuple[str, str]] = []
    state = gw.gateway.state
    real_digest = state.digest
    real_lookup = gateway_state.api_key_authenticate

    def digest(raw):
        seen.append(("digest", raw))
        return real_digest(raw)

    def lookup(raw, **kwargs):
        seen.append(("lookup", raw))
        return real_lookup(raw, **kwargs)

    monkeypatch.setattr(state, "digest", digest)
    monkeypatch.setattr(gateway_state, "api_key_authenticate", lookup)
    return seen


def _call(gw, protocol, method, path, headers):
    body = BODIES.get(protocol)
    status, _, data = raw_request(
        gw, method, path, body=body, headers={"Content-Type": "application/json", **headers}
    )
    return status, json.loads(data)


def _typo(raw: str) -> str:
    """``raw`` with one character of its random part changed: still marked."""
    i = len(raw) - 10
    wrong = raw[:i] + ("a" if raw[i] != "a" else "b") + raw[i + 1 :]
    assert keys.checksum_refuses(wrong)
    return wrong


def _unknown_key() -> str:
    """Well formed, legacy shape, in no database: the old path's 401."""
    return f"sk-abcdefghij_{secrets.token_urlsafe(32)}"


@pytest.mark.parametrize(("protocol", "method", "path", "headers"), ROUTES)
def test_a_mistyped_key_gets_the_usual_401_without_any_key_work(
    gw, tenant, key_work, protocol, method, path, headers
):
    # Given the 401 an unknown key gets today, in this protocol's format
    status, unknown = _call(gw, protocol, method, path, headers(_unknown_key()))
    assert status == 401
    assert [kind for kind, _ in key_work] == ["digest", "lookup"]  # the old path
    key_work.clear()
    errors_before = gw.gateway.metrics.errors.get("invalid_api_key", 0)
    # When the tenant's (checksummed) key is sent with a typo
    wrong = _typo(tenant.raw)
    status, body = _call(gw, protocol, method, path, headers(wrong))
    # Then the same 401, byte for byte the unknown key's body
    assert status == 401
    assert body == unknown
    if protocol == "openai":
        assert body["error"]["code"] == "invalid_api_key"
        assert body["error"]["message"] == auth.INVALID_KEY_MESSAGE
    elif protocol == "anthropic":
        assert body["error"]["type"] == "authentication_error"
    else:
        assert body["error"]["status"] == "UNAUTHENTICATED"
    # with no hash, no key-cache look-up and no database look-up at all
    assert key_work == []
    # and counted like any refused key
    assert gw.gateway.metrics.errors.get("invalid_api_key", 0) == errors_before + 1


def test_a_flood_of_keys_shaped_like_new_ones_never_reaches_the_key_lookup(gw, tenant, key_work):
    for _ in range(30):
        public_id = "".join(secrets.choice("abcdefghijkmnopqrstuvwxyz23456789") for _ in range(10))
        body = "".join(secrets.choice(keys.BASE62) for _ in range(42))
        status, _ = _call(gw, *ROUTES[0][:3], ROUTES[0][3](f"sk-{public_id}_{body}V"))
        assert status == 401
    assert key_work == []
    assert gw.gateway.state.negative_hits == 0  # nothing was even cached
    # while the real key still works
    status, _ = _call(gw, *ROUTES[0][:3], ROUTES[0][3](tenant.raw))
    assert status == 200


@pytest.mark.parametrize(("protocol", "method", "path", "headers"), ROUTES)
def test_a_key_issued_before_the_checksum_still_works(gw, tenant, protocol, method, path, headers):
    # Given a key as it was issued before the checksum, straight in the database
    key, _ = tenant.new_key(name="legacy")
    raw = f"sk-legacy2345_{secrets.token_urlsafe(32)}"
    ApiKey.objects.filter(pk=key.pk).update(
        public_id="legacy2345", secret_hash=keys.keyed_hash(raw)
    )
    assert not keys.is_checksummed(raw)
    # Then it works through the gateway
    status, body = _call(gw, protocol, method, path, headers(raw))
    assert status == 200, body


@pytest.mark.parametrize(("protocol", "method", "path", "headers"), ROUTES)
def test_a_new_key_works(gw, tenant, protocol, method, path, headers):
    _, raw = tenant.new_key(name="fresh")
    assert keys.is_checksummed(raw) and not keys.checksum_refuses(raw)
    status, body = _call(gw, protocol, method, path, headers(raw))
    assert status == 200, body
