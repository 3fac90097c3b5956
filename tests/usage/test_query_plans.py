"""On PostgreSQL the log pages read the (organization_id, …, started_at)
indexes, never a sequential scan of usage_call; the table is partitioned by
month, so a plan reads those indexes in each partition, and only in the
partitions of the asked time range. Run with DATABASE_URL set."""

from __future__ import annotations

import random
import re
from datetime import timedelta

import pytest
from django.db import connection

from accounts.models import Role
from tests.services import require
from tests.usage.log_fixtures import T0, call, save, tenant
from usage import logs, partitions
from usage.logs import CallFilters, Cursor

pytestmark = pytest.mark.django_db
MODELS = ["gpt-test", "llama-70b", "mistral-small", "qwen-32b", "embed-small"]


@pytest.fixture
def populated():
    require(connection.vendor == "postgresql", "query plans are checked on PostgreSQL")
    rng = random.Random(7)
    # The months of the data have their partitions (the migration made the
    # current month's on; older history would sit in the default partition).
    partitions.ensure_partitions(first=T0 - timedelta(days=40), now=T0, months_ahead=1)
    t = tenant("Acme", "acme")
    keys = [t.key, t.org_key, t.dev_key]
    # The org under test: 5,000 calls over 30 days, about 3 % errors, in
    # time order as ingest writes them.
    save([
        call(
            t.org,
            rng.choice(keys),
            started_at=T0 - timedelta(seconds=30 * 24 * 3600 * i // 5_000),
            model=rng.choice(MODELS),
            status_code=rng.choices([200, 429, 500], weights=[97, 2, 1])[0],
            latency_us=rng.randint(20_000, 4_000_000),
        )
        for i in range(5_000)
    ])  # fmt: skip
    # The rest of the platform: 60,000 calls of 20 other organizations, so
    # that one organization is a small part of the table, as in production.
    with connection.cursor() as cur:
        cur.execute(BACKGROUND_SQL, [t.org.pk + 1000, T0])
        cur.execute("ANALYZE usage_call")
    return t


BACKGROUND_SQL = """
INSERT INTO usage_call (
    request_id, organization_id, api_key_id, model, protocol, endpoint, stream,
    status_code, error_type, input_tokens, cache_read_tokens, cache_write_tokens,
    output_tokens, reasoning_tokens, started_at, finished_at, latency_us, priority,
    cache_status, currency, cost, priced, ingested_at
)
SELECT 'bg-' || g, %s + g %% 20, 900000 + g %% 50, 'gpt-test', 'openai', '/v1/chat/completions',
       false, CASE WHEN g %% 40 = 0 THEN 500 ELSE 200 END, '', 100, 0, 0, 50, 0,
       %s - g * interval '40 seconds', now(), 300000, 0, 'miss', 'USD', 10, true, now()
FROM generate_series(1, 60000) AS g
"""


def plan(qs) -> str:
    """The plan, each partition's index spelled as the parent index it is
    part of (``usage_call_p202611_organization_id_started_at_idx`` reads as
    ``usage_call_org_time``), so a test names the index the model declares."""
    text = qs.explain()
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname, p.relname FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent "
            "WHERE c.relkind = 'i' AND p.relname LIKE 'usage\\_call\\_%%'"
        )
        for child, parent in cur.fetchall():
            text = re.sub(rf"\b{child}\b", parent, text)
    return text


def scanned(text: str) -> set[str]:
    """The call-table partitions the plan reads."""
    return set(re.findall(r" on (usage_call_(?:p\d{6}|default))\b", text))


def assert_no_seq_scan_of_rows(text: str) -> None:
    # The planner may read an empty partition (a month ahead, the default)
    # straight, at no cost; every partition holding rows goes by an index.
    empty = {p.name for p in partitions.partitions(count_rows=True) if p.rows == 0}
    straight = set(re.findall(r"Seq Scan on (\w+)", text))
    assert straight <= empty, text


def assert_reads_range(text: str, index: str) -> None:
    """Each partition read through ``index`` (straight, or through a bitmap of
    it for a short range), the time range in its index condition."""
    assert_no_seq_scan_of_rows(text)
    assert re.search(
        rf"(Index Scan using|Index Scan Backward using|Bitmap Index Scan on) {index}\b", text
    ), text
    conditions = re.findall(r"Index Cond: (.*)", text)
    assert conditions and all("started_at >=" in c for c in conditions), text


def assert_uses(text: str, index: str) -> None:
    assert_no_seq_scan_of_rows(text)
    assert f"using {index} on usage_call" in text.lower(), text


def page(t, role=Role.OWNER, **filters):
    return logs.page_query(actor=t.actor(role), filters=CallFilters(**filters), limit=50)


def test_first_page_reads_the_org_time_index(populated):
    assert_uses(plan(page(populated)), "usage_call_org_time")


