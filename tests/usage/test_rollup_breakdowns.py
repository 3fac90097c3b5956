"""The rollup sums behind the analytics breakdowns: where time goes (queue,
gateway overhead, upstream), response-cache hits apart from prefix-cache
hits, and refusals by cause. Each equals its brute-force sum over the call
records at every grain, on whichever database the suite runs (SQLite, or
PostgreSQL with its COPY path, its staging path and the generic writer),
after a re-rate, and after retention has deleted the calls."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from tests.usage.factories import PriceFactory, event, expected_rollups, stored_rollups
from usage import ingest
from usage.ingest import generic, ingest_events, pg
from usage.ingest.aggregate import SUM_COLUMNS, sum_calls
from usage.ingest.rows import CALL_COLUMNS, CallRow
from usage.models import CallRecord, CatalogModel, Rollup
from usage.rerate import rerate
from usage.retention import prune_calls

pytestmark = pytest.mark.django_db
T0 = datetime(2025, 6, 2, 9, 5, tzinfo=UTC)
NEW_SUMS = (
    "queue_sum_us",
    "overhead_sum_us",
    "upstream_sum_us",
    "response_cache_calls",
    "rate_limited_calls",
    "cap_refused_calls",
    "queue_refused_calls",
)
# (status, error_type, the refusal sum it counts in or None)
REFUSALS = (
    (429, "rpm_limit_exceeded", "rate_limited_calls"),
    (429, "tpm_limit_exceeded", "rate_limited_calls"),
    (429, "key_daily_cap_exceeded", "cap_refused_calls"),
    (429, "key_monthly_cap_exceeded", "cap_refused_calls"),
    (429, "key_lifetime_cap_exceeded", "cap_refused_calls"),
    (429, "sub_account_daily_cap_exceeded", "cap_refused_calls"),
    (429, "sub_account_monthly_cap_exceeded", "cap_refused_calls"),
    (429, "sub_account_weekly_cap_exceeded", "cap_refused_calls"),  # a cap by its suffix alone
    (402, "prepaid_balance_exhausted", "cap_refused_calls"),
    (503, "queue_timeout", "queue_refused_calls"),
    (429, "queue_full", "queue_refused_calls"),
    (429, "upstream_rate_limited", None),  # a node's 429: none of the gateway's causes
    (429, "rate_limited", None),
    (500, "upstream_error", None),
    (400, "cap_exceeded_soon", None),  # the suffix must be the suffix
)


def mixed(keys, start=T0) -> list[dict]:
    """Calls over two hours and several keys (one with a sub-account), nodes
    and models: every refusal code, every cache status, and queue, overhead
    and upstream times present, zero and missing."""
    out = []
    times = (None, 0, 1, 2_500, 40_000)
    for i in range(60):
        k = keys[i % len(keys)]
        when = start + timedelta(minutes=i * 2)  # crosses the hour
        kw = {
            "model": ("sim-chat-small", "sim-chat-large")[i % 2],
            "node_id": (1, 2, None)[i % 3],
            "stream": i % 4 == 0,
            "queue_us": times[i % 5],
            "overhead_us": times[(i + 1) % 5],
            "upstream_us": times[(i + 2) % 5],
            "ttft_us": None if i % 7 == 0 else 90_000 + i,
            "cache_status": ("miss", "prefix_hit", "response_hit")[i % 3],
        }
        if i < len(REFUSALS):
            status, code, _ = REFUSALS[i]
            kw.update(status_code=status, error_type=code, output_tokens=0, ttft_us=None)
        out.append(event(k, started_at=when, duration_us=200_000 + 1_000 * i, **kw))
    return out


@pytest.fixture
def keys(key, team_key):
    return [key, team_key]


def assert_consistent(org_id: int) -> dict:
    want = expected_rollups(org_id)
    assert stored_rollups(org_id) == want
    return want


def test_every_new_sum_equals_the_call_records_at_every_grain(catalog, org, keys):
    ingest_events(mixed(keys))
    want = assert_consistent(org.pk)
    assert {k[0] for k in want} == {"org", "sub", "key", "model", "node", "traffic", "full"}
    # The data exercises every new sum, so a sum left at 0 could not pass.
    org_rows = [v for k, v in want.items() if k[0] == "org"]
    for column in NEW_SUMS:
        assert any(row[column] for row in org_rows), column
    # And the refusals land where the gateway's codes say.
    total = {c: sum(r[c] for r in org_rows) for c in NEW_SUMS}
    for column in ("rate_limited_calls", "cap_refused_calls", "queue_refused_calls"):
        assert total[column] == sum(1 for *_, c in REFUSALS if c == column)
    assert total["response_cache_calls"] == 20


@pytest.mark.parametrize(
    ("code", "column"), [(code, column) for _s, code, column in REFUSALS] + [("", None)]
)
def test_each_error_code_counts_in_at_most_one_cause(code, column):
    values = dict.fromkeys(CALL_COLUMNS)  # a call row, by name; unset fields are None
    values.update(organization_id=1, api_key_id=1, model="m", stream=False, status_code=429)
    values.update(error_type=code, latency_us=5, cache_status="miss", cost=0, priced=True)
    values.update(input_tokens=0, cache_read_tokens=0, cache_write_tokens=0, output_tokens=0)
    values.update(reasoning_tokens=0, currency="USD", upstream_cost=0, upstream_currency="")
    row = CallRow(**values)
    (sums,) = sum_calls([row], [0]).values()
    got = {c: sums[SUM_COLUMNS.index(c)] for c in NEW_SUMS}
    assert got == {c: int(c == column) for c in NEW_SUMS}


def test_redelivered_and_overlapping_batches_add_each_call_once(catalog, org, keys):
    events = mixed(keys)
    ingest_events(events[:40])
    # Overlapping: on PostgreSQL the COPY fails and the batch goes through staging.
    ingest_events(events[20:])
    ingest_events(events)
    assert CallRecord.objects.filter(organization_id=org.pk).count() == len(events)
    assert_consistent(org.pk)


def test_the_generic_writer_keeps_them_too(catalog, org, keys):
    """SQLite's writer; on PostgreSQL the same writer, run on purpose."""
    events = mixed(keys)
    ingest._ingest(events[:30], generic.STORE)
    ingest._ingest(events[15:], generic.STORE)
    assert_consistent(org.pk)
    if connection.vendor == "postgresql":
        # The PostgreSQL writer adds to the rows the generic one created.
        ingest._ingest(mixed(keys, start=T0 + timedelta(minutes=1)), pg.STORE)
        assert_consistent(org.pk)


