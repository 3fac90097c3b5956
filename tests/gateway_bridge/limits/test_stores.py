"""Admit / settle / release semantics, the overspend property, expiry of
dangling reservations, rate windows and their headers, on both stores."""

from __future__ import annotations

import asyncio
import random

import pytest

from gateway_bridge.limits import BucketsMissing, CapBucket, DuplicateReservation, RateRule
from gateway_bridge.protocols.base import PAYMENT_REQUIRED, RATE_LIMIT, GatewayError

DAY = CapBucket("key_daily_cap_exceeded", "cap:k:1:d:2026-12-02", 1_000_000, 3600, currency="USD")
SUB = CapBucket("sub_account_monthly_cap_exceeded", "cap:s:2:m:2026-12", 5_000_000, 3600)
LIFE = CapBucket("key_lifetime_cap_exceeded", "cap:k:1:life", 10_000_000, None)
BAL = CapBucket("prepaid_balance_exhausted", "bal:o:3", 0, None, currency="USD")


async def seeded(store, *caps, used=0):
    for cap in caps:
        await store.seed(cap.key, used, cap.ttl_seconds)


def headers(err_or_adm) -> dict[str, str]:
    return dict(err_or_adm.headers)


async def refused(coro) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        await coro
    return info.value


# --- caps: admit, settle, release -------------------------------------------------


def test_admit_reserves_on_every_bucket_and_settle_charges_the_actual_cost(run):
    async def scenario(store):
        await seeded(store, DAY, SUB, LIFE)
        await store.admit("r1", 300_000, [DAY, SUB, LIFE], [], 0, hold_seconds=60)
        assert [await store.snapshot(c.key) for c in (DAY, SUB, LIFE)] == [(0, 300_000)] * 3
        await store.settle("r1", 120_000, 0)
        assert [await store.snapshot(c.key) for c in (DAY, SUB, LIFE)] == [(120_000, 0)] * 3

    run(scenario)


def test_peek_tells_a_bucket_not_there_from_an_empty_one(run):
    async def scenario(store):
        assert await store.peek(DAY.key) is None  # never seeded: the database must say
        await seeded(store, DAY)
        assert await store.peek(DAY.key) == (0, 0)
        await store.admit("r1", 300_000, [DAY], [], 0, hold_seconds=60)
        await store.settle("r1", 120_000, 0)
        assert await store.peek(DAY.key) == (120_000, 0) == await store.snapshot(DAY.key)

    run(scenario)


def test_a_refused_call_changes_nothing_and_names_the_cap(run):
    async def scenario(store):
        await seeded(store, DAY, SUB)
        await store.seed(DAY.key, 900_000, 3600)  # already there: keeps 0
        await store.admit("a", 900_000, [SUB, DAY], [], 0, hold_seconds=60)
        rule = RateRule("key", "rl:k:1", 100, None)
        err = await refused(store.admit("b", 200_000, [SUB, DAY], [rule], 10, hold_seconds=60))
        assert (err.kind, err.code, err.status) == (RATE_LIMIT, "key_daily_cap_exceeded", 429)
        assert "daily spend cap of 1.00 USD" in err.message
        assert await store.snapshot(SUB.key) == (0, 900_000)
        assert await store.snapshot(DAY.key) == (0, 900_000)
        # The refused call was not counted by the rate rule either.
        ok = await store.admit("c", 100_000, [SUB, DAY], [rule], 10, hold_seconds=60)
        assert headers(ok)["x-ratelimit-remaining-requests"] == "99"

    run(scenario)


def test_settling_more_than_reserved_is_charged_and_blocks_the_next_call(run):
    async def scenario(store):
        await seeded(store, DAY)
        await store.admit("a", 400_000, [DAY], [], 0, hold_seconds=60)
        await store.settle("a", 1_100_000, 0)  # it happened: the cap is overrun by it
        assert await store.snapshot(DAY.key) == (1_100_000, 0)
        err = await refused(store.admit("b", 0, [DAY], [], 0, hold_seconds=60))
        assert err.code == "key_daily_cap_exceeded"

    run(scenario)


