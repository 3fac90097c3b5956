"""The gateway's pooled HTTP/1.1 client to inference nodes (asyncio + httptools).

One ``UpstreamPool`` per process keeps keep-alive connections per node
(``base_url``). A request costs a few tens of microseconds: the request is one
``transport.write``, the response is parsed by httptools in ``data_received``
and every timeout of a request shares one timer handle (no ``wait_for``, no
extra tasks). aiohttp's client costs several times more per request.

    resp = await pool.request("POST", base_url, "/v1/chat/completions", body, headers,
                              connect_timeout=2, first_byte_timeout=30, idle_timeout=30)
    resp.status, resp.headers            # headers: dict with lower-case names
    data = await resp.read()             # whole body (Content-Length, chunked or until close)
    async for data in resp.sse(): ...    # each SSE event's data payload, b"[DONE]" included
    resp.release()                       # back to the pool when fully read, else closed
    resp.abort()                         # close now: the node sees the disconnect

``read()`` and ``sse()`` release the connection themselves when the response
has been read to the end and close it on any error (or when the consumer is
cancelled or stops iterating); ``release()`` and ``abort()`` are idempotent,
so ``try: ... finally: resp.release()`` is always safe.

Timeouts (seconds, ``None`` for none): ``connect_timeout`` for the TCP (and TLS)
connect and for waiting on a free connection when the host is at its limit;
``first_byte_timeout`` from sending the request to the complete response head;
``idle_timeout`` for any wait on more body data (between SSE events);
``total_timeout`` for the whole exchange, body included. A failure raises
``UpstreamError`` whose ``reason`` is one of ``REASONS``.

Modules by topic: ``errors`` (``UpstreamError`` and its reasons),
``connection`` (one keep-alive connection: parsing and timeouts), ``response``
(reading a body or server-sent events), ``pool`` (connections per node and
``UpstreamPool.request``).
"""

from gateway_bridge.upstreams.connection import HIGH_WATER_BYTES
from gateway_bridge.upstreams.errors import REASONS, UpstreamError
from gateway_bridge.upstreams.pool import UpstreamPool
from gateway_bridge.upstreams.response import SETTLE_S, UpstreamResponse

__all__ = [
    "HIGH_WATER_BYTES",
    "REASONS",
    "SETTLE_S",
    "UpstreamError",
    "UpstreamPool",
    "UpstreamResponse",
]
