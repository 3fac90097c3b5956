"""Stage 5, forward: route the call to a node and retry while nothing has
reached the client.

For each try the router picks a node of the current model of the chain
(prefix affinity, bounded load, circuit breakers, the priority queue when
every node is busy). A connect error, a 429 or 5xx, an answer that is not
JSON or a stream that ends before its first event moves the call to another
node after a jittered exponential backoff, up to ``GATEWAY_RETRIES`` times;
when no node of a model is left, the next model of the fallback chain is
tried. A 4xx from the node is the client's error and is not retried. Once
bytes reached the client (a stream that started) there is no retry. Every
try's outcome feeds the node's circuit breaker.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import TYPE_CHECKING

import orjson
from django.conf import settings

from gateway_bridge import answers
from gateway_bridge.pipeline import relay
from gateway_bridge.pipeline.call import Call, Retry, StreamStarted
from gateway_bridge.protocols.base import (
    OVERLOADED,
    RATE_LIMIT,
    UPSTREAM,
    CallRequest,
    GatewayError,
)
from gateway_bridge.routing import NoCandidates, Outcome, QueueFull, QueueTimeout
from gateway_bridge.upstreams import UpstreamError

if TYPE_CHECKING:
    from gateway_bridge.gateway import Gateway

_NO_EXCLUSIONS: frozenset[int] = frozenset()
_OUTCOME_NAMES = {outcome: outcome.name.lower() for outcome in Outcome}


async def forward(gw: Gateway, call: Call, req: CallRequest, chain, receive, send, ckey, cache_ttl):
    """Send the call to a node (retrying, falling back); answer the client.
    Returns the public model that served it."""
    auth = call.entry.auth
    attempt = 0
    link = 0
    exclude: set[int] = set()
    last_error: GatewayError | None = None
    while True:
        model, nodes = chain[link]
        try:
            lease = await gw.router.acquire(
                model,
                nodes,
                prefix=req.prefix_text,
                priority=auth.priority,
                exclude=frozenset(exclude) if exclude else _NO_EXCLUSIONS,
            )
        except NoCandidates:
            link += 1
            if link < len(chain):
                exclude.clear()
                gw.metrics.fallbacks += 1
                continue
            raise last_error or GatewayError(
                OVERLOADED,
                "no_healthy_node",
                f"Every node serving '{req.model}' is failing right now; retry shortly.",
                headers=[("retry-after", "5")],
            ) from None
        except QueueTimeout:
            raise GatewayError(
                OVERLOADED,
                "queue_timeout",
                "Every node serving this model is at capacity; the call waited "
                f"{settings.GATEWAY_QUEUE_TIMEOUT:g} s for a slot.",
                headers=[("retry-after", "1")],
            ) from None
        except QueueFull:
            raise GatewayError(
                RATE_LIMIT,
                "queue_full",
                "Too many calls are waiting for this model; retry shortly.",
                headers=[("retry-after", "1")],
            ) from None
        call.queue_s += lease.queue_seconds
        node = lease.node
        call.node_id = node.node_id
        call.node_name = node.name
        call.model = model
        req.body["model"] = node.upstream_model
        if req.stream:
            req.body["stream"] = True
            req.body["stream_options"] = {"include_usage": True}
        payload = orjson.dumps(req.body)
        up_headers = [("content-type", "application/json"), ("x-request-id", call.request_id)]
        if node.token:
            up_headers.append(("authorization", f"Bearer {node.token}"))
        t_up = time.perf_counter()
        outcome = Outcome.FAILURE
        retry_error: GatewayError | None = None
        try:
            resp = await gw.pool.request(
                "POST", node.base_url, req.upstream_path, payload, up_headers, **gw.timeouts
            )
            try:
                if resp.status == 429 or resp.status >= 500:
                    raw = await resp.read()
                    retry_error = answers.upstream_status_error(resp.status, raw)
                elif resp.status >= 400:
                    raw = await resp.read()
                    outcome = Outcome.NEUTRAL
                    raise answers.upstream_client_error(resp.status, raw)
                elif req.stream:
                    done = await relay.stream(
                        gw, call, req, resp, receive, send, t_up, ckey, cache_ttl
                    )
                    outcome = Outcome.SUCCESS if done else Outcome.NEUTRAL
                    return model
                else:
                    raw = await resp.read()
                    call.upstream_s = time.perf_counter() - t_up
                    obj = answers.json_object(raw)
                    if obj is None:
                        retry_error = GatewayError(
                            UPSTREAM, "upstream_invalid_response",
                            "The node answered with something that is not JSON.",
                        )  # fmt: skip
                    else:
                        outcome = Outcome.SUCCESS
                        await relay.plain(gw, call, req, obj, send, ckey, cache_ttl)
                        return model
            finally:
                resp.release()
        except StreamStarted as started:
            # Bytes reached the client: no retry; the stream already ended with an error frame.
            outcome = Outcome.FAILURE if started.node_fault else Outcome.NEUTRAL
            return model
        except Retry as retry:
            retry_error = retry.error
        except UpstreamError as exc:
            retry_error = answers.upstream_exception_error(exc)
        finally:
            lease.release(outcome)
            gw.metrics.node_outcomes[(node.name, _OUTCOME_NAMES[outcome])] += 1
            if call.upstream_s is None:
                call.upstream_s = time.perf_counter() - t_up
        # A failure before anything reached the client: retry elsewhere.
        last_error = retry_error
        attempt += 1
        if attempt > gw.retries:
            raise retry_error
        gw.metrics.retries += 1
        exclude.add(node.node_id)
        delay = gw.backoff * (2 ** (attempt - 1))
        await asyncio.sleep(delay * (0.5 + random.random()))  # noqa: S311 - jitter
