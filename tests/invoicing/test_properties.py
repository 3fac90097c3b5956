"""Property: for any month of calls written through the real ingest path —
any token counts, models, organization discount, a negotiated price and a
price change mid-month — the invoice's usage lines sum to the calls' costs
to the micro-unit, per price row and in total, with token sums as quantities."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from invoicing.models import LineKind
from invoicing.money import allocate
from invoicing.services import invoice_draft
from tests.factories import OrganizationFactory
from tests.usage.factories import event
from usage.ingest import ingest_events
from usage.ingest.directory import invalidate_directory
from usage.models import CallRecord, CatalogModel, Price
from usage.prices import invalidate_price_book

pytestmark = pytest.mark.django_db
MONTH = datetime(2025, 5, 1, tzinfo=UTC)
tokens = st.integers(min_value=0, max_value=3_000_000)
call = st.tuples(
    st.integers(min_value=0, max_value=31 * 86400 - 1),
    st.sampled_from(["sim-chat-small", "sim-chat-large", "sim-embed"]),
    tokens,
    tokens,
    tokens,
    tokens,
)


@given(
    total=st.integers(min_value=-(10**12), max_value=10**12),
    weights=st.lists(st.integers(min_value=0, max_value=10**15), min_size=1, max_size=6),
)
def test_allocate_always_sums_exactly_and_stays_proportional(total, weights):
    if sum(weights) == 0:
        total = 0
    parts = allocate(total, weights)
    assert sum(parts) == total
    w = sum(weights) or 1
    for part, weight in zip(parts, weights, strict=True):
        assert abs(part - total * weight / w) < 1 + 1e-6 * abs(total)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    calls=st.lists(call, min_size=1, max_size=60),
    discount=st.integers(min_value=0, max_value=1_000_000),
    negotiated=st.booleans(),
    price_change_day=st.one_of(st.none(), st.integers(min_value=1, max_value=28)),
)
def test_usage_lines_equal_the_calls_to_the_micro_unit(
    catalog, calls, discount, negotiated, price_change_day
):
    with transaction.atomic():
        invalidate_directory()
        invalidate_price_book()
        org = OrganizationFactory(discount_rate=Decimal(discount) / 1_000_000)
        from accounts.models import ApiKey

        key = ApiKey.objects.create(
            organization=org, name="k", public_id=f"p{org.pk:012d}", secret_hash="0" * 64
        )
        large = CatalogModel.objects.get(name="sim-chat-large")
        if negotiated:
            Price.objects.create(
                model=large,
                organization=org,
                input_per_mtok=333_333,
                cache_read_per_mtok=33_333,
                cache_write_per_mtok=416_667,
                output_per_mtok=1_777_777,
                effective_from=datetime(2024, 1, 1, tzinfo=UTC),
            )
        if price_change_day:
            Price.objects.create(
                model=CatalogModel.objects.get(name="sim-chat-small"),
                input_per_mtok=123_457,
                cache_read_per_mtok=12_345,
                cache_write_per_mtok=154_321,
                output_per_mtok=493_827,
                effective_from=MONTH + timedelta(days=price_change_day),
            )
        events = [
            event(
                key,
                started_at=MONTH + timedelta(seconds=s),
                model=model,
                input_tokens=i,
                cache_read_tokens=cr,
                cache_write_tokens=cw,
                output_tokens=o,
            )
            for s, model, i, cr, cw, o in calls
        ]
        for start in range(0, len(events), 17):  # several ingest batches
            ingest_events(events[start : start + 17])
        invoice = invoice_draft(organization_id=org.pk, period="2025-05")
        records = list(CallRecord.objects.filter(organization_id=org.pk))
        lines = list(invoice.lines.filter(kind=LineKind.USAGE))
        assert sum(ln.amount for ln in lines) == sum(c.cost for c in records)
        assert invoice.calls == len(records) == len(calls)
        by_price: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        for c in records:
            by_price[c.price_id][0] += c.cost
            by_price[c.price_id][1] += c.input_tokens + c.output_tokens
        for line in lines:
            by_price[line.price_id][0] -= line.amount
            if line.token_class in ("input", "output"):
                by_price[line.price_id][1] -= line.quantity
        assert all(v == [0, 0] for v in by_price.values())
        transaction.set_rollback(True)
    invalidate_directory()
    invalidate_price_book()
