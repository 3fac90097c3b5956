"""The admission component alone, on the in-process limits store: it keeps a
key's plan once, reserves and counts each call, refuses the call over a rate
with the client's headers, and a settled call frees its reservation."""

from __future__ import annotations

import asyncio

import pytest

from console.kernel import ipnet
from gateway_bridge.limits import Limits, MemoryLimitStore
from gateway_bridge.pipeline.admit import Admission
from gateway_bridge.pipeline.call import Call
from gateway_bridge.protocols.base import GatewayError
from gateway_bridge.state_db import KeyEntry
from gateway_bridge.usage_mapping import TokenUsage
from tests.gateway_bridge.limits.test_plan import auth


def call_for(entry: KeyEntry, n: int) -> Call:
    call = Call("openai", "chat.completions")
    call.request_id = f"req-{n}"
    call.entry = entry
    return call


@pytest.fixture
def admission():
    # Nothing spent before (the gateway's seeder reads the database).
    limits = Limits(MemoryLimitStore(), seeder=lambda auth, now, keys: dict.fromkeys(keys, 0))
    return Admission(object(), limits, hold_seconds=60, default_max_tokens=256)


def test_a_key_over_its_rate_is_refused_and_its_plan_is_built_once(admission):
    key = auth(key_caps=(None, None, None), sub_account_caps=(None, None, None), key_rpm=2,
               org_tpm=None)  # fmt: skip
    entry = KeyEntry(key, ipnet.Networks(), 0, None, 0.0)

    async def scenario():
        first = call_for(entry, 1)
        assert await admission.reserve(first, 0, 10)
        assert await admission.reserve(call_for(entry, 2), 0, 10)
        with pytest.raises(GatewayError) as refused:
            await admission.reserve(call_for(entry, 3), 0, 10)
        return first, refused.value

    first, refused = asyncio.run(scenario())
    assert refused.status == 429 and refused.code == "rpm_limit_exceeded"
    assert dict(first.headers_out)[b"x-ratelimit-limit-requests"] == b"2"
    assert len(admission.plans) == 1  # one plan, reused by every call of the key


def test_a_settled_call_frees_what_it_reserved_beyond_its_cost(admission):
    key = auth(key_caps=(1_000, None, None), sub_account_caps=(None, None, None), key_rpm=None,
               org_tpm=None)  # fmt: skip
    entry = KeyEntry(key, ipnet.Networks(), 0, None, 0.0)

    async def scenario():
        big = call_for(entry, 1)
        assert await admission.reserve(big, 900, 10)
        with pytest.raises(GatewayError):  # 900 held: no room for another 200
            await admission.reserve(call_for(entry, 2), 200, 10)
        big.usage = TokenUsage(input=1, output=1)
        await admission.settle(big, None)  # no price: it cost nothing
        return await admission.reserve(call_for(entry, 3), 200, 10)

    assert asyncio.run(scenario()) is True
