"""One HTTP POST of a delivery, under the tenant address rules.

The URL a tenant gives must reach a public address (the rules of tenant
inference nodes, ``inference_node.facade``; ``NODE_ALLOW_PRIVATE_URLS``
lifts them for tests and private deployments): checked when the destination
is saved and again here, at connect time, since a name can resolve elsewhere
later: an IP literal is judged before connecting, a name by
``PublicOnlyResolver``, whose checked addresses aiohttp then connects to.

Short timeouts (``WEBHOOK_CONNECT_TIMEOUT_SECONDS``, ``WEBHOOK_TIMEOUT_SECONDS``
for the whole exchange), no redirects followed (a 3xx is a failure naming
its target) and at most a few KB of the answer read: a slow or hostile
endpoint costs one worker slot for seconds, never more.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
from django.conf import settings

from inference_node.facade import (
    PrivateAddressRefused,
    PublicOnlyResolver,
    guarded,
    literal_refusal,
)

_ANSWER_LIMIT = 4096


@dataclass(frozen=True)
class Sent:
    ok: bool
    status_code: int | None
    error: str
    duration_ms: int
    answer: bytes = b""


async def _post(url: str, body: bytes, headers: dict, public_only: bool) -> tuple[int, bytes, str]:
    timeout = aiohttp.ClientTimeout(
        total=settings.WEBHOOK_TIMEOUT_SECONDS,
        sock_connect=settings.WEBHOOK_CONNECT_TIMEOUT_SECONDS,
        connect=settings.WEBHOOK_CONNECT_TIMEOUT_SECONDS,
    )
    connector = aiohttp.TCPConnector(
        resolver=PublicOnlyResolver() if public_only else None, force_close=True
    )
    async with (
        aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as session,
        session.post(url, data=body, headers=headers, allow_redirects=False) as response,
    ):
        answer = await response.content.read(_ANSWER_LIMIT)
        return response.status, answer, response.headers.get("Location", "")


def post(*, url: str, body: bytes, headers: dict, organization_id: int | None) -> Sent:
    """POST ``body`` to ``url``; never raises for the endpoint's faults."""
    started = time.monotonic()

    def done(ok: bool, code: int | None, error: str, answer: bytes = b"") -> Sent:
        return Sent(ok, code, error[:500], int((time.monotonic() - started) * 1000), answer)

    public_only = guarded(organization_id)
    host = urlsplit(url).hostname or ""
    if public_only:
        reason = literal_refusal(host)
        if reason:
            return done(False, None, f"refused: {host} is {reason}")
    headers = {"Content-Type": "application/json", "User-Agent": "console-webhooks/1", **headers}
    try:
        code, answer, location = asyncio.run(_post(url, body, headers, public_only))
    except PrivateAddressRefused:
        return done(False, None, f"refused: {host} resolves to a non-public address")
    except TimeoutError:
        return done(False, None, f"timed out after {settings.WEBHOOK_TIMEOUT_SECONDS:g} s")
    except aiohttp.ClientConnectorError as exc:
        cause = exc.os_error
        if isinstance(cause, PrivateAddressRefused):
            return done(False, None, f"refused: {host} resolves to a non-public address")
        return done(False, None, f"cannot connect: {cause or exc}")
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return done(False, None, f"{type(exc).__name__}: {exc}")
    if 300 <= code < 400:
        return done(False, code, f"redirect to {location or '(no Location)'}", answer)
    if not 200 <= code < 300:
        return done(False, code, f"HTTP {code}", answer)
    return done(True, code, "", answer)
