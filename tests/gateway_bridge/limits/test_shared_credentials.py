"""A vendor credential's limits and rests, counted in Redis for every gateway
process together (``gateway_bridge.keyshare``): the window, the leases, the
rests, and a Redis that fails never holding a call up."""

from __future__ import annotations

import asyncio

import pytest

from gateway_bridge.keyshare import SharedCredentials
from gateway_bridge.limits.resp import RespClient
from inference_node.facade import RoutableCredential
from tests.gateway_bridge.limits.conftest import flush_redis, redis_url, require_redis


@pytest.fixture
def shared_run():
    """``shared_run(scenario)``: ``await scenario(make)`` with ``make()`` giving
    a ``SharedCredentials`` on its own connection (a process of its own)."""
    require_redis()
    flush_redis()

    def go(scenario):
        async def main():
            made: list[RespClient] = []

            def make() -> SharedCredentials:
                client = RespClient.from_url(redis_url(), timeout=1.0)
                made.append(client)
                return SharedCredentials(client, lease_seconds=30)

            try:
                return await scenario(make)
            finally:
                for client in made:
                    await client.aclose()

        return asyncio.run(main())

    yield go
    flush_redis()


def cred(**limits) -> RoutableCredential:
    return RoutableCredential(credential_id=7, secret="sk-v", **limits)


def test_three_processes_together_take_one_keys_requests_per_minute(shared_run):
    key = cred(rpm_limit=5)

    async def scenario(make):
        processes = [make(), make(), make()]
        waits = []
        for i in range(9):
            waits.append(await processes[i % 3].acquire(key, 10, f"req-{i}"))
        return waits

    waits = shared_run(scenario)
    assert waits[:5] == [0.0] * 5
    assert all(0 < w <= 60 for w in waits[5:])  # until the first of the minute ages out


def test_tokens_per_minute_count_each_tries_estimate(shared_run):
    key = cred(tpm_limit=1000)

    async def scenario(make):
        a, b = make(), make()
        return [
            await a.acquire(key, 600, "r1"),
            await b.acquire(key, 500, "r2"),  # 1,100 > 1,000
            await b.acquire(key, 400, "r3"),
        ]

    first, over, fits = shared_run(scenario)
    assert first == 0.0 and fits == 0.0
    assert 0 < over <= 60


def test_concurrency_leases_are_freed_when_a_try_ends(shared_run):
    key = cred(max_concurrency=2)

    async def scenario(make):
        a, b = make(), make()
        out = [await a.acquire(key, 1, "x"), await b.acquire(key, 1, "y")]
        out.append(await a.acquire(key, 1, "z"))  # both slots held
        await b.release(key, "y")
        out.append(await a.acquire(key, 1, "z"))
        return out

    assert shared_run(scenario) == [0.0, 0.0, 0.25, 0.0]


def test_a_rest_one_process_saw_holds_in_every_process(shared_run):
    key = cred(rpm_limit=100)
    other = RoutableCredential(credential_id=8, secret="sk-w", rpm_limit=100)

    async def scenario(make):
        a, b = make(), make()
        await a.rest(key, 3.0)  # the vendor answered a with 429, retry-after 3
        await a.rest(key, 1.0)  # a shorter rest never cuts a longer one
        return await b.acquire(key, 1, "r"), await b.acquire(other, 1, "r")

    waited, untouched = shared_run(scenario)
    assert 2.0 < waited <= 3.0
    assert untouched == 0.0


class Failing:
    """A client whose every script raises ``error``."""

    def __init__(self, error: Exception):
        self.error = error

    def register_script(self, lua):
        async def script(**kwargs):
            raise self.error

        return script


def test_a_nodes_own_token_never_reaches_redis():
    shared = SharedCredentials(Failing(AssertionError("asked Redis")), lease_seconds=1)
    token = RoutableCredential(credential_id=None, secret="node-token", rpm_limit=1)
    assert asyncio.run(shared.acquire(token, 1, "r")) == 0.0


def test_a_failing_redis_never_holds_a_call_up(caplog):
    shared = SharedCredentials(Failing(ConnectionError("redis is down")), lease_seconds=1)
    key = cred(rpm_limit=1)

    async def scenario():
        return [await shared.acquire(key, 1, f"r{i}") for i in range(3)]

    assert asyncio.run(scenario()) == [0.0, 0.0, 0.0]
    assert shared.failures == 3
    warnings = [r for r in caplog.records if "shared credential limits failed" in r.getMessage()]
    assert len(warnings) == 1  # once a minute, not once per call