def test_release_frees_the_reservation_without_spending(run):
    async def scenario(store):
        await seeded(store, DAY)
        await store.admit("a", 1_000_000, [DAY], [], 0, hold_seconds=60)
        err = await refused(store.admit("b", 1, [DAY], [], 0, hold_seconds=60))
        assert headers(err)["retry-after"] == "1"  # only a call in flight is in the way
        await store.release("a")
        assert await store.snapshot(DAY.key) == (0, 0)
        await store.admit("b", 1_000_000, [DAY], [], 0, hold_seconds=60)

    run(scenario)


def test_settle_and_release_are_idempotent_and_ignore_unknown_ids(run):
    async def scenario(store):
        await seeded(store, DAY)
        await store.admit("a", 500_000, [DAY], [], 0, hold_seconds=60)
        await store.settle("a", 200_000, 0)
        await store.settle("a", 200_000, 0)
        await store.release("a")
        await store.settle("nope", 999, 0)
        await store.release("nope")
        assert await store.snapshot(DAY.key) == (200_000, 0)

    run(scenario)


def test_a_live_reservation_id_cannot_be_admitted_twice(run):
    async def scenario(store):
        await seeded(store, DAY)
        await store.admit("a", 1, [DAY], [], 0, hold_seconds=60)
        with pytest.raises(DuplicateReservation):
            await store.admit("a", 1, [DAY], [], 0, hold_seconds=60)
        assert await store.snapshot(DAY.key) == (0, 1)

    run(scenario)


def test_an_unseeded_bucket_is_reported_not_created(run):
    async def scenario(store):
        await seeded(store, DAY)
        with pytest.raises(BucketsMissing) as info:
            await store.admit("a", 10, [DAY, SUB, LIFE], [], 0, hold_seconds=60)
        assert info.value.keys == [SUB.key, LIFE.key]
        assert await store.snapshot(DAY.key) == (0, 0)

    run(scenario)


def test_seed_only_when_absent(run):
    async def scenario(store):
        assert await store.seed(LIFE.key, 7_000_000, None) is True
        assert await store.seed(LIFE.key, 0, None) is False
        assert await store.snapshot(LIFE.key) == (7_000_000, 0)
        err = await refused(store.admit("a", 3_000_001, [LIFE], [], 0, hold_seconds=60))
        assert err.code == "key_lifetime_cap_exceeded"
        assert "retry-after" not in headers(err)  # a lifetime cap never resets

    run(scenario)


def test_prepaid_balance_refuses_with_402_and_a_top_up_lets_calls_through(run):
    async def scenario(store):
        await store.seed(BAL.key, -250_000, None)  # balance 0.25
        await store.admit("a", 200_000, [BAL], [], 0, hold_seconds=60)
        err = await refused(store.admit("b", 100_000, [BAL], [], 0, hold_seconds=60))
        assert (err.kind, err.code, err.status) == (
            PAYMENT_REQUIRED,
            "prepaid_balance_exhausted",
            402,
        )
        assert "balance 0.25 USD" in err.message
        await store.credit(BAL.key, 1_000_000)
        await store.admit("b", 100_000, [BAL], [], 0, hold_seconds=60)
        await store.settle("a", 150_000, 0)
        assert await store.snapshot(BAL.key) == (-1_100_000, 100_000)

    run(scenario)


def test_credit_on_an_absent_bucket_leaves_it_to_the_seed(run):
    async def scenario(store):
        await store.credit(BAL.key, 500)
        assert await store.seed(BAL.key, -500, None) is True
        assert await store.snapshot(BAL.key) == (-500, 0)

    run(scenario)


# --- overspend --------------------------------------------------------------------


