"""``/metrics`` over HTTP: who may read it, and the host's Prometheus text
(every live gateway process sharing the metrics directory, and the archived
counters of dead ones)."""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import TYPE_CHECKING

from gateway_bridge.metrics import merge

if TYPE_CHECKING:
    from gateway_bridge.asgi import Send
    from gateway_bridge.pipeline.parts import Parts

logger = logging.getLogger("gateway_bridge.gateway")


def metrics_allowed(authorization: str, token: str, public: bool) -> bool:
    """Whether a request with this ``Authorization`` header may read /metrics:
    with ``GATEWAY_METRICS_TOKEN`` set, only with that bearer token (compared
    in constant time); without one, only when ``GATEWAY_METRICS_PUBLIC`` opens
    it. Closed by default: the metrics name every node, shared and private."""
    if token:
        scheme, _, presented = authorization.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            presented.strip().encode(), token.encode()
        )
    return public


async def host_metrics(gw: Parts) -> str:
    """Prometheus text for the whole host: every live process sharing
    the metrics directory, and the archived counters of dead ones."""
    own = gw.metrics.snapshot()
    directory = gw.metrics_dir
    if directory is None:
        return gw.metrics.render()
    try:
        loop = asyncio.get_running_loop()
        live, archive = await loop.run_in_executor(None, directory.collect, own)
    except Exception:
        logger.exception("gateway: reading the host's metrics failed; this process only")
        live, archive = [own], None
    specs = gw.metrics.specs()
    return gw.metrics.render(merge(live, archive, specs))


async def serve(gw: Parts, headers: dict[str, str], send: Send) -> None:
    """The answer to ``GET /metrics``: the host's metrics, or a 401."""
    extra: list[tuple[bytes, bytes]] = []
    config = gw.config
    if metrics_allowed(
        headers.get("authorization", ""), config.metrics_token, config.metrics_public
    ):
        body = (await host_metrics(gw)).encode()
        status = 200
    else:
        body = (
            b"/metrics needs 'Authorization: Bearer <GATEWAY_METRICS_TOKEN>' "
            b"(or GATEWAY_METRICS_PUBLIC=true)\n"
        )
        status = 401
        extra = [(b"www-authenticate", b'Bearer realm="metrics"')]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; version=0.0.4; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
