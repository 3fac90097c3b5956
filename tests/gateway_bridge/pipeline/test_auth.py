"""The auth stage: the key from each header form, the client's address
behind trusted proxies, and the key's IP allowlist (through console.kernel.ipnet)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from console.kernel import ipnet
from gateway_bridge.config import KeyCacheConfig
from gateway_bridge.pipeline import auth
from gateway_bridge.pipeline.call import Call
from gateway_bridge.protocols.base import GatewayError


@pytest.mark.parametrize(
    ("headers", "query", "expected"),
    [
        ({"authorization": "Bearer sk-abc"}, b"", "sk-abc"),
        ({"authorization": "bearer   sk-abc  "}, b"", "sk-abc"),
        ({"x-api-key": " sk-anthropic "}, b"", "sk-anthropic"),
        ({"x-goog-api-key": "sk-gemini"}, b"", "sk-gemini"),
        ({}, b"alt=sse&key=sk-query", "sk-query"),
        # Bearer wins over the others; a non-bearer Authorization is not a key.
        ({"authorization": "Bearer sk-1", "x-api-key": "sk-2"}, b"key=sk-3", "sk-1"),
        ({"authorization": "Basic dXNlcjpwdw==", "x-api-key": "sk-2"}, b"", "sk-2"),
        ({"authorization": "Bearer "}, b"", None),
        ({}, b"alt=sse", None),
        ({}, b"key=", None),
    ],
)
def test_the_key_comes_from_each_header_form(headers, query, expected):
    assert auth.raw_key(headers, query) == expected


PROXIES = ipnet.parse(["10.0.0.0/8", "::1"])


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        # An untrusted peer is the client, whatever it forwards.
        ("203.0.113.9", "198.51.100.1", "203.0.113.9"),
        # A trusted proxy: the right-most hop that is not a proxy.
        ("10.0.0.2", "198.51.100.1", "198.51.100.1"),
        ("10.0.0.2", "198.51.100.1, 203.0.113.7, 10.0.0.3", "203.0.113.7"),
        ("::1", "198.51.100.1", "198.51.100.1"),
        ("::ffff:10.0.0.2", "198.51.100.1", "198.51.100.1"),
        # Nothing forwarded, only proxies, or garbage: the peer.
        ("10.0.0.2", None, "10.0.0.2"),
        ("10.0.0.2", "10.0.0.5, 10.0.0.6", "10.0.0.2"),
        ("10.0.0.2", "198.51.100.1, not-an-ip", "10.0.0.2"),
    ],
)
def test_the_client_address_behind_trusted_proxies(peer, forwarded, expected):
    headers = {"x-forwarded-for": forwarded} if forwarded else {}
    assert auth.client_ip(PROXIES, {"client": (peer, 5000)}, headers) == expected


def test_without_trusted_proxies_forwarded_for_is_ignored():
    headers = {"x-forwarded-for": "198.51.100.1"}
    assert auth.client_ip(ipnet.EMPTY, {"client": ("10.0.0.2", 1)}, headers) == "10.0.0.2"
    assert auth.client_ip(ipnet.EMPTY, {"client": None}, headers) == ""


def test_bad_trusted_proxy_entries_are_logged_and_ignored(caplog):
    with caplog.at_level(logging.WARNING):
        nets = auth.trusted_proxies(["10.0.0.1", "proxy.internal"], logging.getLogger("t"))
    assert "10.0.0.1" in nets and len(nets) == 1
    assert "proxy.internal" in caplog.text


class _Auth:
    def __init__(self, allowlist):
        self.ip_allowlist = tuple(allowlist)


class _Entry:
    def __init__(self, allowlist=(), expires_ts=None, grace_ends_ts=None):
        self.auth = _Auth(allowlist)
        self.networks = ipnet.parse(allowlist)
        self.expires_ts = expires_ts
        self.grace_ends_ts = grace_ends_ts


class _State:
    def __init__(self, entries):
        self.entries = entries

    async def key(self, raw):
        return self.entries.get(raw)


def _authenticate(entry, peer, headers=None, trusted=ipnet.EMPTY):
    call = Call("openai", "chat.completions")
    state = _State({"sk-good": entry})
    scope = {"client": (peer, 1234), "query_string": b""}
    hdrs = {"authorization": "Bearer sk-good", **(headers or {})}
    result = asyncio.run(auth.authenticate(state, trusted, call, scope, hdrs))
    return call, result


def test_a_key_without_an_allowlist_takes_any_address():
    entry = _Entry()
    call, got = _authenticate(entry, "198.51.100.1")
    assert got is entry and call.entry is entry and call.client_ip == "198.51.100.1"


@pytest.mark.parametrize(
    ("peer", "allowed"),
    [
        ("203.0.113.5", True),
        ("::ffff:203.0.113.5", True),
        ("203.0.114.5", False),
        ("2001:db8::1", True),
        ("2001:db9::1", False),
    ],
)
def test_the_allowlist_is_checked_through_ipnet(peer, allowed):
    entry = _Entry(["203.0.113.0/24", "2001:db8::/32"])
    if allowed:
        call, _ = _authenticate(entry, peer)
        assert call.client_ip == peer
        return
    with pytest.raises(GatewayError) as exc:
        _authenticate(entry, peer)
    assert (exc.value.status, exc.value.code) == (403, "ip_not_allowed")
    assert peer in exc.value.message


def test_the_allowlist_sees_the_forwarded_client_behind_a_trusted_proxy():
    entry = _Entry(["203.0.113.0/24"])
    forwarded = {"x-forwarded-for": "203.0.113.8"}
    call, _ = _authenticate(entry, "10.0.0.2", forwarded, trusted=PROXIES)
    assert call.client_ip == "203.0.113.8"
    with pytest.raises(GatewayError, match="not allowed"):
        _authenticate(entry, "10.0.0.2", forwarded)  # the proxy is not trusted here


def test_an_expired_key_is_refused_and_recorded():
    call = Call("openai", "chat.completions")
    state = _State({"sk-old": _Entry(expires_ts=time.time() - 1)})
    scope = {"client": ("127.0.0.1", 1)}
    with pytest.raises(GatewayError) as exc:
        asyncio.run(auth.authenticate(state, ipnet.EMPTY, call, scope, {"x-api-key": "sk-old"}))
    assert exc.value.code == "expired_api_key" and call.record


@pytest.mark.parametrize(
    ("headers", "code"),
    [({}, "missing_api_key"), ({"x-api-key": "sk-unknown"}, "invalid_api_key")],
)
def test_a_missing_or_unknown_key_is_401_and_not_recorded(headers, code):
    call = Call("openai", "chat.completions")
    with pytest.raises(GatewayError) as exc:
        asyncio.run(auth.authenticate(_State({}), ipnet.EMPTY, call, {"client": None}, headers))
    assert (exc.value.status, exc.value.code) == (401, code)
    assert call.record is False


def test_the_key_digest_is_remembered_bounded_and_follows_the_pepper(settings, monkeypatch):
    """The HMAC of a presented key is remembered (secret → hash only, never a
    verdict: the key cache still decides, so a revoked key is refused at once),
    at most ``MAX_DIGESTS`` of them, and a new pepper forgets them all."""
    from accounts.facade import keyed_hash
    from gateway_bridge import state as state_module

    monkeypatch.setattr(state_module, "MAX_DIGESTS", 3)
    st = state_module.GatewayState(KeyCacheConfig.from_settings())
    try:
        keys = [f"sk-key{i}" for i in range(5)]
        for raw in keys:
            assert st.digest(raw) == keyed_hash(raw)
            assert st.digest(raw) == keyed_hash(raw)  # remembered
            assert len(st._digests) <= 3
        settings.API_KEY_PEPPER = "another-pepper"
        assert st.digest(keys[-1]) == keyed_hash(keys[-1])
        assert list(st._digests) == [keys[-1]]
    finally:
        st.executor.shutdown(wait=False)
