"""Times on pages, one rule (``console.kernel.timezones``): in the current
organization's zone, the zone named in the column header.

``{% time_heading %}`` → "Time (Europe/Berlin)"; ``{% time_heading "Day" %}``
→ "Day (Europe/Berlin)"; ``{{ when|org_datetime }}`` → "2026-03-14 09:30:05"
in that zone; ``{{ when|org_date }}`` → "2026-03-14"."""

from __future__ import annotations

from datetime import datetime

from django import template

from console.kernel import timezones

register = template.Library()


def _zone(context):
    return timezones.org_zone(context.get("current_org"))


@register.simple_tag(takes_context=True)
def time_heading(context, label: str = "Time") -> str:
    return timezones.heading(label, _zone(context))


@register.simple_tag(takes_context=True)
def org_zone_name(context) -> str:
    return _zone(context).key


@register.filter(expects_localtime=False)
def org_datetime(value: datetime | None, organization=None) -> str:
    """Filter form for partials: ``{{ c.started_at|org_datetime:current_org }}``."""
    if not value:
        return ""
    return timezones.datetime_text(value, timezones.org_zone(organization))


@register.filter(expects_localtime=False)
def org_date(value: datetime | None, organization=None) -> str:
    if not value:
        return ""
    return timezones.local_date(value, timezones.org_zone(organization)).isoformat()
