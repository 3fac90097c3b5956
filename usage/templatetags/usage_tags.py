"""Display helpers for usage pages."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import template
from django.utils.translation import gettext_lazy

from console.kernel.money import format_amount

register = template.Library()

# ``CallRecord.cache_status`` as shown on a page, in the active language (the
# model's choices keep their English labels: no migration for a label).
CACHE_STATUS_LABELS = {
    "miss": gettext_lazy("Miss"),
    "prefix_hit": gettext_lazy("Prefix cache hit"),
    "response_hit": gettext_lazy("Response cache hit"),
}


def cache_status_label(value: str) -> str:
    return str(CACHE_STATUS_LABELS.get(value, value))


def exact_money(micro: int | None, currency: str) -> str:
    """``console.kernel.money.format_amount``, exact: as many decimals as the amount needs."""
    return format_amount(micro, currency, exact=True)


def cost_cell(micro: int | None, currency: str, places: int | None = None) -> str:
    """A cost in a column: ``places`` decimals (the same for the whole column,
    enough for its most precise figure), exact otherwise."""
    if places is None or micro is None:
        return format_amount(micro, currency, exact=True)
    return format_amount(micro, currency, places=places)


def tag_links(tags: dict[str, str] | None) -> list[tuple[str, str, str]]:
    """A call's tags, sorted by key, each with the call-log query that
    filters on it: ``[(key, value, "tag=key%3Avalue"), ...]``."""
    return [(k, v, urlencode({"tag": f"{k}:{v}"})) for k, v in sorted((tags or {}).items())]


def us_to_ms(us: int | None) -> str:
    """Microseconds as milliseconds with one decimal (``12.3``), or a dash."""
    if us is None:
        return "—"
    tenths, rest = divmod(us, 100)
    tenths += rest >= 50  # round half up, in integers
    return f"{tenths // 10:,}.{tenths % 10}"


def query_with(params: dict[str, Any], **changes: Any) -> str:
    """The filter query string with ``changes`` applied (``None`` drops a key)."""
    merged = {**params}
    for key, value in changes.items():
        if value in (None, ""):
            merged.pop(key, None)
        else:
            merged[key] = value
    return urlencode(merged, doseq=True)  # a repeated filter (``tag``) is a list


# Registered by call (Django's decorators are untyped to the checker).
register.simple_tag(cache_status_label)
register.simple_tag(exact_money)
register.simple_tag(cost_cell)
register.filter(tag_links)
register.filter(us_to_ms)
register.simple_tag(query_with)
