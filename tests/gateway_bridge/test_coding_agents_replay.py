"""What the real coding agents sent reaches a native channel byte for byte.

Each request body Claude Code, Codex and Gemini CLI sent in their runs
(``test_coding_agents.py``: the committed recordings of ``tests/agents/recorded``
and, when the agents ran in this checkout, this run's in
``test-artifacts/agent-recordings``) is sent again, with its path and headers,
to the gateway over the demo's vendor channels. The vendor simulator must
receive exactly those bytes, apart from the model id (a Gemini body names no
model: not even that), and answer 200. Whatever the vendor's API accepts, the
gateway passes."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.agents.harness import FRESH, RECORDED
from tests.gateway_bridge.vendor_fixtures import captured, demo_channels, post

# The demo channels' vendor model ids (tests.gateway_bridge.vendor_fixtures.demo_channels).
UPSTREAM = {"sim-claude": "claude-sim", "sim-gpt": "gpt-sim", "sim-gemini": "gemini-sim"}
COMMITTED = sorted(RECORDED.glob("*.json"))


@pytest.fixture
def vendor_gw(vendor, tenant, start_gateway):
    demo_channels(vendor.base_url)
    return start_gateway()


def replay(path: Path, vendor, gateway, key: str) -> None:
    recording = json.loads(path.read_text(encoding="utf-8"))
    sent = base64.b64decode(recording["body_base64"])
    headers = {**recording["headers"], "authorization": f"Bearer {key}"}
    status, answer = post(gateway.url, recording["path"], sent, headers)
    assert status == 200, f"{path.name}: {status} {answer[:500]!r}"
    [received] = [r for r in captured(vendor) if r["method"] == "POST"][-1:]
    got = base64.b64decode(received["body_base64"])
    model = recording["model"]
    if "model" in json.loads(sent):
        # the one top-level model id rewritten in place, every other byte as sent
        public = json.dumps(model).encode()
        upstream = json.dumps(UPSTREAM[model]).encode()
        assert json.loads(got)["model"] == UPSTREAM[model]
        assert got.replace(upstream, public, 1) == sent, path.name
    else:
        assert got == sent, path.name
        assert f"/models/{UPSTREAM[model]}:" in received["path"]
    for name in ("anthropic-beta", "anthropic-version"):
        if name in recording["headers"]:
            assert received["headers"][name] == recording["headers"][name]


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_a_recorded_agent_request_reaches_the_native_channel_as_sent(
    path, vendor, vendor_gw, tenant
):
    replay(path, vendor, vendor_gw, tenant.raw)


def test_this_runs_agent_requests_reach_the_native_channel_as_sent(vendor, vendor_gw, tenant):
    fresh = sorted(FRESH.glob("*.json"))
    if not fresh:
        pytest.skip("the agents did not run in this checkout (test_coding_agents.py)")
    for path in fresh:
        replay(path, vendor, vendor_gw, tenant.raw)
