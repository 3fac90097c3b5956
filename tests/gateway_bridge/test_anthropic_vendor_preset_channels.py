"""A channel made from each Anthropic-protocol vendor preset (Kimi, GLM,
DeepSeek, Qwen), end to end: the official ``anthropic`` SDK calls the
gateway as Claude Code does (a cached system prompt, then the same again,
then a stream), the gateway passes each call through natively to the
preset's API path on the channel's host, and bills the cache reads the
vendor reports.

The vendor's host is a loopback stand-in: it takes the preset's path
(``/anthropic/v1/messages``, ``/apps/anthropic/v1/messages`` ...), records
it and hands the call to the vendor simulator's ``/v1/messages``, returning
its answer as it came. Nothing here leaves 127.0.0.1."""

from __future__ import annotations

import base64
import contextlib
import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import anthropic
import pytest

from inference_node import services
from inference_node.presets import PRESETS
from inference_node.selectors import CostPrice
from tests.gateway_bridge.vendor_fixtures import COST, KEY_A, captured
from usage.ingest import ingest_events
from usage.models import CallRecord
from usage.prices import price_for
from usage.rating import PPM, TokenCounts, rate

KEYS = ("moonshot-anthropic", "zhipu-anthropic", "deepseek-anthropic", "dashscope-anthropic")
SYSTEM = "You are the coding agent of the ACME repository. Keep answers short. " * 12
# Headers that belong to one hop, not to the call.
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class _VendorHost(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, target: str, prefix: str):
        super().__init__(("127.0.0.1", 0), _Forward)
        self.target = urlsplit(target)
        self.prefix = prefix
        self.paths: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self._forward()

    def do_GET(self):
        self._forward()

    def _forward(self):
        host: _VendorHost = self.server  # type: ignore[assignment]
        host.paths.append(self.path)
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        if not self.path.startswith(host.prefix + "/v1/"):
            self._answer(404, [("content-type", "text/plain")], b"not the vendor's API path")
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        conn = http.client.HTTPConnection(host.target.hostname, host.target.port, timeout=30)
        try:
            conn.request(self.command, self.path[len(host.prefix) :], body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            kept = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP]
            self._answer(response.status, kept, data)
        finally:
            conn.close()

    def _answer(self, status: int, headers: list, data: bytes) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def vendor_host(target: str, prefix: str):
    host = _VendorHost(target, prefix)
    thread = threading.Thread(target=host.serve_forever, daemon=True)
    thread.start()
    try:
        yield host
    finally:
        host.shutdown()
        host.server_close()
        thread.join(5)


@pytest.mark.parametrize("key", KEYS)
def test_a_preset_channel_passes_claude_code_calls_through_and_bills_cache_reads(
    key, vendor, tenant, start_gateway
):
    preset = PRESETS[key]
    prefix = preset.api_path.removesuffix("/v1")
    with vendor_host(vendor.base_url, prefix) as host:
        inp, read, write, out = COST
        node = services.node_create(
            actor=tenant.actor,
            name=f"claude-code-{key}",
            preset=key,
            base_url=host.url,  # the vendor's host, here on loopback
            credentials=[{"secret": KEY_A}],
            models=[
                {
                    "public_name": "sim-claude",
                    "upstream_name": "claude-sim",
                    "context_window": 200_000,
                    "cost_currency": "USD",
                    "cost_input_per_mtok": inp,
                    "cost_cache_read_per_mtok": read,
                    "cost_cache_write_per_mtok": write,
                    "cost_output_per_mtok": out,
                }
            ],
        )
        assert (node.kind, node.api_path, node.health_check) == (
            "anthropic",
            preset.api_path,
            "traffic",
        )
        gw = start_gateway()
        sent: list = []
        # The SDK's own HTTP client, with a hook that keeps each request as it was sent.
        http_client = anthropic.DefaultHttpxClient(
            event_hooks={"request": [lambda request: sent.append(request)]}
        )
        client = anthropic.Anthropic(
            api_key=tenant.raw, base_url=gw.url, max_retries=0, http_client=http_client
        )
        ask = {
            "model": "sim-claude",
            "max_tokens": 64,
            "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            "metadata": {"user_id": "user_7f3a_account__session_1"},
            "messages": [{"role": "user", "content": "List the files you would read first."}],
        }
        first = client.messages.create(**ask)
        second = client.messages.create(**ask)
        with client.messages.stream(**ask) as stream:
            third = stream.get_final_message()
        http_client.close()

        # Each call reached the vendor's Messages path under the preset's API path.
        assert host.paths == [f"{preset.api_path}/messages"] * 3
        # Natively: the body the vendor got is the one the SDK sent, but the model id.
        bodies = [base64.b64decode(c["body_base64"]) for c in captured(vendor)]
        assert len(bodies) == len(sent) == 3
        for got, body in zip(bodies, sent, strict=True):
            assert got == body.content.replace(b'"sim-claude"', b'"claude-sim"', 1)
        headers = captured(vendor)[-1]["headers"]
        assert headers["x-api-key"] == "…" + KEY_A[-4:]  # the channel's key, not the caller's
        # The client's own anthropic-version wins (DeepSeek ignores it anyway).
        assert headers["anthropic-version"] == sent[-1].headers["anthropic-version"]

        assert first.usage.cache_creation_input_tokens > 0
        assert not first.usage.cache_read_input_tokens
        assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
        assert third.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens

        events = gw.emitter.wait_for(3)
        ingest_events(events)
        records = [CallRecord.objects.get(request_id=e["request_id"]) for e in events]
    for record, answer in zip(records, (first, second, third), strict=True):
        usage = answer.usage
        counts = (
            record.input_tokens,
            record.cache_read_tokens,
            record.cache_write_tokens,
            record.output_tokens,
        )
        assert counts == (
            usage.input_tokens,
            usage.cache_read_input_tokens or 0,
            usage.cache_creation_input_tokens or 0,
            usage.output_tokens,
        )
        assert record.node_id == node.pk and record.protocol == "anthropic"
        price = price_for("sim-claude", "USD", record.organization_id, record.started_at)
        assert record.cost == rate(TokenCounts(*counts), price, PPM) > 0
        assert record.upstream_cost == rate(TokenCounts(*counts), CostPrice("USD", *COST), PPM)
    assert records[1].cache_read_tokens > 0 and records[2].cache_read_tokens > 0
    assert records[1].cost < records[0].cost  # cache reads billed at the cache-read price