def test_a_rerate_changes_cost_and_leaves_the_new_sums_right(org, keys):
    model = CatalogModel.objects.create(name="fixme", display_name="Fix me")
    price = PriceFactory(model=model, input_per_mtok=1_000_000, output_per_mtok=0)
    events = [{**e, "model": "fixme"} for e in mixed(keys)]
    ingest_events(events)
    before = {k: {c: v[c] for c in NEW_SUMS} for k, v in stored_rollups(org.pk).items()}
    price.input_per_mtok = 3_000_000
    price.save()
    summary = rerate(start=T0 - timedelta(hours=1), end=T0 + timedelta(hours=3), reason="fix")
    assert summary.calls_rerated == len(events)
    want = assert_consistent(org.pk)
    assert {k: {c: v[c] for c in NEW_SUMS} for k, v in want.items()} == before


def test_retention_deletes_calls_and_the_new_sums_stay(settings, catalog, org, keys):
    old = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(days=90)
    ingest_events(mixed(keys, start=old))
    want = assert_consistent(org.pk)
    settings.USAGE_RETENTION_DAYS = 30
    assert prune_calls() == 60
    assert not CallRecord.objects.filter(organization_id=org.pk).exists()
    assert stored_rollups(org.pk) == want
    assert Rollup.objects.filter(organization_id=org.pk, grain="org").count() == 2
