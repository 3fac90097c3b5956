"""Spend caps under concurrency, in one gateway and across two gateway
processes sharing Redis, and revocation across processes."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime

import openai
import pytest
from django.conf import settings

from accounts.keys import authenticated_view
from accounts.services import api_key_revoke
from gateway_bridge.limits import RedisLimitStore, plan
from gateway_bridge.protocols.openai import parse_chat
from tests.gateway_bridge.harness import gateway_process
from tests.inference_node.server_helpers import metric_value
from tests.services import require
from usage.ingest import ingest_events
from usage.models import CallRecord
from usage.prices import PriceBook
from usage.rating import rate

BODY = {
    "model": "sim-chat-small",
    "messages": [{"role": "user", "content": "Write a short poem about the sea."}],
    "max_tokens": 40,
}


def worst_case(org) -> int:
    """The reservation of one BODY call: prompt estimate + max_tokens at list price."""
    req = parse_chat(json.loads(json.dumps(BODY)))
    price = PriceBook.load().lookup("sim-chat-small", org.currency, org.id, time.time())
    prompt = req.prompt_tokens_estimate
    tokens = (
        (0, 0, prompt, 40)
        if price.cache_write_per_mtok > price.input_per_mtok
        else (prompt, 0, 0, 40)
    )
    return rate(tokens, price, 1_000_000)


def node_requests(sim) -> float:
    return metric_value(sim.metrics(), "vllm:request_success_total", finished_reason="length") + (
        metric_value(sim.metrics(), "vllm:request_success_total", finished_reason="stop")
    )


async def burst(url: str, raw: str, n: int) -> list:
    c = openai.AsyncOpenAI(api_key=raw, base_url=f"{url}/v1", max_retries=0, timeout=60)
    try:

        async def one():
            try:
                return await c.chat.completions.create(**BODY)
            except openai.APIStatusError as exc:
                return exc

        return await asyncio.gather(*(one() for _ in range(n)))
    finally:
        await c.close()


def test_concurrent_calls_never_overrun_a_cap(gw, tenant, sim):
    cap = 50 * worst_case(tenant.org)
    key, raw = tenant.new_key(spend_cap_daily=cap)
    before = node_requests(sim)
    results = asyncio.run(burst(gw.url, raw, 200))
    ok = [r for r in results if not isinstance(r, Exception)]
    refused = [r for r in results if isinstance(r, Exception)]
    # Worst cases of about 50 calls fit; calls that settle below their worst
    # case leave room for a few more, but the charged total never passes the cap.
    assert 40 <= len(ok) < 100
    assert {r.status_code for r in refused} == {429}
    assert {r.body["code"] for r in refused} == {"key_daily_cap_exceeded"}
    # Refused calls never reached the node.
    assert node_requests(sim) - before == len(ok)
    ingest_events(gw.emitter.wait_for(200))
    charged = sum(CallRecord.objects.filter(api_key_id=key.id).values_list("cost", flat=True))
    assert 0 < charged <= cap
    assert CallRecord.objects.filter(api_key_id=key.id, status_code=429).count() == len(refused)


def test_two_gateway_processes_share_one_cap(tenant, sim, tmp_path, gateway_settings):
    require(bool(settings.REDIS_URL), "REDIS_URL is not set: the shared cap needs Redis")
    cap = 50 * worst_case(tenant.org)
    key, raw = tenant.new_key(spend_cap_daily=cap)
    before = node_requests(sim)
    env = {"GATEWAY_LIMITS_STORE": "redis"}
    with (
        gateway_process(tmp_path / "a", **env) as a,
        gateway_process(tmp_path / "b", **env) as b,
    ):

        async def both():
            # Warm both processes (key cache, upstream connections) without
            # spending, then fire in rounds that hit both at once, so neither
            # can drain the cap alone before the other has started.
            for url in (a.url, b.url):
                c = openai.AsyncOpenAI(api_key=raw, base_url=f"{url}/v1", max_retries=0)
                await c.models.list()
                await c.close()
            first, second = [], []
            for _ in range(10):
                x, y = await asyncio.gather(burst(a.url, raw, 10), burst(b.url, raw, 10))
                first += x
                second += y
            return first, second

        first, second = asyncio.run(both())
    ok_a = [r for r in first if not isinstance(r, Exception)]
    ok_b = [r for r in second if not isinstance(r, Exception)]
    assert ok_a and ok_b  # both processes served calls
    assert 40 <= len(ok_a) + len(ok_b) < 100
    assert node_requests(sim) - before == len(ok_a) + len(ok_b)

    caps, _ = plan(authenticated_view(key), datetime.now(UTC))
    today = next(c for c in caps if c.code == "key_daily_cap_exceeded")

    async def used():
        store = RedisLimitStore.from_url(settings.REDIS_URL)
        try:
            return await store.snapshot(today.key)
        finally:
            await store.close()

    spent, reserved = asyncio.run(used())
    assert reserved == 0
    assert 0 < spent <= cap


def test_revocation_reaches_another_process_within_a_second(tenant, tmp_path, gateway_settings):
    require(bool(settings.REDIS_URL), "REDIS_URL is not set: cross-process revocation uses Redis")
    key, raw = tenant.new_key()

    def call(url):
        req = urllib.request.Request(  # noqa: S310
            f"{url}/v1/chat/completions",
            data=json.dumps({**BODY, "max_tokens": 2}).encode(),
            headers={"Authorization": f"Bearer {raw}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code

    with gateway_process(tmp_path / "b", GATEWAY_KEY_CACHE_SECONDS="300") as b:
        assert call(b.url) == 200  # the key is now cached in process b for 5 minutes
        revoked_at = time.monotonic()
        api_key_revoke(actor=tenant.actor, key_id=key.id)
        while call(b.url) != 401:
            assert time.monotonic() - revoked_at < 1.0, "the revocation took over a second"
            time.sleep(0.02)
        assert time.monotonic() - revoked_at < 1.0


def test_prepaid_balance_refuses_with_402(gw, tenant):
    tenant.org.billing_mode = "prepaid"
    tenant.org.save(update_fields=["billing_mode"])
    _, raw = tenant.new_key()
    c = openai.OpenAI(api_key=raw, base_url=f"{gw.url}/v1", max_retries=0)
    with pytest.raises(openai.APIStatusError) as refused:
        c.chat.completions.create(**BODY)
    assert refused.value.status_code == 402
    assert refused.value.body["code"] == "prepaid_balance_exhausted"


def test_prepaid_balance_reservation_and_ledger_agree_after_a_burst(gw, tenant, sim):
    """A prepaid organization with room for about thirty calls' worst cases gets a
    hundred at once: the charged total stays within the balance, refusals never
    reach a node, and afterwards the ledger, the gateway's balance bucket and the
    call records say the same thing, to the micro-unit, with nothing reserved."""
    from gateway_bridge.limits import balance_key
    from invoicing.models import LedgerKind
    from invoicing.selectors import prepaid_balance
    from invoicing.services import ledger_entry_create

    tenant.org.billing_mode = "prepaid"
    tenant.org.save(update_fields=["billing_mode"])
    grant = 30 * worst_case(tenant.org)
    ledger_entry_create(
        organization_id=tenant.org.id,
        kind=LedgerKind.GRANT,
        amount=grant,
        reference="burst-test",
        reason="opening balance",
    )
    key, raw = tenant.new_key()
    before = node_requests(sim)
    results = asyncio.run(burst(gw.url, raw, 100))
    ok = [r for r in results if not isinstance(r, Exception)]
    refused = [r for r in results if isinstance(r, Exception)]
    assert 20 <= len(ok) < 60
    assert {(r.status_code, r.body["code"]) for r in refused} == {
        (402, "prepaid_balance_exhausted")
    }
    assert node_requests(sim) - before == len(ok)

    ingest_events(gw.emitter.wait_for(100))  # the worker's job: records, rollups, ledger debits
    charged = sum(CallRecord.objects.filter(api_key_id=key.id).values_list("cost", flat=True))
    balance = prepaid_balance(tenant.org.id)
    assert 0 < charged <= grant
    assert balance == grant - charged

    spent, reserved = gw.call(lambda: gw.gateway.limits.store.snapshot(balance_key(tenant.org.id)))
    assert reserved == 0  # nothing left dangling
    assert spent == -balance  # the bucket holds -(balance), settled calls included
