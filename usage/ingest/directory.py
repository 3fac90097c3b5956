"""What ingest needs to know about organizations and keys, cached in the
worker: an organization's currency and discount, a key's organization and
sub-account. Entries live ``USAGE_PRICEBOOK_TTL_SECONDS`` and are dropped in
this process when the row changes; a key that seems not to match its event
is always re-read before the event is refused, so a stale entry can delay a
discount change by the TTL but never dead-letters a good event."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from django.conf import settings

from accounts.facade import ApiKey, Organization
from usage.rating import discount_ppm_for


@dataclass(frozen=True, slots=True)
class OrgTerms:
    currency: str
    discount_ppm: int


class Directory:
    def __init__(self) -> None:
        self.loaded_at = time.monotonic()
        self.orgs: dict[int, OrgTerms] = {}
        self.keys: dict[int, tuple[int, int | None]] = {}
        self._missing_orgs: set[int] = set()
        self._missing_keys: set[int] = set()
        self._lock = threading.Lock()

    @property
    def age(self) -> float:
        return time.monotonic() - self.loaded_at

    def prefetch(self, org_ids: set[int], key_ids: set[int]) -> None:
        """Load the ids this batch mentions that are not cached yet (one query each)."""
        org_ids = {i for i in org_ids if type(i) is int and i not in self.orgs}
        key_ids = {i for i in key_ids if type(i) is int and i not in self.keys}
        if org_ids:
            self._load_orgs(org_ids)
        if key_ids:
            self._load_keys(key_ids)

    def _load_orgs(self, ids: set[int]) -> None:
        found = {
            pk: OrgTerms(currency, discount_ppm_for(rate))
            for pk, currency, rate in Organization.objects.filter(pk__in=ids).values_list(
                "pk", "currency", "discount_rate"
            )
        }
        with self._lock:
            self.orgs.update(found)

    def _load_keys(self, ids: set[int]) -> None:
        found = {
            pk: (org_id, sub_id)
            for pk, org_id, sub_id in ApiKey.objects.filter(pk__in=ids).values_list(
                "pk", "organization_id", "sub_account_id"
            )
        }
        with self._lock:
            self.keys.update(found)
            for pk in ids - found.keys():
                self.keys.pop(pk, None)

    def reload_keys(self, key_ids: set[int]) -> None:
        """Re-read keys from the database (before refusing events for them)."""
        self._load_keys({k for k in key_ids if type(k) is int})


_cached: Directory | None = None
_lock = threading.Lock()


def get_directory() -> Directory:
    global _cached
    d = _cached
    if d is None or d.age >= settings.USAGE_PRICEBOOK_TTL_SECONDS:
        d = Directory()
        with _lock:
            _cached = d
    return d


def invalidate_directory(**_kwargs: object) -> None:
    global _cached
    with _lock:
        _cached = None
