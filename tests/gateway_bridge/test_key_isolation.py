"""The gateway's paths (``/v1/*``, ``/v1beta/*``, not Django URLs), through
the real gateway: without a valid key every one answers 401 in its
protocol's own error format and records nothing; another organization's key
sees none of an organization's private models, and a key narrowed to one
model lists only that one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from accounts.actors import Actor
from accounts.models import Role
from tests.factories import MembershipFactory, OrganizationFactory, issue_key

GATEWAY_CALLS = [
    # (protocol, method, path, body)
    ("openai", "POST", "/v1/chat/completions", {"model": "sim-chat-small", "messages": []}),
    ("openai", "POST", "/v1/completions", {"model": "sim-chat-small", "prompt": "hi"}),
    ("openai", "POST", "/v1/embeddings", {"model": "sim-embed", "input": "hi"}),
    ("openai", "GET", "/v1/models", None),
    ("openai", "GET", "/v1/models/sim-chat-small", None),
    ("openai", "GET", "/v1/key", None),
    ("openai", "GET", "/api/v1/key", None),
    ("openai", "GET", "/v1/dashboard/billing/subscription", None),
    ("openai", "GET", "/v1/dashboard/billing/usage?start_date=2026-12-01", None),
    ("anthropic", "POST", "/v1/messages", {"model": "sim-chat-small", "max_tokens": 5}),
    ("anthropic", "POST", "/v1/messages/count_tokens", {"model": "sim-chat-small"}),
    ("anthropic", "GET", "/v1/models", None),
    ("gemini", "POST", "/v1beta/models/sim-chat-small:generateContent", {"contents": []}),
    ("gemini", "POST", "/v1beta/models/sim-chat-small:streamGenerateContent", {"contents": []}),
    ("gemini", "POST", "/v1beta/models/sim-chat-small:countTokens", {"contents": []}),
    ("gemini", "POST", "/v1beta/models/sim-embed:embedContent", {"content": {}}),
    ("gemini", "POST", "/v1beta/models/sim-embed:batchEmbedContents", {"requests": []}),
    ("gemini", "GET", "/v1beta/models", None),
    ("gemini", "GET", "/v1beta/models/sim-chat-small", None),
]
# Where each protocol's clients send the key.
KEY_HEADERS = {
    "openai": lambda raw: {"Authorization": f"Bearer {raw}"},
    "anthropic": lambda raw: {"x-api-key": raw, "anthropic-version": "2023-06-01"},
    "gemini": lambda raw: {"x-goog-api-key": raw},
}
PROTOCOL_HEADERS = {"anthropic": {"anthropic-version": "2023-06-01"}}


def _auth_error(protocol: str, body: dict) -> bool:
    """Is ``body`` an authentication error in ``protocol``'s own format?"""
    if protocol == "openai":
        err = body.get("error") or {}
        return bool(err.get("message")) and "type" in err and "code" in err
    if protocol == "anthropic":
        err = body.get("error") or {}
        return body.get("type") == "error" and err.get("type") == "authentication_error"
    err = body.get("error") or {}
    return err.get("code") == 401 and err.get("status") == "UNAUTHENTICATED"


@pytest.fixture
def gateway_world(transactional_db, settings, tmp_path):
    """Org A with a private node and model, org B with its own key, a shared
    node for both; the real gateway on a loopback port. The nodes' URLs are
    a closed loopback port: nothing here may reach a node."""
    from tests.gateway_bridge.harness import running_gateway
    from tests.inference_node.factories import NodeFactory
    from usage.seed import seed_catalog

    settings.GATEWAY_SPOOL_DIR = tmp_path / "spool"
    settings.GATEWAY_LIMITS_STORE = "memory"
    settings.GATEWAY_RETRIES = 0
    seed_catalog()
    closed = "http://127.0.0.1:9/v1"
    NodeFactory(organization=None, base_url=closed, serves=["sim-chat-small", "sim-embed"])
    tenants = {}
    for tag in ("a", "b"):
        org = OrganizationFactory(name=f"Org {tag.upper()}", slug=f"gw-{tag}")
        owner = Actor(MembershipFactory(organization=org, role=Role.OWNER), "127.0.0.1")
        key, raw = issue_key(owner, name=f"key-{tag}")
        tenants[tag] = SimpleNamespace(org=org, owner=owner, key=key, raw=raw)
    NodeFactory(organization=tenants["a"].org, base_url=closed, serves=["acme-private"])
    _narrow, narrow_raw = issue_key(tenants["a"].owner, allowed_models=["sim-chat-small"])
    tenants["a"].narrow_raw = narrow_raw
    with running_gateway() as gw:
        yield SimpleNamespace(gw=gw, **tenants)


