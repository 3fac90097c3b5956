"""A bare pass-through proxy: the floor ``bench_gateway`` measures the gateway against.

What any Python proxy on uvicorn + aiohttp costs before it does any work of
its own: read the client's request, send it unchanged to one upstream over a
pooled aiohttp session, and relay the answer unchanged (a body with a
Content-Length whole, anything else chunk by chunk as it arrives, so streams
stay streams). No key check, no limits, no routing, no usage event: the
gateway with every rule on is compared with this, run under the same uvicorn
settings, in the same benchmark run.

    GATEWAY_FLOOR_UPSTREAM=http://127.0.0.1:8001 \\
        python -m uvicorn tooling.bench.floor:create_app --factory --host 127.0.0.1 ...

Benchmark tooling only: it imports no Django, and it forwards to a loopback
upstream only (the benchmark never leaves the machine).
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

import aiohttp

UPSTREAM_ENV = "GATEWAY_FLOOR_UPSTREAM"
# Hop-by-hop headers (RFC 9110 7.6.1) and those the HTTP layers set themselves.
_REQUEST_SKIPPED = frozenset(
    {b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"te",
     b"upgrade", b"proxy-connection", b"expect"}
)  # fmt: skip
_RESPONSE_SKIPPED = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"date", b"server", b"upgrade"}
)


def _loopback(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"the floor forwards to an http:// URL, not {url!r}")
    host = parts.hostname
    if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"the floor forwards to a loopback address only, not {host!r}")
    return url.rstrip("/")


class Floor:
    """The ASGI app: every HTTP request goes to ``upstream`` + the same path and query."""

    def __init__(self, upstream: str):
        self.upstream = _loopback(upstream)
        self.session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        # The settings a careful pass-through would pick: no connection limit (the
        # benchmark's clients are the limit), no decompression, no added headers.
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, keepalive_timeout=60)
        self.session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=300),
        )
        return self.session

    async def __call__(self, scope, receive, send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._proxy(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.session is not None:
                    await self.session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _proxy(self, scope, receive, send) -> None:
        session = self.session or self._open()
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body")
            if body:
                chunks.append(body)
            if not message.get("more_body"):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        url = self.upstream + scope["path"]
        if scope["query_string"]:
            url += "?" + scope["query_string"].decode("latin-1")
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in scope["headers"]
            if name not in _REQUEST_SKIPPED
        ]
        try:
            resp = await session.request(scope["method"], url, data=body, headers=headers)
        except (aiohttp.ClientError, OSError) as error:
            message = f"floor: upstream failed: {error}\n".encode()
            await send(
                {"type": "http.response.start", "status": 502,
                 "headers": [(b"content-type", b"text/plain"),
                             (b"content-length", str(len(message)).encode())]}
            )  # fmt: skip
            await send({"type": "http.response.body", "body": message})
            return
        async with resp:
            skipped = _RESPONSE_SKIPPED
            out = [(k.lower(), v) for k, v in resp.raw_headers if k.lower() not in skipped]
            await send({"type": "http.response.start", "status": resp.status, "headers": out})
            if resp.content_length is not None:
                await send({"type": "http.response.body", "body": await resp.read()})
                return
            async for data in resp.content.iter_any():
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b""})


def create_app() -> Floor:
    """uvicorn's ``--factory`` entry: the upstream comes from ``GATEWAY_FLOOR_UPSTREAM``."""
    upstream = os.environ.get(UPSTREAM_ENV)
    if not upstream:
        raise RuntimeError(f"{UPSTREAM_ENV} is not set")
    return Floor(upstream)
