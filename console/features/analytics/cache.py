"""The Cache page's charts: prefix-cache hit rate (by tokens and by calls,
and the share answered from the response cache) and what caching saved at the
organization's price-book rates."""

from __future__ import annotations

from django.utils.translation import gettext as _

from console.features.analytics.chart import (
    GROUP_NOUNS,
    Chart,
    bar,
    busiest_note,
    empty_calls,
    figure,
    hit_rate,
    iso_local,
    line,
    money_axis,
    series_of,
    share_pct,
    split_top,
    time_title,
    x_labels,
)
from console.features.analytics.query import Query
from console.kernel.money import format_amount, money_decimal
from usage import facade as usage


def _prefix_hits(p: dict) -> int:
    """Calls with a prefix-cache hit: any cache hit but a response-cache one."""
    return p["cache_hit_calls"] - p["response_cache_calls"]


def cache_hit(q: Query) -> Chart:
    column = q.group_column("compare")
    s = series_of(q, group_by=column)
    chart = Chart(
        "cache_hit",
        _("Prefix-cache hit rate by %(noun)s") % {"noun": GROUP_NOUNS[column]}
        if column
        else _("Prefix-cache hit rate"),
        columns=[
            "bucket_start",
            "series",
            "calls",
            "calls_with_cache_hit",
            "prompt_tokens",
            "cached_prompt_tokens",
            "token_hit_rate_pct",
            "call_hit_share_pct",
            "prefix_hit_calls",
            "response_cache_calls",
            "prefix_hit_share_pct",
            "response_hit_share_pct",
        ],
    )
    if not s.total("calls"):
        chart.empty = empty_calls(q)
        return chart
    shown, rest = split_top(s.groups)
    x = x_labels(q, s.groups[shown[0]])
    traces = []
    for i, group in enumerate(shown):
        points = s.groups[group]
        label = q.names.label(column, group)
        colour = q.names.colour(column, group, i)
        if column is None:
            traces += _uncompared_lines(colour, x, points)
        else:
            traces.append(line(label, colour, x, [hit_rate(p) for p in points], unit=" %"))
        chart.rows += [_cache_hit_row(q, label, p) for p in points]
    if rest:
        chart.note = busiest_note(len(shown), len(s.groups))
    _cache_totals(chart, s)
    chart.figure = figure(traces, x_title=time_title(q), y_title=_("Hit rate (%)"), y_suffix=" %")
    return chart


def _uncompared_lines(colour: str, x: list, points: list[dict]) -> list:
    """With nothing compared, three lines: the share of prompt tokens served from
    cache, of calls with a prefix-cache hit, of calls answered from the response cache."""
    return [
        line(
            _("Prompt tokens served from cache"),
            colour,
            x,
            [hit_rate(p) for p in points],
            unit=" %",
        ),
        line(
            _("Calls with a prefix-cache hit"),
            "#E69F00",
            x,
            [share_pct(_prefix_hits(p), p["calls"]) for p in points],
            dash="dot",
            unit=" %",
        ),
        line(
            _("Calls answered from the response cache"),
            "#009E73",
            x,
            [share_pct(p["response_cache_calls"], p["calls"]) for p in points],
            dash="dash",
            unit=" %",
        ),
    ]


def _cache_hit_row(q: Query, label: str, p: dict) -> list:
    """One bucket's CSV row of the hit-rate chart."""
    prompt = p["input_tokens"] + p["cache_read_tokens"] + p["cache_write_tokens"]
    return [
        iso_local(p["start"], q.tz),
        label,
        p["calls"],
        p["cache_hit_calls"],
        prompt,
        p["cache_read_tokens"],
        hit_rate(p),
        share_pct(p["cache_hit_calls"], p["calls"]),
        _prefix_hits(p),
        p["response_cache_calls"],
        share_pct(_prefix_hits(p), p["calls"]),
        share_pct(p["response_cache_calls"], p["calls"]),
    ]


