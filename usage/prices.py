"""The price book as ingest reads it: every price row in memory, looked up by
model, currency, organization and time. Loaded once and kept for
``USAGE_PRICEBOOK_TTL_SECONDS`` (and dropped at once in this process when a
price changes)."""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from datetime import datetime
from typing import Any

from django.conf import settings

from usage.models import Grain, Price, Rollup
from usage.rating import PriceRow


class PriceBook:
    """Effective-dated prices. A per-organization row (negotiated price) wins
    over the list row when one is in effect at the call's start."""

    def __init__(self, rows: list[PriceRow]):
        self.loaded_at = time.monotonic()
        series: dict[tuple[str, str, int | None], list[PriceRow]] = {}
        for row in rows:
            series.setdefault((row.model, row.currency, row.organization_id), []).append(row)
        self._rows: dict[tuple[Any, ...], tuple[list[float], list[PriceRow]]] = {}
        for key, items in series.items():
            items.sort(key=lambda r: r.effective_from)
            self._rows[key] = ([r.effective_from.timestamp() for r in items], items)
        self.override_orgs = frozenset(k[2] for k in series if k[2] is not None)
        self.models = frozenset(k[0] for k in series)

    @classmethod
    def load(cls) -> PriceBook:
        rows = [
            PriceRow(
                id=p.id,
                model=p.model.name,
                currency=p.currency,
                organization_id=p.organization_id,
                input_per_mtok=p.input_per_mtok,
                cache_read_per_mtok=p.cache_read_per_mtok,
                cache_write_per_mtok=p.cache_write_per_mtok,
                output_per_mtok=p.output_per_mtok,
                effective_from=p.effective_from,
            )
            for p in Price.objects.select_related("model")
        ]
        return cls(rows)

    def _find(self, key: tuple[Any, ...], ts: float) -> PriceRow | None:
        entry = self._rows.get(key)
        if entry is None:
            return None
        stamps, rows = entry
        i = bisect_right(stamps, ts)
        return rows[i - 1] if i else None

    def lookup(self, model: str, currency: str, organization_id: int, ts: float) -> PriceRow | None:
        """``price_for`` with the time as a POSIX timestamp (the ingest path)."""
        if organization_id in self.override_orgs:
            row = self._find((model, currency, organization_id), ts)
            if row is not None:
                return row
        return self._find((model, currency, None), ts)

    def price_for(
        self, model: str, currency: str, organization_id: int, at: datetime
    ) -> PriceRow | None:
        return self.lookup(model, currency, organization_id, at.timestamp())

    def has_model(self, model: str) -> bool:
        """Whether any price row (any currency or organization) names this model."""
        return model in self.models

    @property
    def age(self) -> float:
        return time.monotonic() - self.loaded_at


_lock = threading.Lock()
_cached: PriceBook | None = None


def get_price_book(*, max_age: float | None = None) -> PriceBook:
    """The cached price book, reloaded when older than ``max_age`` seconds
    (default ``USAGE_PRICEBOOK_TTL_SECONDS``)."""
    global _cached
    ttl = settings.USAGE_PRICEBOOK_TTL_SECONDS if max_age is None else max_age
    book = _cached
    if book is None or book.age >= ttl:
        book = PriceBook.load()
        with _lock:
            _cached = book
    return book


def invalidate_price_book(**_kwargs: Any) -> None:
    global _cached
    with _lock:
        _cached = None


def price_for(model: str, currency: str, organization_id: int, at: datetime) -> PriceRow | None:
    """The price in effect for a call, or ``None`` when the model has none."""
    return get_price_book().price_for(model, currency, organization_id, at)


def unpriced_models(organization_id: int) -> list[str]:
    """Models this organization called that had no price: "needs a price"."""
    return sorted(
        Rollup.objects.filter(
            organization_id=organization_id, grain=Grain.MODEL, unpriced_calls__gt=0
        )
        .values_list("model", flat=True)
        .distinct()
    )
