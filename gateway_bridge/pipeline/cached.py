"""Stage 5a, answer from the response cache (``gateway_bridge.cache``).

A deterministic call whose key (or request) opted in is looked up before it
is forwarded; a hit is billed by the cache's rule (the prompt as cache reads,
the output as output, at the model's price), counted against the key's
limits like any call, and answered without a node, as a whole answer or
replayed as a stream.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gateway_bridge import answers
from gateway_bridge import cache as response_cache
from gateway_bridge.pipeline import admit, relay
from gateway_bridge.pipeline.call import Call
from gateway_bridge.protocols.base import CallRequest
from gateway_bridge.usage_mapping import TokenUsage

if TYPE_CHECKING:
    from gateway_bridge.asgi import Send
    from gateway_bridge.pipeline.parts import Parts
    from usage.facade import PriceRow

_MISS = (b"x-gateway-cache", b"miss")
_HIT = (b"x-gateway-cache", b"hit")


async def lookup(
    gw: Parts, call: Call, req: CallRequest, headers: dict[str, str]
) -> tuple[str | None, int, dict[str, Any] | None]:
    """(cache key, ttl, cached entry or None) for this call; (None, 0, None)
    when the call may not use the cache (only a deterministic call may)."""
    auth = call.entry.auth
    if (
        not req.deterministic
        or req.endpoint in admit.EMBEDDING_ENDPOINTS
        or auth.pinned_node_id is not None  # a pinned key measures its node: every call goes there
    ):
        return None, 0, None
    ttl = response_cache.request_ttl(headers, auth.response_cache_seconds)
    if not ttl:
        return None, 0, None
    ckey = response_cache.cache_key(auth.organization_id, req.model, req.upstream_path, req.body)
    hit = await gw.cache.get(ckey)
    if hit is not None:
        gw.metrics.response_cache_hits += 1
    else:
        gw.metrics.response_cache_misses += 1
        call.headers_out.append(_MISS)
    return ckey, ttl, hit


async def serve(
    gw: Parts,
    call: Call,
    req: CallRequest,
    hit: dict[str, Any],
    price: PriceRow | None,
    send: Send,
) -> None:
    """Answer ``call`` from a cache entry."""
    upstream = hit["response"]
    u = hit["usage"]
    usage = TokenUsage(
        input=0, cache_read=u["prompt"], cache_write=0, output=u["output"], reasoning=0
    )
    call.cache_status = "response_hit"
    call.headers_out.append(_HIT)
    cost = admit.cost(call, (0, usage.cache_read, 0, usage.output), price)
    reserved = await gw.admission.reserve(call, cost, usage.prompt_total + usage.output)
    call.usage = usage
    if reserved:
        await gw.limits.store.settle(call.request_id, cost, usage.prompt_total + usage.output)
    adapter = req.response
    if not req.stream:
        await relay.respond(send, 200, adapter.render(upstream, usage, req.model), call)
        return
    # Replay the cached answer as a stream: one delta per choice, then the end.
    await relay.start_stream(call, adapter, send)
    parts = [adapter.stream_start(req.model)]
    for chunk in answers.chunks_of(upstream, req.endpoint):
        parts.append(adapter.stream_chunk(chunk, req.model))
    call.ttft = time.perf_counter() - call.t0
    usage_chunk = {
        "id": upstream.get("id", ""),
        "object": "chat.completion.chunk",
        "created": upstream.get("created", 0),
        "model": req.model,
        "choices": [],
        "usage": upstream.get("usage"),
    }
    parts.append(adapter.stream_chunk(usage_chunk, req.model))
    parts.append(adapter.stream_end(usage, req.model))
    await send({"type": "http.response.body", "body": b"".join(parts), "more_body": False})