def _cache_totals(chart: Chart, s: usage.Series) -> None:
    """The range's totals: a line above the chart and the CSV's total row."""
    summed = ("calls", "cache_hit_calls", "response_cache_calls", "input_tokens",
              "cache_read_tokens", "cache_write_tokens")  # fmt: skip
    t = {c: s.total(c) for c in summed}
    prompt = t["input_tokens"] + t["cache_read_tokens"] + t["cache_write_tokens"]
    prefix = _prefix_hits(t)
    rate = hit_rate(t)
    chart.total_row(
        "Total",
        t["calls"],
        t["cache_hit_calls"],
        prompt,
        t["cache_read_tokens"],
        rate,
        share_pct(t["cache_hit_calls"], t["calls"]),
        prefix,
        t["response_cache_calls"],
        share_pct(prefix, t["calls"]),
        share_pct(t["response_cache_calls"], t["calls"]),
    )

    def pct(v):
        return "—" if v is None else f"{v:.1f} %"

    chart.summary = _(
        "Over this range: %(rate)s of prompt tokens served from cache (%(cached)s of "
        "%(prompt)s); %(prefix)s of %(calls)s calls had a prefix-cache hit, %(response)s were "
        "answered from the response cache."
    ) % {
        "rate": pct(rate),
        "cached": f"{t['cache_read_tokens']:,}",
        "prompt": f"{prompt:,}",
        "prefix": pct(share_pct(prefix, t["calls"])),
        "calls": f"{t['calls']:,}",
        "response": pct(share_pct(t["response_cache_calls"], t["calls"])),
    }


def cache_savings(q: Query) -> Chart:
    saved = usage.cache_savings(
        q.organization_id,
        q.start,
        q.end,
        discount_ppm=usage.discount_ppm_for(q.org.discount_rate),
        filters=q.filters,
        bucket=q.bucket,
        tz=q.tz,
    )
    for name in q.not_models(saved) if saved else ():
        del saved[name]
    cur = q.currency
    chart = Chart(
        "cache_savings",
        _("Saved by prefix caching"),
        columns=[
            "bucket_start",
            "model",
            "cached_prompt_tokens",
            f"saved_{cur}",
            "unpriced_cached_tokens",
        ],
    )
    if not saved:
        chart.empty = (
            empty_calls(q)
            if not series_of(q, bucket=None).total("calls")
            else _(
                "No cached prompt tokens in this range, so nothing was saved. Calls that "
                "share a prompt prefix (a system prompt, say) are served from the prefix cache."
            )
        )
        return chart
    traces, total = _savings_bars(chart, q, saved)
    chart.total_row(
        "Total",
        sum(p["cache_read_tokens"] for points in saved.values() for p in points),
        money_decimal(total, cur, exact=True),
        sum(p["unpriced_tokens"] for points in saved.values() for p in points),
    )
    chart.summary = _("%(amount)s saved in all over this range.") % {
        "amount": format_amount(total, cur)
    }
    chart.note = _(
        "Cached prompt tokens priced at the input price minus the cache-read price of the "
        "price book, at your rates."
    )
    chart.figure = figure(
        traces,
        x_title=time_title(q),
        y_title=_("Saved (%(currency)s)") % {"currency": cur},
        barmode="stack",
        y_currency=cur,
    )
    return chart


def _savings_bars(chart: Chart, q: Query, saved: dict[str, list[dict]]) -> tuple[list, int]:
    """A bar per model over the buckets, each bucket's CSV row; and the total saved."""
    cur = q.currency
    traces = []
    x = None
    total = 0
    for model, points in saved.items():
        x = x or x_labels(q, points)
        traces.append(
            bar(
                model,
                q.names.colour("model", model),
                x,
                [money_axis(p["saved"]) for p in points],
                currency=cur,
            )
        )
        for p in points:
            total += p["saved"]
            chart.rows.append(
                [
                    iso_local(p["start"], q.tz),
                    model,
                    p["cache_read_tokens"],
                    money_decimal(p["saved"], cur, exact=True),
                    p["unpriced_tokens"],
                ]
            )
    return traces, total
