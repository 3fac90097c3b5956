"""Three gateway processes on the Redis limits store share one vendor key
whose pool allows 60 requests a minute: together they send the vendor at most
60, and every other call is a 429 naming when to retry (issue 37: each
process used to allow the whole limit, three times what the vendor takes)."""

from __future__ import annotations

import asyncio
import urllib.request

import openai
from django.conf import settings

from tests.gateway_bridge.harness import METRICS_TOKEN, gateway_process
from tests.gateway_bridge.vendor_fixtures import admin, channel
from tests.services import require

CALLS_PER_PROCESS = 40  # 120 in all: each process alone would allow 60


def metric(url: str, name: str) -> float:
    req = urllib.request.Request(  # noqa: S310 - a local test gateway
        f"{url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
    )
    with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
    raise AssertionError(f"{name} is not on /metrics")


def received(sim) -> int:
    """Every request the vendor received (its capture keeps the last few only)."""
    return admin(sim, "/admin/requests")["total"]


async def calls(url: str, raw: str, n: int) -> list:
    client = openai.AsyncOpenAI(api_key=raw, base_url=f"{url}/v1", max_retries=0, timeout=30)
    try:

        async def one():
            try:
                return await client.chat.completions.create(
                    model="sim-gpt", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
                )
            except openai.APIStatusError as exc:
                return exc

        return await asyncio.gather(*(one() for _ in range(n)))
    finally:
        await client.close()


def test_three_processes_send_one_vendor_key_at_most_its_requests_per_minute(
    vendor, tenant, tmp_path, gateway_settings
):
    require(bool(settings.REDIS_URL), "REDIS_URL is not set: the shared limits need Redis")
    node = channel(vendor.base_url, "openai", "sim-gpt", "gpt-sim")
    node.credentials.update(rpm_limit=60)
    env = {"GATEWAY_LIMITS_STORE": "redis"}
    with (
        gateway_process(tmp_path / "a", **env) as a,
        gateway_process(tmp_path / "b", **env) as b,
        gateway_process(tmp_path / "c", **env) as c,
    ):

        async def together():
            rounds = [calls(gw.url, tenant.raw, CALLS_PER_PROCESS) for gw in (a, b, c)]
            return [r for batch in await asyncio.gather(*rounds) for r in batch]

        answers = asyncio.run(together())
        waits = [metric(gw.url, "gateway_credential_limit_waits_total") for gw in (a, b, c)]
    served = [r for r in answers if not isinstance(r, Exception)]
    refused = [r for r in answers if isinstance(r, openai.APIStatusError)]
    assert received(vendor) == len(served) == 60
    assert len(refused) == 3 * CALLS_PER_PROCESS - 60
    assert {r.status_code for r in refused} == {429}
    assert {r.body["code"] for r in refused} == {"upstream_key_limit"}
    assert all(1 <= int(r.response.headers["retry-after"]) <= 60 for r in refused)
    assert sum(waits) >= 1  # each process asks Redis once, then rests the key itself
