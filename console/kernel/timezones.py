"""The one rule for times shown to people: in the organization's time zone,
with the zone named where the times are (a column header "Time
(Europe/Berlin)", a CSV header "created_at (Europe/Berlin)").

Pages use the ``org_time`` template library (``{% time_heading %}``,
``{{ value|org_datetime }}``); views, selectors and exports use these
functions. An unknown or empty zone name reads as UTC, never an error."""

from __future__ import annotations

import zoneinfo
from datetime import date, datetime, timedelta

DATETIME_FORMAT = "%Y-%m-%d %H:%M:%S"
DATE_FORMAT = "%Y-%m-%d"


def zone(name: str | None) -> zoneinfo.ZoneInfo:
    """The zone called ``name`` (an IANA name), UTC when unknown or empty."""
    try:
        return zoneinfo.ZoneInfo(name or "UTC")
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return zoneinfo.ZoneInfo("UTC")


def org_zone(organization) -> zoneinfo.ZoneInfo:
    """The organization's zone (its ``timezone`` field); UTC without one."""
    return zone(getattr(organization, "timezone", None))


def heading(label: str, tzinfo: zoneinfo.ZoneInfo) -> str:
    """``"Time (Europe/Berlin)"``: a column of times names its zone."""
    return f"{label} ({tzinfo.key})"


def local(value: datetime, tzinfo: zoneinfo.ZoneInfo) -> datetime:
    return value.astimezone(tzinfo)


def local_date(value: datetime, tzinfo: zoneinfo.ZoneInfo) -> date:
    """The calendar day ``value`` falls on in ``tzinfo``."""
    return value.astimezone(tzinfo).date()


def datetime_text(value: datetime | None, tzinfo: zoneinfo.ZoneInfo) -> str:
    """``"2026-03-14 09:30:05"`` in ``tzinfo``; empty for no time."""
    return value.astimezone(tzinfo).strftime(DATETIME_FORMAT) if value else ""


def day_and_month(name: str | None, now: datetime) -> dict[str, tuple[datetime, datetime]]:
    """Today and this month in the zone called ``name`` (UTC when unknown), as
    the spend caps count them: ``{"d": (start, end), "m": (start, end)}``,
    aware datetimes at local midnight, end exclusive (DST-safe)."""
    tz = zone(name)
    day = now.astimezone(tz).date()
    next_day = day + timedelta(days=1)
    month = day.replace(day=1)
    next_month = (month + timedelta(days=32)).replace(day=1)

    def at(d: date) -> datetime:
        return datetime(d.year, d.month, d.day, tzinfo=tz)

    return {"d": (at(day), at(next_day)), "m": (at(month), at(next_month))}


# Zones offered first in a zone picker: where the console's customers are.
COMMON_ZONES = (
    "UTC",
    "Asia/Shanghai",
    "Asia/Hong_Kong",
    "Asia/Singapore",
    "Asia/Tokyo",
    "Asia/Kolkata",
    "Europe/London",
    "Europe/Berlin",
    "America/New_York",
    "America/Los_Angeles",
)


def zone_choices() -> list[tuple[str, list[tuple[str, str]]]]:
    """Every IANA zone this machine knows, grouped for a ``<select>``: the
    common ones first, then all of them alphabetically."""
    known = zoneinfo.available_timezones()
    common = [z for z in COMMON_ZONES if z in known or z == "UTC"]
    rest = sorted(z for z in known if z not in common and "/" in z and not z.startswith("Etc/"))
    return [
        ("Common", [(z, z) for z in common]),
        ("All zones", [(z, z) for z in rest]),
    ]