def test_key_filtered_page_reads_the_org_key_time_index(populated):
    assert_uses(plan(page(populated, api_key_id=populated.key.pk)), "usage_call_org_key_time")


def test_model_filtered_page_reads_the_org_model_time_index(populated):
    assert_uses(plan(page(populated, model="llama-70b")), "usage_call_org_model_time")


@pytest.mark.parametrize("status", ["errors", "5xx", "429"])
def test_status_filtered_page_reads_the_org_time_index(populated, status):
    # Rare statuses may be fetched through a bitmap of the same index and
    # sorted; either way it is the org's time range, never the whole table.
    text = plan(page(populated, status=status))
    assert_no_seq_scan_of_rows(text)
    assert re.search(r"(Index Scan using|Bitmap Index Scan on) usage_call_org_time\b", text), text


def test_an_older_page_keeps_to_the_index(populated):
    first = logs.call_page(actor=populated.actor(), filters=CallFilters(), limit=50)
    qs = logs.page_query(
        actor=populated.actor(),
        filters=CallFilters(),
        limit=50,
        before=Cursor.decode(first.older),
    )
    assert_uses(plan(qs), "usage_call_org_time")


def test_model_and_errors_page_reads_the_org_model_time_index(populated):
    text = plan(page(populated, model="qwen-32b", status="errors"))
    assert_no_seq_scan_of_rows(text)
    assert re.search(
        r"(Index Scan using|Bitmap Index Scan on) usage_call_org_model_time\b", text
    ), text


def test_a_developers_page_reads_the_org_key_time_index(populated):
    assert_uses(plan(page(populated, role=Role.DEVELOPER)), "usage_call_org_key_time")


@pytest.mark.parametrize("filters", [{}, {"model": "llama-70b"}], ids=["all", "model"])
def test_oldest_first_reads_the_same_indexes_backwards(populated, filters):
    # The time column's other order is the same index walked the other way,
    # never a sort of the table (costs and latencies have no index: no sort).
    qs = logs.page_query(
        actor=populated.actor(),
        filters=CallFilters(**filters),
        limit=50,
        sort=logs.OLDEST_FIRST,
    )
    text = plan(qs)
    index = "usage_call_org_model_time" if filters else "usage_call_org_time"
    assert_uses(text, index)
    assert "Index Scan Backward" in text or "Sort" not in text, text


# --- partition pruning -----------------------------------------------------------

NOV_1 = T0.replace(day=1, hour=0)
NOV_15 = T0.replace(day=15, hour=0)
OCT_25 = T0.replace(month=10, day=25, hour=0)


@pytest.mark.parametrize(
    ("filters", "index"),
    [
        ({}, "usage_call_org_time"),
        ({"model": "llama-70b"}, "usage_call_org_model_time"),
        ({"api_key_id": "key"}, "usage_call_org_key_time"),
    ],
    ids=["all", "model", "key"],
)
def test_a_time_range_reads_only_its_months_partition(populated, filters, index):
    if filters.get("api_key_id") == "key":
        filters = {"api_key_id": populated.key.pk}
    text = plan(page(populated, start=NOV_1, end=NOV_15, **filters))
    assert_reads_range(text, index)
    assert scanned(text) == {"usage_call_p202611"}, text


def test_a_range_over_two_months_reads_both_partitions_by_index(populated):
    text = plan(page(populated, start=OCT_25, end=NOV_15))
    assert_reads_range(text, "usage_call_org_time")
    assert scanned(text) == {"usage_call_p202610", "usage_call_p202611"}, text


def test_an_older_page_skips_the_partitions_after_its_cursor(populated):
    # The keyset bound (started_at <= the cursor's) prunes the later months,
    # the current one included, though the page asked no range.
    first = logs.call_page(actor=populated.actor(), filters=CallFilters(), limit=50)
    qs = logs.page_query(
        actor=populated.actor(), filters=CallFilters(), limit=50, before=Cursor.decode(first.older)
    )
    text = plan(qs)
    assert_uses(text, "usage_call_org_time")
    later = {p.name for p in partitions.partitions() if p.start and p.start > T0}
    assert later and not scanned(text) & later, text


def test_an_export_chunk_reads_only_the_exported_months(populated):
    # The CSV/JSON export walks call_list in keyset chunks: the same query.
    qs = logs.call_list(actor=populated.actor(), filters=CallFilters(start=NOV_1, end=NOV_15))[
        :5000
    ]
    text = plan(qs)
    assert_reads_range(text, "usage_call_org_time")
    assert scanned(text) == {"usage_call_p202611"}, text


def test_the_newer_page_of_a_range_reads_only_its_partition(populated):
    after = Cursor(NOV_1, "req-0")
    qs = logs.page_query(
        actor=populated.actor(),
        filters=CallFilters(start=NOV_1, end=NOV_15),
        limit=50,
        after=after,
    )
    text = plan(qs)
    assert_reads_range(text, "usage_call_org_time")
    assert scanned(text) == {"usage_call_p202611"}, text
