"""The Spend page's charts: spend stacked by model, sub-account or key,
token volume by billed class, and the keys that spent most."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from accounts.facade import ApiKey
from console.features.analytics.chart import (
    MAX_GROUPS,
    Chart,
    bar,
    empty_calls,
    figure,
    iso_local,
    money_axis,
    series_of,
    share_pct,
    time_title,
    x_labels,
)
from console.features.analytics.query import PALETTE, TOKEN_COLOURS, Query, can_see_all
from console.kernel.money import format_amount, money_decimal
from usage.facade import (
    ATTRIBUTE_BY_END_USER,
    ATTRIBUTE_BY_TAG,
    Attribution,
    attribution,
    tag_keys,
)

STACK_TITLES = {
    "model": gettext_lazy("Spend by model"),
    "sub_account": gettext_lazy("Spend by sub-account"),
    "key": gettext_lazy("Spend by API key"),
}


def spend(q: Query) -> Chart:
    stack = q.option("stack", "model")
    column = q.group_column("stack", "model")
    cur = q.currency
    s = series_of(q, group_by=column)
    chart = Chart(
        "spend",
        str(STACK_TITLES[stack]),
        columns=["bucket_start", "series", "calls", f"spend_{cur}"],
    )
    if not s.total("calls"):
        chart.empty = empty_calls(q)
        return chart
    groups = sorted(s.groups, key=lambda g: -sum(p["cost"] for p in s.groups[g]))
    shown, rest = groups[:MAX_GROUPS], groups[MAX_GROUPS:]
    x = x_labels(q, s.groups[groups[0]])
    traces = []
    for i, group in enumerate(shown):
        points = s.groups[group]
        label = q.names.label(column, group)
        traces.append(
            bar(
                label,
                q.names.colour(column, group, i),
                x,
                [money_axis(p["cost"]) for p in points],
                currency=cur,
            )
        )
    if rest:
        other = [sum(s.groups[g][i]["cost"] for g in rest) for i in range(len(s.buckets))]
        traces.append(bar(_("Other"), "#BAB0AC", x, [money_axis(v) for v in other], currency=cur))
    for group in groups:
        label = q.names.label(column, group)
        for p in s.groups[group]:
            chart.rows.append(
                [
                    iso_local(p["start"], q.tz),
                    label,
                    p["calls"],
                    money_decimal(p["cost"], cur, exact=True),
                ]
            )
    total, calls = s.total("cost"), s.total("calls")
    chart.total_row("Total", calls, money_decimal(total, cur, exact=True))
    chart.summary = ngettext(
        "%(amount)s in all over this range, for %(calls)s call.",
        "%(amount)s in all over this range, for %(calls)s calls.",
        calls,
    ) % {"amount": format_amount(total, cur), "calls": f"{calls:,}"}
    chart.figure = figure(
        traces,
        x_title=time_title(q),
        y_title=_("Spend (%(currency)s)") % {"currency": cur},
        barmode="stack",
        y_currency=cur,
    )
    return chart


TOKEN_CLASSES = (
    ("input_tokens", gettext_lazy("Input (uncached)")),
    ("cache_read_tokens", gettext_lazy("Cache read")),
    ("cache_write_tokens", gettext_lazy("Cache write")),
    ("output_tokens", gettext_lazy("Output (incl. reasoning)")),
)


def tokens(q: Query) -> Chart:
    s = series_of(q)
    points = s.groups[None]
    chart = Chart(
        "tokens",
        _("Token volume by class"),
        columns=["bucket_start", "calls", *(c for c, _l in TOKEN_CLASSES), "reasoning_tokens"],
    )
    if not s.total("calls"):
        chart.empty = empty_calls(q)
        return chart
    x = x_labels(q, points)
    tokens_unit = " " + _("tokens")
    traces = [
        bar(str(label), TOKEN_COLOURS[col], x, [p[col] for p in points], unit=tokens_unit)
        for col, label in TOKEN_CLASSES
    ]
    for p in points:
        chart.rows.append(
            [
                iso_local(p["start"], q.tz),
                p["calls"],
                *(p[c] for c, _l in TOKEN_CLASSES),
                p["reasoning_tokens"],
            ]
        )
    chart.figure = figure(traces, x_title=time_title(q), y_title=_("Tokens"), barmode="stack")
    return chart


def top_spenders(q: Query) -> Chart:
    cur = q.currency
    s = series_of(q, group_by="api_key_id", bucket=None)
    chart = Chart(
        "top_spenders",
        _("Top spenders (API keys)"),
        columns=[
            "api_key_id",
            "api_key",
            "sub_account",
            "calls",
            "tokens",
            f"spend_{cur}",
            "share_pct",
        ],
    )
    if not s.total("calls"):
        chart.empty = empty_calls(q)
        return chart
    subs = dict(ApiKey.objects.filter(pk__in=list(s.groups)).values_list("pk", "sub_account_id"))
    total = s.total("cost")
    ranked = sorted(s.groups.items(), key=lambda kv: -kv[1][0]["cost"])[:MAX_GROUPS]
    rows = []
    for key_id, (p,) in ranked:
        toks = sum(p[c] for c, _l in TOKEN_CLASSES)
        label = q.names.label("api_key_id", key_id)
        sub = q.names.label("sub_account_id", subs.get(key_id) or 0)
        share = share_pct(p["cost"], total)
        chart.rows.append(
            [key_id, label, sub, p["calls"], toks, money_decimal(p["cost"], cur, exact=True), share]
        )
        rows.append(
            [
                (label, q.calls_url(key=key_id)),
                (sub, None),
                (f"{p['calls']:,}", None),
                (f"{toks:,}", None),
                (format_amount(p["cost"], cur, small=True), None),
                (f"{share:.1f} %" if share is not None else "—", None),
            ]
        )
    chart.table = {
        "headers": [
            _("API key"),
            _("Sub-account"),
            _("Calls"),
            _("Tokens"),
            _("Spend"),
            _("Share"),
        ],
        "numeric": [False, False, True, True, True, True],
        "rows": rows,
    }
    return chart


def _attribution_where(q: Query) -> dict:
    """The call-record filters the chart must honour (a developer's own keys,
    the page's dimension filters); empty: the rollups answer."""
    where = dict(q.filters)
    if can_see_all(q.actor) and not where:
        return {}
    return where


def attribution_chart(q: Query) -> Chart:
    """Spend grouped by the value of one tag key, or by end user, over the
    range: a bar per group (the biggest ``MAX_GROUPS``, then the rest as
    one), the calls without the tag (or an end user) last, and a table of
    every group linked to its calls. The groups sum to the range's spend."""
    cur = q.currency
    choice = q.option("attribute")
    key = q.option("tag_key")
    chart = Chart(
        "spend_attribution",
        _("Spend by end user")
        if choice == "end_user"
        else (
            _("Spend by tag “%(key)s”") % {"key": key}
            if choice == "tag" and key
            else _("Spend by tag")
        ),
        columns=[
            "tag_key",
            "group",
            "calls",
            "input_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "output_tokens",
            f"spend_{cur}",
            "share_pct",
        ],
    )
    if choice not in ("tag", "end_user"):
        chart.empty = _no_grouping_text(q)
        return chart
    if choice == "tag" and not key:
        chart.empty = _("Give the tag key whose values group the spend.")
        return chart
    by = ATTRIBUTE_BY_TAG if choice == "tag" else ATTRIBUTE_BY_END_USER
    a = attribution(
        organization_id=q.organization_id,
        start=q.start,
        end=q.end,
        by=by,
        tag_key=key,
        where=_attribution_where(q),
    )
    if not a.total.calls:
        chart.empty = empty_calls(q)
        return chart
    untagged_label = _("(untagged)") if by == ATTRIBUTE_BY_TAG else _("(no end user)")
    _attribution_bars(chart, a, by, untagged_label, cur)
    _attribution_table(chart, q, a, by, untagged_label)
    total = a.total.cost
    chart.summary = ngettext(
        "%(amount)s in all over this range, for %(calls)s call.",
        "%(amount)s in all over this range, for %(calls)s calls.",
        a.total.calls,
    ) % {"amount": format_amount(total, cur), "calls": f"{a.total.calls:,}"}
    return chart


def _no_grouping_text(q: Query) -> str:
    """What the chart says before a grouping is chosen: the range's tag keys, or how
    calls get tags and end users when none has any."""
    keys = tag_keys(organization_id=q.organization_id, start=q.start, end=q.end)
    return (
        _(
            "Choose “Group spend by” above: a tag's value (tag keys in this range: "
            "%(keys)s) or the end user."
        )
        % {"keys": ", ".join(keys)}
        if keys
        else _(
            "No call in this range carries a tag. Callers tag calls with the "
            "x-gateway-tags header; end users come from the OpenAI user field or "
            "Anthropic metadata.user_id. Choose “Group spend by” above for end users."
        )
    )


def _attribution_bars(chart: Chart, a: Attribution, by: str, untagged_label: str, cur: str) -> None:
    """The bars: the biggest ``MAX_GROUPS`` groups, the rest as one, then the calls
    without the tag (or an end user)."""
    named = [g for g in a.groups if g.value is not None]
    shown, rest = named[:MAX_GROUPS], named[MAX_GROUPS:]
    labels = [g.value for g in shown]
    values = [g.cost for g in shown]
    colours = [PALETTE[i % len(PALETTE)] for i in range(len(shown))]
    if rest:
        labels.append(_("Other (%(n)d more)") % {"n": len(rest)})
        values.append(sum(g.cost for g in rest))
        colours.append("#BAB0AC")
    if a.untagged is not None:
        labels.append(untagged_label)
        values.append(a.untagged.cost)
        colours.append("#D9D9D9")
    trace, arrays = bar(
        _("Spend"), PALETTE[0], labels, [money_axis(v) for v in values], currency=cur
    )
    trace.marker.color = colours
    chart.figure = figure(
        [(trace, arrays)],
        x_title=_("Tag value") if by == ATTRIBUTE_BY_TAG else _("End user"),
        y_title=_("Spend (%(currency)s)") % {"currency": cur},
        x_type="category",
        y_currency=cur,
    )


def _group_calls_url(q: Query, a: Attribution, by: str, value: str | None) -> str | None:
    """The calls of one group (none for the calls without the tag or an end user)."""
    if value is None:
        return None
    if by == ATTRIBUTE_BY_TAG:
        return q.calls_url(tag=f"{a.tag_key}:{value}")
    return q.calls_url(end_user=value)


def _attribution_table(
    chart: Chart, q: Query, a: Attribution, by: str, untagged_label: str
) -> None:
    """Every group's row (its CSV row and its table row, linked to its calls), then
    the total's CSV row."""
    cur = q.currency
    total = a.total.cost
    rows = []
    for g in a.groups:
        label = g.value if g.value is not None else untagged_label
        share = share_pct(g.cost, total)
        chart.rows.append(
            [
                a.tag_key,
                g.value if g.value is not None else "",
                g.calls,
                g.input_tokens,
                g.cache_read_tokens,
                g.cache_write_tokens,
                g.output_tokens,
                money_decimal(g.cost, cur, exact=True),
                share,
            ]
        )
        rows.append(
            [
                (label, _group_calls_url(q, a, by, g.value)),
                (f"{g.calls:,}", None),
                (f"{g.tokens:,}", None),
                (format_amount(g.cost, cur, small=True), None),
                (f"{share:.1f} %" if share is not None else "—", None),
            ]
        )
    chart.rows.append(
        [
            "total",
            "",
            a.total.calls,
            a.total.input_tokens,
            a.total.cache_read_tokens,
            a.total.cache_write_tokens,
            a.total.output_tokens,
            money_decimal(total, cur, exact=True),
            100.0 if total else None,
        ]
    )
    chart.table = {
        "headers": [
            _("Tag value") if by == ATTRIBUTE_BY_TAG else _("End user"),
            _("Calls"),
            _("Tokens"),
            _("Spend"),
            _("Share"),
        ],
        "numeric": [False, True, True, True, True],
        "rows": rows,
    }