def test_200_concurrent_calls_never_spend_past_the_cap(run):
    worst = 20_000
    cap = CapBucket("key_daily_cap_exceeded", "cap:k:9:d:2026-12-02", 50 * worst + 7_000, 3600)
    rng = random.Random(5)
    codes = set()

    async def call(store, i):
        try:
            await store.admit(f"c{i}", worst, [cap], [], 0, hold_seconds=60)
        except GatewayError as err:
            codes.add(err.code)
            return None
        await asyncio.sleep(rng.random() / 100)
        actual = rng.randint(0, worst)
        await store.settle(f"c{i}", actual, 0)
        return actual

    async def scenario(store):
        await store.seed(cap.key, 0, 3600)
        return await asyncio.gather(*(call(store, i) for i in range(200))), await store.snapshot(
            cap.key
        )

    results, (used, reserved) = run(scenario)
    settled = [r for r in results if r is not None]
    assert len(settled) >= 50  # at least the worst cases that fit
    assert sum(settled) == used <= cap.limit
    assert reserved == 0
    assert codes == {"key_daily_cap_exceeded"}


# --- dangling reservations --------------------------------------------------------


def test_a_reservation_never_settled_is_dropped_after_its_hold(run, clock):
    async def scenario(store):
        await seeded(store, DAY)
        await store.admit("crashed", 1_000_000, [DAY], [], 0, hold_seconds=30)
        clock.advance(29)
        await refused(store.admit("b", 1, [DAY], [], 0, hold_seconds=30))
        clock.advance(1)
        assert await store.snapshot(DAY.key) == (0, 0)
        await store.admit("b", 1_000_000, [DAY], [], 0, hold_seconds=30)
        # The crashed call's late settle still charges what it cost, once.
        await store.settle("crashed", 300, 0)
        await store.settle("crashed", 300, 0)
        assert await store.snapshot(DAY.key) == (300, 1_000_000)

    run(scenario, clock=clock)


def test_dangling_reservations_expire_on_the_real_clock(run):
    async def scenario(store):
        await seeded(store, DAY)
        await store.admit("crashed", 1_000_000, [DAY], [], 0, hold_seconds=0.05)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while await store.snapshot(DAY.key) != (0, 0):
            assert loop.time() < deadline, "the hold never expired"
            await asyncio.sleep(0.01)
        await store.admit("b", 1_000_000, [DAY], [], 0, hold_seconds=60)

    run(scenario)


# --- rate limits ------------------------------------------------------------------


def test_rpm_window_refuses_then_frees_exactly_a_window_later(run, clock):
    rule = RateRule("key", "rl:k:1", 3, None)

    async def scenario(store):
        clock.t = 1_800_000_000.25  # a quarter into a 1 s slot
        first = await store.admit("a", 0, [], [rule], 0, hold_seconds=5)
        assert headers(first) == {
            "x-ratelimit-limit-requests": "3",
            "x-ratelimit-remaining-requests": "2",
            "x-ratelimit-reset-requests": "1m0.75s",
        }
        clock.advance(10)
        await store.admit("b", 0, [], [rule], 0, hold_seconds=5)
        await store.release("b")  # released calls still count: the request was made
        await store.admit("c", 0, [], [rule], 0, hold_seconds=5)
        err = await refused(store.admit("d", 0, [], [rule], 0, hold_seconds=5))
        assert err.code == "rpm_limit_exceeded" and err.status == 429
        assert "key: 3 requests per minute" in err.message
        h = headers(err)
        assert h["x-ratelimit-remaining-requests"] == "0"
        assert h["retry-after"] == "51"  # the first call's slot leaves 61 s after it began
        clock.advance(50.7)
        await refused(store.admit("d", 0, [], [rule], 0, hold_seconds=5))
        clock.advance(0.1)
        ok = await store.admit("d", 0, [], [rule], 0, hold_seconds=5)
        assert headers(ok)["x-ratelimit-remaining-requests"] == "0"

    run(scenario, clock=clock)


