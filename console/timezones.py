"""The one rule for times shown to people: in the organization's time zone,
with the zone named where the times are (a column header "Time
(Europe/Berlin)", a CSV header "created_at (Europe/Berlin)").

Pages use the ``org_time`` template library (``{% time_heading %}``,
``{{ value|org_datetime }}``); views, selectors and exports use these
functions. An unknown or empty zone name reads as UTC, never an error."""

from __future__ import annotations

import zoneinfo
from datetime import date, datetime

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
