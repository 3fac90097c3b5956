"""Template context every page shares."""

from __future__ import annotations

from django.conf import settings


def brand(request) -> dict:
    """The console's name in the title, the header and e-mails
    (``CONSOLE_BRAND``: a reseller shows its own)."""
    return {"brand": settings.CONSOLE_BRAND}
