"""Rating: exact integer costs, round half up, discounts, overrides, and the
property that money is never lost between calls, rollups and the price book."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.usage.factories import event
from usage.ingest import ingest_events
from usage.models import CallRecord, Rollup
from usage.prices import get_price_book
from usage.rating import PPM, PriceRow, TokenCounts, discount_ppm_for, rate

WHEN = datetime(2024, 1, 1, tzinfo=UTC)


def price(inp=0, cr=0, cw=0, out=0, org=None) -> PriceRow:
    return PriceRow(1, "m", "USD", org, inp, cr, cw, out, WHEN)


def test_cost_is_the_sum_of_each_class_times_its_price():
    p = price(inp=2_500_000, cr=250_000, cw=3_125_000, out=10_000_000)
    # 1000 x 2.5 + 4000 x 0.25 + 200 x 3.125 + 500 x 10 (micro-units per token)
    assert rate(TokenCounts(1000, 4000, 200, 500), p, PPM) == 2500 + 1000 + 625 + 5000
    assert rate((1000, 4000, 200, 500), p, PPM) == 9125


@pytest.mark.parametrize(
    ("tokens", "per_mtok", "expected"),
    [
        (1, 499_999, 0),  # 0.499999 rounds down
        (1, 500_000, 1),  # exactly half rounds up
        (1, 500_001, 1),
        (3, 500_000, 2),  # 1.5 -> 2
        (5, 100_000, 1),  # 0.5 -> 1
        (1, 1_499_999, 1),
        (1, 1_500_000, 2),
        (0, 9_999_999, 0),
    ],
)
def test_rounding_is_half_up_per_call(tokens, per_mtok, expected):
    assert rate((tokens, 0, 0, 0), price(inp=per_mtok), PPM) == expected


def test_discount_applies_before_the_single_rounding():
    p = price(inp=1_000_000)
    # 3 tokens x 1 micro x 0.5 = 1.5 -> 2 (rounding once, after the discount)
    assert rate((3, 0, 0, 0), p, 500_000) == 2
    # 1 token x 0.833333 = 0.833333 -> 1; 0.4 -> 0
    assert rate((1, 0, 0, 0), p, 833_333) == 1
    assert rate((1, 0, 0, 0), p, 400_000) == 0


def test_discount_rate_converts_exactly_to_ppm():
    assert discount_ppm_for(Decimal("0.850000")) == 850_000
    assert discount_ppm_for(Decimal("1")) == PPM
    assert discount_ppm_for("0.123456") == 123_456
    with pytest.raises(ValueError, match="six decimals"):
        discount_ppm_for("0.1234567")


def test_negative_inputs_are_refused():
    with pytest.raises(ValueError, match="negative"):
        rate((-1, 0, 0, 0), price(inp=1), PPM)


@st.composite
def call_events(draw, keys):
    n = draw(st.integers(min_value=1, max_value=12))
    out = []
    for _ in range(n):
        output = draw(st.integers(0, 50_000))
        started = WHEN + timedelta(
            days=400,
            seconds=draw(st.integers(0, 3 * 86_400)),
            microseconds=draw(st.integers(0, 999_999)),
        )
        out.append(
            event(
                draw(st.sampled_from(keys)),
                started_at=started,
                model=draw(st.sampled_from(["sim-chat-small", "gpt-4o", "sim-embed", "no-price"])),
                node_id=draw(st.sampled_from([None, 1, 2])),
                status_code=draw(st.sampled_from([200, 200, 429, 500, 400])),
                input_tokens=draw(st.integers(0, 200_000)),
                cache_read_tokens=draw(st.integers(0, 100_000)),
                cache_write_tokens=draw(st.integers(0, 10_000)),
                output_tokens=output,
                reasoning_tokens=draw(st.integers(0, output)),
                ttft_us=draw(st.one_of(st.none(), st.integers(0, 5_000_000))),
            )
        )
    return out


@pytest.mark.django_db
def test_call_costs_rollups_and_price_book_always_agree(catalog, org, key, team_key, make_key):
    """For any events: the sum of call costs equals the rollup cost at every
    grain, and equals a recomputation from the price book."""
    org.discount_rate = Decimal("0.873125")
    org.save()
    keys = [key, team_key]

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(batch=call_events(keys))
    def check(batch):
        ingest_events(batch)
        calls = CallRecord.objects.filter(organization_id=org.pk)
        total = sum(c.cost for c in calls)
        book = get_price_book(max_age=0)
        recomputed = 0
        for c in calls:
            p = book.price_for(c.model, "USD", org.pk, c.started_at)
            if p is None:
                assert not c.priced and c.cost == 0
                continue
            tokens = (c.input_tokens, c.cache_read_tokens, c.cache_write_tokens, c.output_tokens)
            recomputed += rate(tokens, p, 873_125)
        assert total == recomputed
        for grain in ("org", "sub", "key", "model", "node", "full"):
            rows = Rollup.objects.filter(organization_id=org.pk, grain=grain)
            assert sum(r.cost for r in rows) == total, grain
            assert sum(r.calls for r in rows) == calls.count(), grain

    check()