def test_no_60_seconds_ever_hold_more_than_the_limit(run, clock):
    rule = RateRule("key", "rl:k:7", 5, None)
    rng = random.Random(11)

    async def scenario(store):
        times = []
        for i in range(400):
            clock.advance(rng.random() * 2)
            try:
                await store.admit(f"r{i}", 0, [], [rule], 0, hold_seconds=5)
                times.append(clock.t)
            except GatewayError:
                pass
        return times

    times = run(scenario, clock=clock)
    assert len(times) > 20
    for i, t in enumerate(times):
        assert sum(1 for u in times[i:] if u - t < 60) <= 5


def test_tpm_counts_the_budget_and_settle_corrects_it(run, clock):
    rule = RateRule("sub_account", "rl:s:2", None, 1000)

    async def scenario(store):
        await store.admit("a", 0, [], [rule], 800, hold_seconds=5)
        err = await refused(store.admit("b", 0, [], [rule], 300, hold_seconds=5))
        assert err.code == "tpm_limit_exceeded"
        assert "sub-account: 1000 tokens per minute" in err.message
        assert headers(err)["x-ratelimit-remaining-tokens"] == "200"
        await store.settle("a", 0, 150)  # the call used fewer tokens than its budget
        ok = await store.admit("b", 0, [], [rule], 300, hold_seconds=5)
        assert headers(ok)["x-ratelimit-remaining-tokens"] == "550"
        await store.settle("b", 0, 900)  # more than the budget: counted too
        err = await refused(store.admit("c", 0, [], [rule], 1, hold_seconds=5))
        assert headers(err)["x-ratelimit-remaining-tokens"] == "0"

    run(scenario, clock=clock)


def test_a_request_bigger_than_the_whole_tpm_limit_is_told_it_never_passes(run):
    rule = RateRule("org", "rl:o:3", 100, 4000)

    async def scenario(store):
        err = await refused(store.admit("a", 0, [], [rule], 4001, hold_seconds=5))
        assert err.code == "tpm_limit_exceeded" and err.status == 429
        assert "can never pass" in err.message and "organization's" in err.message
        assert "retry-after" not in headers(err)
        await store.admit("a", 0, [], [rule], 4000, hold_seconds=5)

    run(scenario)


def test_headers_show_the_most_constraining_rule(run, clock):
    key = RateRule("key", "rl:k:1", 100, 50_000)
    org = RateRule("org", "rl:o:3", 1000, 10_000)

    async def scenario(store):
        adm = await store.admit("a", 0, [], [key, org], 4000, hold_seconds=5)
        h = headers(adm)
        assert (h["x-ratelimit-limit-requests"], h["x-ratelimit-remaining-requests"]) == (
            "100",
            "99",
        )
        assert (h["x-ratelimit-limit-tokens"], h["x-ratelimit-remaining-tokens"]) == (
            "10000",
            "6000",
        )
        clock.advance(30)
        err = await refused(store.admit("b", 0, [], [key, org], 7000, hold_seconds=5))
        assert "organization: 10000 tokens" in err.message
        h = headers(err)
        assert h["x-ratelimit-limit-tokens"] == "10000"
        assert h["x-ratelimit-reset-tokens"] == "31s"
        assert h["retry-after"] == "31"

    run(scenario, clock=clock)


def test_a_short_window_frees_on_the_real_clock(run):
    rule = RateRule("key", "rl:k:5", 2, None)

    async def scenario(store):
        await store.admit("a", 0, [], [rule], 0, hold_seconds=5)
        await store.admit("b", 0, [], [rule], 0, hold_seconds=5)
        await refused(store.admit("c", 0, [], [rule], 0, hold_seconds=5))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while True:
            try:
                return await store.admit("c", 0, [], [rule], 0, hold_seconds=5)
            except GatewayError as err:
                codes.add(err.code)
            assert loop.time() < deadline, "the window never moved"
            await asyncio.sleep(0.02)

    codes = set()
    adm = run(scenario, window_seconds=0.2, slots=10)
    assert codes <= {"rpm_limit_exceeded"}
    assert dict(adm.headers)["x-ratelimit-remaining-requests"] in {"0", "1"}
