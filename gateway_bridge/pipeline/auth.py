"""Stage 2, authenticate: the key, the client's address, the key's rules on both.

- The key comes from ``Authorization: Bearer``, ``x-api-key`` (Anthropic),
  ``x-goog-api-key`` (Gemini) or the ``key`` query parameter, in that order;
  it is looked up in the gateway's key cache (``GatewayState``). The query
  parameter is Gemini's convention and is read on Gemini routes only: on an
  OpenAI or Anthropic path a key in the URL (which proxies and access logs
  keep) is refused with that protocol's 401.
- The client's address is the TCP peer, unless the peer is one of our
  trusted proxies (``GATEWAY_TRUSTED_PROXIES``): then it is the right-most
  ``X-Forwarded-For`` hop that is not a trusted proxy.
- A key in the checksummed format (``accounts.keys``) whose checksum is wrong
  (a typo, a made-up string) is refused first, with the same 401 as an
  unknown key and before any hashing, cache or database work: a flood of
  random keys shaped like ours costs a CRC each, never a query.
- The key's IP allowlist and expiry, and the end of a rotated-out secret's
  grace period, are checked on every call (not only when the key is loaded).

Networks (trusted proxies, allowlists) are parsed once, by ``console.kernel.ipnet``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from accounts.facade import checksum_refuses
from console.kernel import ipnet
from gateway_bridge.pipeline.call import Call
from gateway_bridge.protocols.base import AUTHENTICATION, PERMISSION, GatewayError

if TYPE_CHECKING:
    from gateway_bridge.asgi import Scope
    from gateway_bridge.state import GatewayState, KeyEntry

# The one answer for a key that is not usable, whatever the reason (a wrong
# checksum included): the caller learns no more than "invalid".
INVALID_KEY_MESSAGE = (
    "Invalid API key: it is unknown, revoked or expired, or its account is suspended."
)


def trusted_proxies(entries: Iterable[str], logger: logging.Logger) -> ipnet.Networks:
    """``GATEWAY_TRUSTED_PROXIES`` parsed; an entry that is not an address or
    a range is logged and ignored."""
    return ipnet.parse(
        entries,
        on_invalid=lambda raw: logger.warning(
            "GATEWAY_TRUSTED_PROXIES: ignoring %r (not an IP or CIDR)", raw
        ),
    )


def query_key(query_string: bytes) -> str | None:
    """The key in the ``key`` query parameter, or None."""
    if b"key=" in query_string:
        values = parse_qs(query_string.decode("latin-1")).get("key")
        if values and values[0]:
            return values[0]
    return None


def raw_key(headers: dict[str, str], query_string: bytes) -> str | None:
    """The key the client presented, or None. ``query_string`` is searched
    for ``key=`` (pass ``b""`` where the protocol takes no key in the URL)."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    for name in ("x-api-key", "x-goog-api-key"):
        presented = headers.get(name)
        if presented:
            return presented.strip()
    return query_key(query_string)


def client_ip(trusted: ipnet.Networks, scope: Scope, headers: dict[str, str]) -> str:
    """The client's address: the peer, or behind trusted proxies the
    right-most forwarded hop that is not one of them ("" when unknown)."""
    peer = (scope.get("client") or ("",))[0] or ""
    return ipnet.forwarded_client(peer, headers.get("x-forwarded-for"), trusted)


async def authenticate(
    state: GatewayState, trusted: ipnet.Networks, call: Call, scope: Scope, headers: dict[str, str]
) -> KeyEntry:
    """The call's key entry (also set on ``call``, with the client's address);
    raises the protocol-neutral 401 / 403 otherwise."""
    query = scope.get("query_string") or b""
    raw = raw_key(headers, query if call.protocol == "gemini" else b"")
    if raw is None:
        call.record = False
        if query_key(query) is not None:
            raise GatewayError(
                AUTHENTICATION,
                "missing_api_key",
                "An API key in the URL (?key=) is accepted on Gemini paths only: send it as "
                "'Authorization: Bearer <key>' or 'x-api-key'.",
            )
        raise GatewayError(
            AUTHENTICATION,
            "missing_api_key",
            "No API key: send it as 'Authorization: Bearer <key>', 'x-api-key' or "
            "'x-goog-api-key'.",
        )
    if checksum_refuses(raw):
        # Shaped like a key we issue, but not one: no hash, cache or query.
        call.record = False
        raise GatewayError(AUTHENTICATION, "invalid_api_key", INVALID_KEY_MESSAGE)
    entry = await state.key(raw)
    if entry is None:
        call.record = False
        raise GatewayError(
            AUTHENTICATION,
            "invalid_api_key",
            INVALID_KEY_MESSAGE,
        )
    grace_ends = entry.grace_ends_ts
    if grace_ends is not None and grace_ends <= time.time():
        call.record = False
        raise GatewayError(
            AUTHENTICATION,
            "invalid_api_key",
            INVALID_KEY_MESSAGE,
        )
    call.entry = entry
    ip = call.client_ip = client_ip(trusted, scope, headers) or None
    if entry.expires_ts is not None and entry.expires_ts <= time.time():
        raise GatewayError(AUTHENTICATION, "expired_api_key", "This API key has expired.")
    networks = entry.networks
    if networks and (ip or "") not in networks:
        raise GatewayError(
            PERMISSION,
            "ip_not_allowed",
            f"Requests from {ip or 'this address'} are not allowed for this key.",
        )
    return entry
