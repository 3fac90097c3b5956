"""CSV export: what a spreadsheet gets (BOM, header, ISO timestamps with
offset, exact money, no formulas) and that it streams in bounded chunks."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.http import StreamingHttpResponse
from django.test.utils import CaptureQueriesContext

from accounts.models import ApiKey, Role, SubAccount
from tests.usage.log_fixtures import T0, call, mixed_calls, save, tenant
from usage import call_csv

pytestmark = pytest.mark.django_db
EXPORT = "/usage/calls/export.csv"


@pytest.fixture
def a():
    t = tenant("Acme", "acme", timezone="Europe/Berlin")
    mixed_calls(t)
    return t


def export(client, t, params=None, role=Role.OWNER, url=EXPORT):
    client.force_login(t.members[role].user)
    response = client.get(url, params or {})
    assert response.status_code == 200
    return response


def rows(response) -> list[dict]:
    raw = b"".join(response.streaming_content)
    assert raw.startswith(b"\xef\xbb\xbf")  # UTF-8 byte-order mark for Excel
    return list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"))))


def test_header_bom_and_one_row_per_call(client, a):
    response = export(client, a)
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    raw = b"".join(response.streaming_content).decode("utf-8-sig")
    assert raw.splitlines()[0] == ",".join(call_csv.CSV_COLUMNS)
    got = rows(export(client, a))
    assert [r["request_id"] for r in got] == [c.request_id for c in reversed(a.calls)]


def test_values_are_typed_for_a_spreadsheet(client, a):
    got = {r["request_id"]: r for r in rows(export(client, a))}
    first = got[a.calls[0].request_id]
    # ISO 8601 with the organization's offset (Berlin is UTC+1 in November).
    assert first["started_at"] == "2026-11-20T13:00:00.000000+01:00"
    assert datetime.fromisoformat(first["started_at"]) == T0
    assert first["finished_at"] == "2026-11-20T13:00:00.300000+01:00"
    assert first["key_prefix"] == a.key.prefix and first["key_name"] == a.key.name
    assert first["sub_account"] == a.sub.name and first["node"] == "gpu-a"
    assert first["input_tokens"] == "1200" and first["output_tokens"] == "400"
    assert first["reasoning_tokens"] == "40" and first["status_code"] == "200"
    assert first["cost"] == "0.001000" and first["currency"] == "USD"
    assert first["latency_ms"] == "300.000" and first["ttft_ms"] == "95.500"
    assert first["stream"] == "false" and first["priced"] == "true"
    assert first["client_ip"] == "198.51.100.7"


def test_money_sums_exactly_to_the_micro_unit_total(client, a):
    costs = [1, 999_999, 1_000_001, 123_456_789, 5, 0, 2_500_000]
    save([call(a.org, a.key, started_at=T0 + timedelta(hours=1, seconds=i), cost=c)
          for i, c in enumerate(costs)])  # fmt: skip
    got = rows(export(client, a))
    total = sum(Decimal(r["cost"]) for r in got)
    expected_micro = sum(costs) + sum(c.cost for c in a.calls)
    assert total * 1_000_000 == expected_micro
    assert {r["cost"] for r in got} >= {"0.000001", "0.999999", "123.456789", "2.500000"}


def test_cells_that_would_be_formulas_are_defused(client, a):
    ApiKey.objects.filter(pk=a.key.pk).update(name='=HYPERLINK("http://evil")')
    SubAccount.objects.filter(pk=a.sub.pk).update(name="@SUM(A1)")
    save([call(a.org, a.key, started_at=T0 + timedelta(hours=1), model="+cmd|' /C calc'!A0",
               error_type="-2+3", endpoint="\t=1")])  # fmt: skip
    row = rows(export(client, a))[0]
    assert row["key_name"] == '\'=HYPERLINK("http://evil")'
    assert row["sub_account"] == "'@SUM(A1)"
    assert row["model"] == "'+cmd|' /C calc'!A0"
    assert row["error_type"] == "'-2+3"
    assert row["endpoint"] == "'\t=1"
    # Plain values are left alone.
    assert rows(export(client, a))[1]["model"] == "gpt-test"


def test_export_follows_the_filters_and_the_role(client, a):
    got = rows(export(client, a, {"status": "errors", "model": "llama-70b"}))
    assert {r["request_id"] for r in got} == {
        c.request_id for c in a.calls if c.status_code >= 400 and c.model == "llama-70b"
    }
    mine = rows(export(client, a, role=Role.DEVELOPER))
    assert {r["request_id"] for r in mine} == {
        c.request_id for c in a.calls if c.api_key_id == a.dev_key.pk
    }


def test_filename_names_the_org_and_the_range(client, a):
    response = export(client, a, {"from": "2026-11-20T00:00Z", "to": "2026-11-21T00:00Z"})
    assert response["Content-Disposition"] == (
        'attachment; filename="calls-acme-20261120T0000Z-20261121T0000Z.csv"'
    )
    response = export(client, a)
    assert response["Content-Disposition"].startswith('attachment; filename="calls-acme-start-')


def test_invalid_filters_show_the_form_instead_of_a_file(client, a):
    client.force_login(a.members[Role.OWNER].user)
    response = client.get(EXPORT, {"from": "2026-11-21T00:00Z", "to": "2026-11-20T00:00Z"})
    assert response.status_code == 200
    assert "text/html" in response["Content-Type"]
    assert "after its start" in response.content.decode()


def test_a_large_export_is_read_in_chunks_as_it_is_sent(client, a, monkeypatch):
    # Given 1,000 calls and an export read 100 rows per query
    save([call(a.org, a.org_key, started_at=T0 - timedelta(seconds=i)) for i in range(1000)])
    real = call_csv.iter_calls
    monkeypatch.setattr(call_csv, "iter_calls", lambda **kw: real(**{**kw, "chunk_size": 100}))
    response = export(client, a)
    stream = iter(response.streaming_content)
    with CaptureQueriesContext(connection) as queries:
        # When only the header and the first 150 rows have been sent
        head = [next(stream) for _ in range(151)]
        fetched_early = [q for q in queries if '"usage_call"' in q["sql"]]
        rest = list(stream)
        fetched_all = [q for q in queries if '"usage_call"' in q["sql"]]
    # Then only two chunks had been read; the rest came while streaming
    assert len(fetched_early) == 2
    assert len(fetched_all) == 11  # 1,008 rows: ten full chunks and one of 8
    assert all("LIMIT 100" in q["sql"] for q in fetched_all)
    assert len(head) + len(rest) == 1 + 1000 + len(a.calls)


def test_the_api_export_is_the_same_file(client, a):
    console = b"".join(export(client, a, {"model": "gpt-test"}).streaming_content)
    api = b"".join(
        export(client, a, {"model": "gpt-test"}, url="/api/v1/calls/export.csv").streaming_content
    )
    assert console == api
