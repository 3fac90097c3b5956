"""The forwarding component alone, on a fake upstream pool: one try per
channel, one outcome each; a channel that fails before anything reached the
client is left for the next one (a retry, counted), and every try sends the
pivot in the channel's own terms without changing it for the next try."""

from __future__ import annotations

import asyncio
import json
from types import MappingProxyType, SimpleNamespace

import pytest

from console.kernel import ipnet
from gateway_bridge.cache import ResponseCache
from gateway_bridge.keypool import KeyPool
from gateway_bridge.metrics import GatewayMetrics
from gateway_bridge.pipeline.call import Call
from gateway_bridge.pipeline.forward import Forwarding
from gateway_bridge.protocols.base import GatewayError
from gateway_bridge.protocols.openai import parse_call
from gateway_bridge.routing import Router, RouterConfig
from gateway_bridge.state_db import KeyEntry
from gateway_bridge.upstreams import UpstreamError
from inference_node.selectors import RoutableCredential, RoutableNode
from tests.gateway_bridge.limits.test_plan import auth

ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "served",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}  # fmt: skip


def node(node_id: int, upstream: str) -> RoutableNode:
    return RoutableNode(
        node_id=node_id, name=f"n{node_id}", base_url=f"http://127.0.0.1:{9000 + node_id}",
        token="", weight=1, max_concurrency=8, upstream_model=upstream, context_window=8192,
        running=None, waiting=None, kv_cache_usage=None, prefix_cache_hit_rate=None,
        labels=MappingProxyType({}), organization_id=None,
        credentials=(RoutableCredential(credential_id=None, secret=""),),  # its own token
    )  # fmt: skip


class Answer:
    def __init__(self, status: int, body: dict):
        self.status, self.headers, self._body = status, {}, json.dumps(body).encode()

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass


class Pool:
    """Channels by base URL: an exception to raise or the status to answer."""

    def __init__(self, outcomes: dict[str, object]):
        self.outcomes = outcomes
        self.sent: list[tuple[str, dict]] = []

    async def request(self, method, base_url, path, payload, headers, **kwargs):
        self.sent.append((base_url, json.loads(payload)))
        outcome = self.outcomes[base_url]
        if isinstance(outcome, Exception):
            raise outcome
        return Answer(outcome, ANSWER if outcome == 200 else {"error": {"message": "down"}})


def forwarding(pool: Pool, retries: int = 2) -> Forwarding:
    metrics = GatewayMetrics()
    return Forwarding(
        Router(RouterConfig()), KeyPool(RouterConfig()), pool, metrics,  # type: ignore[arg-type]
        SimpleNamespace(metrics=metrics, cache=ResponseCache(0)),  # type: ignore[arg-type]
        timeouts={}, retries=retries, backoff=0.0,
    )  # fmt: skip


def run(fw: Forwarding, chain) -> tuple[str, list[dict], dict]:
    body = {"model": "m", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}
    req = parse_call("chat.completions", body, path_model=None, query=b"", headers={})
    call = Call("openai", "chat.completions")
    call.entry = KeyEntry(auth(), ipnet.Networks(), 0, None, 0.0)
    sent: list[dict] = []

    async def receive():
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    served = asyncio.run(fw.forward(call, req, chain, receive, send, None, 0))
    return served, sent, req.body


def test_a_failing_channel_is_left_for_the_next_and_the_pivot_is_left_as_it_was():
    down, up = node(1, "first-id"), node(2, "second-id")
    pool = Pool({down.base_url: UpstreamError("connect"), up.base_url: 200})
    fw = forwarding(pool)
    served, sent, pivot = run(fw, [("m", (down, up))])
    assert served == "m"
    assert sent[0]["status"] == 200 and json.loads(sent[1]["body"])["choices"][0]["message"]
    tried = [url for url, _ in pool.sent]
    assert tried.count(down.base_url) <= 1 and tried[-1] == up.base_url
    upstream_id = {down.base_url: "first-id", up.base_url: "second-id"}
    assert all(body["model"] == upstream_id[url] for url, body in pool.sent)
    assert pivot["model"] == "m"  # each try's body was a copy
    assert fw.metrics.retries == tried.count(down.base_url)


def test_a_client_error_is_never_retried():
    bad = node(1, "id")
    pool = Pool({bad.base_url: 400})
    with pytest.raises(GatewayError) as refused:
        run(forwarding(pool), [("m", (bad,))])
    assert refused.value.status == 400 and len(pool.sent) == 1


def test_retries_are_bounded_then_the_last_failure_is_the_answer():
    nodes = tuple(node(i, "id") for i in range(1, 6))
    pool = Pool({n.base_url: 503 for n in nodes})
    fw = forwarding(pool, retries=2)
    with pytest.raises(GatewayError) as failed:
        run(fw, [("m", nodes)])
    assert failed.value.status == 502 and len(pool.sent) == 3  # one try and two retries
    assert fw.metrics.retries == 2
