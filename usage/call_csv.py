"""The call-log export as CSV: one row per call with its names resolved,
text cells guarded against spreadsheet formulas (``csv_text``, which other
exports use too), durations in exact milliseconds and costs in full
micro-unit precision, so a column sums to the billed total exactly."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from datetime import UTC, datetime, tzinfo
from typing import Any

from django.http import HttpRequest
from django.utils.translation import pgettext_lazy

from accounts.facade import Actor
from console.kernel.csv_header import header_line
from console.kernel.money import micro_to_decimal
from usage.logs import CallFilters, iter_calls
from usage.models import CallRecord

CSV_COLUMNS = (
    "request_id", "started_at", "finished_at", "key_prefix", "key_name", "sub_account",
    "model", "node", "protocol", "endpoint", "stream", "status_code", "error_type",
    "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens",
    "reasoning_tokens", "cost", "currency", "priced", "ttft_ms", "latency_ms",
    "upstream_ms", "overhead_ms", "queue_ms", "cache_status", "client_ip", "end_user", "tags",
)  # fmt: skip
# The header row for people reading the console in another language
# (``console.kernel.csv_header``); scripts and the API keep the keys above.
CSV_LABELS = {
    "request_id": pgettext_lazy("CSV header", "Request ID"),
    "started_at": pgettext_lazy("CSV header", "Started at"),
    "finished_at": pgettext_lazy("CSV header", "Finished at"),
    "key_prefix": pgettext_lazy("CSV header", "API key prefix"),
    "key_name": pgettext_lazy("CSV header", "API key name"),
    "sub_account": pgettext_lazy("CSV header", "Sub-account"),
    "model": pgettext_lazy("CSV header", "Model"),
    "node": pgettext_lazy("CSV header", "Node"),
    "protocol": pgettext_lazy("CSV header", "Protocol"),
    "endpoint": pgettext_lazy("CSV header", "Endpoint"),
    "stream": pgettext_lazy("CSV header", "Streamed"),
    "status_code": pgettext_lazy("CSV header", "HTTP status"),
    "error_type": pgettext_lazy("CSV header", "Error type"),
    "input_tokens": pgettext_lazy("CSV header", "Input tokens"),
    "cache_read_tokens": pgettext_lazy("CSV header", "Cache read tokens"),
    "cache_write_tokens": pgettext_lazy("CSV header", "Cache write tokens"),
    "output_tokens": pgettext_lazy("CSV header", "Output tokens"),
    "reasoning_tokens": pgettext_lazy("CSV header", "Reasoning tokens"),
    "cost": pgettext_lazy("CSV header", "Cost"),
    "currency": pgettext_lazy("CSV header", "Currency"),
    "priced": pgettext_lazy("CSV header", "Priced"),
    "ttft_ms": pgettext_lazy("CSV header", "Time to first token (ms)"),
    "latency_ms": pgettext_lazy("CSV header", "Latency (ms)"),
    "upstream_ms": pgettext_lazy("CSV header", "Upstream (ms)"),
    "overhead_ms": pgettext_lazy("CSV header", "Gateway overhead (ms)"),
    "queue_ms": pgettext_lazy("CSV header", "Queue (ms)"),
    "cache_status": pgettext_lazy("CSV header", "Cache status"),
    "client_ip": pgettext_lazy("CSV header", "Client IP"),
    "end_user": pgettext_lazy("CSV header", "End user"),
    "tags": pgettext_lazy("CSV header", "Tags"),
}
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_text(value: str | None) -> str:
    """A text cell a spreadsheet will not run as a formula."""
    value = value or ""
    return "'" + value if value.startswith(_FORMULA_STARTS) else value


def _ms(us: int | None) -> str:
    # Exact: microseconds have three decimals of milliseconds.
    if us is None:
        return ""
    sign = "-" if us < 0 else ""
    whole, frac = divmod(abs(us), 1000)
    return f"{sign}{whole}.{frac:03d}"


def _cost(micro: int) -> str:
    # Full micro-unit precision, so the column sums to the billed total exactly.
    return f"{micro_to_decimal(micro):.6f}"


def csv_row(call: CallRecord, tzinfo: tzinfo) -> list[str | int]:
    return [
        csv_text(call.request_id),
        call.started_at.astimezone(tzinfo).isoformat(timespec="microseconds"),
        call.finished_at.astimezone(tzinfo).isoformat(timespec="microseconds"),
        call.key_prefix,
        csv_text(call.key_name),
        csv_text(call.sub_account_name),
        csv_text(call.model),
        csv_text(call.node_name),
        csv_text(call.protocol),
        csv_text(call.endpoint),
        "true" if call.stream else "false",
        call.status_code,
        csv_text(call.error_type),
        call.input_tokens,
        call.cache_read_tokens,
        call.cache_write_tokens,
        call.output_tokens,
        call.reasoning_tokens,
        _cost(call.cost),
        call.currency,
        "true" if call.priced else "false",
        _ms(call.ttft_us),
        _ms(call.latency_us),
        _ms(call.upstream_us),
        _ms(call.overhead_us),
        _ms(call.queue_us),
        call.cache_status,
        call.client_ip or "",
        csv_text(call.end_user),
        csv_text(tags_text(call.tags)),
    ]


def tags_text(tags: dict[str, Any] | None) -> str:
    """A call's tags in one cell: JSON, keys sorted (``{}`` when it has none),
    what a script reads back with one ``json.loads``."""
    return json.dumps(tags or {}, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


class _Line:
    """A file-like object for ``csv.writer`` that hands back what it was given."""

    def write(self, text: str) -> str:
        return text


def csv_lines(
    *,
    actor: Actor,
    filters: CallFilters,
    tzinfo: tzinfo,
    chunk_size: int = 5000,
    request: HttpRequest | None = None,
) -> Iterator[str]:
    """The export as lines of text: a byte-order mark and the header first
    (so Excel reads UTF-8), then one line per call, produced lazily. The
    header row is the keys, or for a console download (``request``) in
    another language its labels (``console.kernel.csv_header``), made now, while
    the request's language is active."""
    header = header_line(CSV_COLUMNS, CSV_LABELS, request=request)
    return _csv_body(header, actor=actor, filters=filters, tzinfo=tzinfo, chunk_size=chunk_size)


def _csv_body(
    header: str, *, actor: Actor, filters: CallFilters, tzinfo: tzinfo, chunk_size: int
) -> Iterator[str]:
    writer = csv.writer(_Line())
    yield header
    for call in iter_calls(actor=actor, filters=filters, chunk_size=chunk_size):
        line: str = writer.writerow(csv_row(call, tzinfo))
        yield line


def csv_filename(*, org_slug: str, filters: CallFilters, now: datetime) -> str:
    def stamp(when: datetime | None) -> str:
        return when.strftime("%Y%m%dT%H%MZ") if when else "start"

    start = stamp(filters.start.astimezone(UTC) if filters.start else None)
    end = stamp((filters.end or now).astimezone(UTC))
    return f"calls-{org_slug}-{start}-{end}.csv"
