"""Helpers the invoicing services share."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time
from zoneinfo import ZoneInfo

from django.utils import timezone as djtz
from django.utils.translation import gettext as _

from accounts.facade import ValidationFailed
from console.kernel import timezones
from invoicing.models import InvoiceEvent

_PERIOD = re.compile(r"(\d{4})-(\d{2})\Z")


def parse_period(period: str) -> tuple[int, int]:
    m = _PERIOD.match(period or "")
    if not m or not 1 <= int(m.group(2)) <= 12 or int(m.group(1)) < 2000:
        raise ValidationFailed.from_fields({"period": _("Give the month as YYYY-MM.")})
    return int(m.group(1)), int(m.group(2))


def org_zone(timezone_name: str) -> ZoneInfo:
    """The zone of that name, UTC when unknown (``console.kernel.timezones``'s rule)."""
    return timezones.zone(timezone_name)


def period_bounds(period: str, timezone_name: str) -> tuple[datetime, datetime]:
    """The calendar month ``YYYY-MM`` in the organization's time zone, as UTC instants."""
    year, month = parse_period(period)
    zone = org_zone(timezone_name)
    start = datetime(year, month, 1, tzinfo=zone)
    ny, nm = (year + 1, 1) if month == 12 else (year, month + 1)
    end = datetime(ny, nm, 1, tzinfo=zone)
    return start.astimezone(UTC), end.astimezone(UTC)


def period_of(when: datetime, timezone_name: str) -> str:
    local = when.astimezone(org_zone(timezone_name))
    return f"{local.year:04d}-{local.month:02d}"


def previous_period(period: str) -> str:
    year, month = parse_period(period)
    return f"{year - 1:04d}-12" if month == 1 else f"{year:04d}-{month - 1:02d}"


def event(invoice, type_: str, actor=None, **params) -> None:
    InvoiceEvent.objects.create(
        invoice=invoice, type=type_, params=params, actor=getattr(actor, "user", actor)
    )


def local_today(timezone_name: str) -> date:
    """Today in the organization's time zone."""
    return djtz.now().astimezone(org_zone(timezone_name)).date()


def local_day(when: datetime, timezone_name: str) -> date:
    return when.astimezone(org_zone(timezone_name)).date()


def local_noon(day: date, timezone_name: str) -> datetime:
    """A day as an instant (noon there): shown as that day in any time zone
    within twelve hours of the organization's."""
    return datetime.combine(day, time(12), tzinfo=org_zone(timezone_name)).astimezone(UTC)