def _gateway_request(gw, method, path, body=None, headers=None):
    import http.client
    import json

    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        payload = json.dumps(body) if body is not None else None
        conn.request(
            method,
            path,
            body=payload,
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, data
    finally:
        conn.close()


def _model_names(protocol: str, data: bytes) -> set[str]:
    import json

    body = json.loads(data)
    if protocol == "gemini":
        return {m["name"].removeprefix("models/") for m in body["models"]}
    return {m["id"] for m in body["data"]}


def test_gateway_paths_without_a_key_answer_401_in_their_protocols_format(gateway_world):
    import json

    gw = gateway_world.gw
    failures = []
    for protocol, method, path, body in GATEWAY_CALLS:
        for label, headers in (
            ("no key", dict(PROTOCOL_HEADERS.get(protocol, {}))),
            ("unknown key", KEY_HEADERS[protocol]("sk-abcdefghij_" + "x" * 40)),
            ("malformed key", KEY_HEADERS[protocol]("not-a-key")),
            ("revoked-looking key", KEY_HEADERS[protocol](gateway_world.a.raw[:-1] + "Z")),
        ):
            status, data = _gateway_request(gw, method, path, body, headers)
            try:
                parsed = json.loads(data)
            except ValueError:
                parsed = {}
            if status != 401 or not _auth_error(protocol, parsed):
                failures.append(f"{label}: {method} {path} -> {status} {data[:200]!r}")
    assert not failures, "\n".join(failures)
    # Nothing was recorded for calls without a valid key.
    assert gw.emitter.events == []


def test_another_organizations_key_sees_none_of_its_models(gateway_world):
    w = gateway_world
    for protocol, path in (
        ("openai", "/v1/models"),
        ("anthropic", "/v1/models"),
        ("gemini", "/v1beta/models"),
    ):
        status, data = _gateway_request(w.gw, "GET", path, headers=KEY_HEADERS[protocol](w.a.raw))
        assert status == 200, data
        assert {"acme-private", "sim-chat-small"} <= _model_names(protocol, data)
        status, data = _gateway_request(w.gw, "GET", path, headers=KEY_HEADERS[protocol](w.b.raw))
        assert status == 200, data
        names = _model_names(protocol, data)
        assert "sim-chat-small" in names and "acme-private" not in names, (protocol, names)
        # A key narrowed to one model lists only that one.
        status, data = _gateway_request(
            w.gw, "GET", path, headers=KEY_HEADERS[protocol](w.a.narrow_raw)
        )
        assert _model_names(protocol, data) == {"sim-chat-small"}, (protocol, data)
    status, _ = _gateway_request(
        w.gw, "GET", "/v1/models/acme-private", headers=KEY_HEADERS["openai"](w.b.raw)
    )
    assert status == 404
    status, _ = _gateway_request(
        w.gw, "GET", "/v1beta/models/acme-private", headers=KEY_HEADERS["gemini"](w.b.raw)
    )
    assert status == 404
    # Org B cannot call org A's private model either: refused before any node.
    chat = {"model": "acme-private", "messages": [{"role": "user", "content": "hi"}]}
    status, data = _gateway_request(
        w.gw, "POST", "/v1/chat/completions", chat, KEY_HEADERS["openai"](w.b.raw)
    )
    assert status == 404, data
    messages = {
        "model": "acme-private",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
    }
    status, data = _gateway_request(
        w.gw, "POST", "/v1/messages", messages, KEY_HEADERS["anthropic"](w.b.raw)
    )
    assert status == 404, data
    status, data = _gateway_request(
        w.gw,
        "POST",
        "/v1beta/models/acme-private:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        KEY_HEADERS["gemini"](w.b.raw),
    )
    assert status == 404, data
