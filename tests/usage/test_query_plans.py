"""On PostgreSQL the log pages read the (organization_id, …, started_at)
indexes, never a sequential scan of usage_call. Run with DATABASE_URL set."""

from __future__ import annotations

import random
import re
from datetime import timedelta

import pytest
from django.db import connection

from accounts.models import Role
from tests.services import require
from tests.usage.log_fixtures import T0, call, save, tenant
from usage import logs
from usage.logs import CallFilters, Cursor

pytestmark = pytest.mark.django_db
MODELS = ["gpt-test", "llama-70b", "mistral-small", "qwen-32b", "embed-small"]


@pytest.fixture
def populated():
    require(connection.vendor == "postgresql", "query plans are checked on PostgreSQL")
    rng = random.Random(7)
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
    return qs.explain()


def assert_uses(text: str, index: str) -> None:
    assert "Seq Scan on usage_call" not in text, text
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
    assert "Seq Scan on usage_call" not in text, text
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
    assert "Seq Scan on usage_call" not in text, text
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
